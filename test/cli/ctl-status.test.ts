// `llmgw ctl status`: the table (each actor under its owner, state, since, reason), and --watch
// following the event stream of a real gateway, reprinting on a change of phase only.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { Registry } from 'prom-client';
import { changeLine, redrawFrame, statusTable, watchStatus, type StatusRow } from '../../src/cli/ctl-status.js';
import { gatewayDefaults, startGateway } from '../../src/gateway/index.js';
import { actor, fakeActors } from '../gateway/fake-actors.js';

void test('ctl status: each actor under the one it belongs to, with its state, since when and why', () => {
  const rows: StatusRow[] = [
    { id: 'shard:r0-s0', parent: 'replica:r0', phase: 'failed', since: 40_000, reason: 'engine exited with code 1', detail: 'Command failed with exit code 1: vllm serve /m' },
    { id: 'replica:r0', parent: 'node:local', phase: 'failed', since: 40_000, reason: undefined, detail: undefined },
    { id: 'node:local', parent: undefined, phase: 'running', since: 0, reason: undefined, detail: undefined },
  ];
  assert.equal(
    statusTable(rows, 100_000),
    [
      'ACTOR            STATE    SINCE  REASON',
      'node:local       running  100s',
      '  replica:r0     failed   60s',
      '    shard:r0-s0  failed   60s    engine exited with code 1',
      '',
    ].join('\n'),
  );
  // -v: the detail and the log's last lines under the actor whose reason they explain.
  assert.equal(
    statusTable(rows, 100_000, new Map([['shard:r0-s0', ['Traceback (most recent call last):', 'torch.OutOfMemoryError: CUDA out of memory']]])).split('\n').slice(3).join('\n'),
    [
      '    shard:r0-s0  failed   60s    engine exited with code 1',
      '      | Command failed with exit code 1: vllm serve /m',
      '      | Traceback (most recent call last):',
      '      | torch.OutOfMemoryError: CUDA out of memory',
      '',
    ].join('\n'),
  );
});

void test('ctl status --watch on a terminal: each frame drawn over the last, cut to the width, nothing left below', () => {
  const frame = redrawFrame('ACTOR  STATE\nshard:a-very-long-actor-name  ready\n', 20);
  assert.equal(frame, '\x1b[HACTOR  STATE\x1b[K\nshard:a-very-long-a…\x1b[K\n\x1b[J');
  assert.ok(!frame.includes('\x1b[2J'), 'no clear-screen: it pushes every old table into the scrollback');
});

void test('ctl status --watch piped: a change is one line with its time, actor, phases and reason', () => {
  const before = { id: 'shard:r0-s0', parent: 'replica:r0', phase: 'ready', since: 0, reason: undefined, detail: undefined };
  const after = { ...before, phase: 'failed', since: Date.UTC(2026, 0, 1, 12, 3, 4), reason: 'vllm was killed by SIGKILL' };
  assert.equal(changeLine(before, after), '12:03:04 shard:r0-s0 ready -> failed  vllm was killed by SIGKILL\n');
  assert.equal(changeLine(undefined, { ...before, phase: 'starting' }), '00:00:00 shard:r0-s0 · -> starting\n');
});

void test('ctl status --watch: the whole table first, then again when a phase changes, not on every probe', async (t) => {
  const fake = fakeActors();
  const gw = await startGateway({
    config: { ...gatewayDefaults, port: 0, router: { ...gatewayDefaults.router, loadPollIntervalMs: 0 } },
    directory: { ready: () => [], models: () => [] },
    registry: new Registry(),
    actors: fake.source,
  });
  t.after(() => gw.close());
  const stop = new AbortController();
  const printed: string[][] = [];
  const changes: string[] = [];
  const watching = watchStatus(
    { url: gw.url, key: undefined },
    (c) => {
      printed.push(c.rows.map((r) => `${r.id} ${r.phase}`));
      changes.push(c.changed === undefined ? 'all' : `${c.changed.before?.phase ?? ''} -> ${c.changed.after.phase}`);
      if (printed.length === 1) {
        fake.emit(actor('shard:r0-s0', 'loading', 'resting'));
        fake.emit(actor('shard:r0-s0', 'ready'));
      } else stop.abort();
    },
    { signal: stop.signal },
  );
  await assert.rejects(watching, (e: unknown) => e instanceof Error && e.name === 'AbortError');
  assert.deepEqual(printed, [['shard:r0-s0 loading'], ['shard:r0-s0 ready']]);
  assert.deepEqual(changes, ['all', 'loading -> ready']);
});
