// The logger over pino: JSON lines when piped, coloured lines on a terminal, the same fields either
// way, and no secret in any line, whether logged or bound to a child.
import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { createLogger, type LogFormat } from '../../src/log/index.js';

function logged(format: LogFormat, level: 'debug' | 'info' = 'info'): string[] {
  const lines: string[] = [];
  const log = createLogger({ sink: (l) => lines.push(l), format, level, now: () => Date.UTC(2026, 0, 2, 3, 4, 5) }).child({ shard: 'r0-s0', apiKey: 'sk-bound' });
  log.info({ authorization: 'Bearer sk-field', password: 'pw', token: 'tk', from: 'loading', to: 'ready', restarts: 2, blocks: 7n, err: new Error('boom') }, 'shard.transition');
  log.debug({ detail: 1 }, 'shard.probe');
  return lines;
}

void test('log: piped, each event is one JSON line with its fields, its level and time, msg the event name', () => {
  const [line, ...rest] = logged('json');
  assert.equal(rest.length, 0, 'debug is below the default level');
  const o: unknown = JSON.parse(line ?? '');
  assert.deepEqual(o, {
    level: 'info',
    time: '2026-01-02T03:04:05.000Z',
    shard: 'r0-s0',
    apiKey: '[redacted]',
    authorization: '[redacted]',
    password: '[redacted]',
    token: '[redacted]',
    from: 'loading',
    to: 'ready',
    restarts: 2,
    blocks: '7',
    err: { name: 'Error', message: 'boom' },
    msg: 'shard.transition',
  });
});

void test('log: on a terminal, coloured lines carry the same fields and still no secret', () => {
  const lines = logged('pretty', 'debug');
  const first = lines.join('\n');
  assert.match(first, /shard\.probe/, 'debug included at level debug');
  assert.ok(first.includes('\u001b['), 'coloured');
  assert.match(first, /INFO/);
  assert.match(first, /shard\.transition/);
  for (const field of ['"shard":"r0-s0"', '"from":"loading"', '"to":"ready"', '"restarts":2', '"blocks":"7"']) assert.ok(first.includes(field), `${field} in ${first}`);
  for (const secret of ['sk-bound', 'sk-field', '"pw"', '"tk"']) assert.ok(!lines.join('\n').includes(secret), `${secret} never printed`);
});
