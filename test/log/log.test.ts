// The logger over pino: JSON lines when piped, coloured lines on a terminal, the same fields either
// way, and no secret in any line, whether logged or bound to a child.
import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { createLogger, logFormatOf, loggedEvents, type LogFormat } from '../../src/log/index.js';
import { prettyValue } from '../../src/log/pretty.js';

function logged(format: LogFormat, level: 'debug' | 'info' = 'info'): string[] {
  const lines: string[] = [];
  const log = createLogger({ sink: (l) => lines.push(l), format, level, color: true, now: () => Date.UTC(2026, 0, 2, 3, 4, 5) }).child({ shard: 'r0-s0', apiKey: 'sk-bound' });
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
  const plain = first.replace(new RegExp(`${String.fromCharCode(27)}\\[\\d+m`, 'g'), '');
  for (const field of ['shard=r0-s0', 'from=loading', 'to=ready', 'restarts=2', 'blocks=7', 'err="boom"']) assert.ok(plain.includes(field), `${field} in ${plain}`);
  for (const secret of ['sk-bound', 'sk-field', '"pw"', '"tk"']) assert.ok(!lines.join('\n').includes(secret), `${secret} never printed`);
});

void test('log: a request line on a terminal fits 160 columns; its JSON line keeps the whole receipt', () => {
  const receipt = { tier: 'precise', winner: 'qwen3-0', reason: 'holds 6016 of 6100 prompt tokens (precise); est. TTFT 312 ms against qwen3-1 1820 ms', candidates: [{ replica: 'qwen3-0' }, { replica: 'qwen3-1' }] };
  const fields = {
    reqId: '3f2a9c1e-5b7d-4e2a-9f1c-0a1b2c3d4e5f',
    key: 'tester',
    model: 'qwen3',
    endpoint: 'chat',
    status: 200,
    replica: 'qwen3-0',
    tier: 'precise',
    cached: 6016,
    promptTokens: 6100,
    tookMs: 312,
    receipt,
  };
  const at = { now: () => Date.UTC(2026, 0, 2, 3, 4, 5) };
  const pretty: string[] = [];
  createLogger({ sink: (l) => pretty.push(l), format: 'pretty', ...at }).child({ subsystem: 'gateway' }).info(fields, 'gateway.request');
  assert.equal(pretty.length, 1);
  assert.equal(
    pretty[0],
    '03:04:05.000 INFO gateway.request#3f2a9c1e key=tester model=qwen3 endpoint=chat status=200 replica=qwen3-0 tier=precise cached=6016 promptTokens=6100 took=312ms',
  );
  assert.ok((pretty[0] ?? '').length <= 160, `${(pretty[0] ?? '').length} columns`);
  const json: string[] = [];
  createLogger({ sink: (l) => json.push(l), format: 'json', ...at }).info(fields, 'gateway.request');
  assert.deepEqual((JSON.parse(json[0] ?? '') as { receipt: unknown }).receipt, receipt);
});

void test('log: a long value is cut on a terminal, a list shows its length, a null a dash', () => {
  const pretty: string[] = [];
  const command = `Command failed with exit code 1: /usr/bin/python3 -m vllm.entrypoints.openai.api_server --model /models/qwen3 --kv-events-config '{"enable_kv_cache_events":true}'`;
  createLogger({ sink: (l) => pretty.push(l), format: 'pretty', now: () => 0 }).warn({ from: null, detail: command, tail: ['INFO loading weights', 'ERROR out of memory'] }, 'shard.transition');
  assert.equal(pretty[0], `00:00:00.000 WARN shard.transition from=- detail=${JSON.stringify(command.slice(0, 59) + '…')} tail=[2]`);
});

const names = [
  { why: 'a few names read as the names', v: ['qwen3', 'llama-3.1-8b'], want: 'qwen3,llama-3.1-8b' },
  { why: 'names past one value are counted', v: Array.from({ length: 8 }, (_, i) => `llama-3.1-70b-instruct-${i}`), want: '[8]' },
  { why: 'a list of objects is counted', v: [{ replica: 'a' }], want: '[1]' },
  { why: 'an empty list is counted', v: [], want: '[0]' },
];
for (const r of names) void test(`log: on a terminal, ${r.why}`, () => assert.equal(prettyValue(r.v), r.want));

void test('log: on a terminal, a command to try goes whole and unquoted on its own line; the JSON line keeps it as a field', () => {
  const command = `curl -s http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' -d '{"model":"qwen3","messages":[{"role":"user","content":"Hello"}]}'`;
  const fields = { url: 'http://127.0.0.1:8080/', replicas: 2, models: ['qwen3'], try: command };
  const pretty: string[] = [];
  createLogger({ sink: (l) => pretty.push(l), format: 'pretty', now: () => 0 }).info(fields, 'serve.ready');
  assert.deepEqual(pretty, [`00:00:00.000 INFO serve.ready url=http://127.0.0.1:8080/ replicas=2 models=qwen3\n  try: ${command}`]);
  const json: string[] = [];
  createLogger({ sink: (l) => json.push(l), format: 'json', now: () => 0 }).info(fields, 'serve.ready');
  assert.equal((JSON.parse(json[0] ?? '') as { try: unknown }).try, command);
});

void test('log: loggedEvents finds events by name among complete JSON lines, and leaves a line still being written', () => {
  const lines: string[] = [];
  const log = createLogger({ sink: (l) => lines.push(l), format: 'json', now: () => 0 });
  log.info({ url: 'http://127.0.0.1:1/' }, 'serve.ready');
  log.info({ url: 'http://127.0.0.1:2/' }, 'serve.ready.other');
  const text = `not json: serve.ready\n${lines.join('\n')}\n`;
  assert.deepEqual(
    loggedEvents(text, 'serve.ready').map((e) => e.url),
    ['http://127.0.0.1:1/'],
    'by its exact name, not a prefix, and not in a line that is not JSON',
  );
  assert.deepEqual(loggedEvents(text.slice(0, -5), 'serve.ready.other'), [], 'the last line is not complete yet');
});

void test('log: LLMGW_LOG_FORMAT chooses the format whatever stderr is; unset, a terminal gets pretty lines and a pipe JSON', () => {
  assert.equal(logFormatOf('json', true), 'json');
  assert.equal(logFormatOf('pretty', false), 'pretty');
  assert.equal(logFormatOf(undefined, true), 'pretty');
  assert.equal(logFormatOf('', false), 'json');
  assert.throws(() => logFormatOf('JSON', false), /LLMGW_LOG_FORMAT is "JSON"; it is json or pretty/);
});
