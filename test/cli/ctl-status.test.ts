// `llmgw ctl status`: the table (each actor under its owner, state, since, reason), and --watch
// following the event stream of a real gateway, reprinting on a change of phase only.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { Registry } from 'prom-client';
import { statusTable, watchStatus, type StatusRow } from '../../src/cli/ctl-status.js';
import { gatewayDefaults, startGateway } from '../../src/gateway/index.js';
import { actor, fakeActors } from '../gateway/fake-actors.js';

void test('ctl status: each actor under the one it belongs to, with its state, since when and why', () => {
  const rows: StatusRow[] = [
    { id: 'shard:r0-s0', parent: 'replica:r0', phase: 'failed', since: 40_000, reason: 'engine exited with code 1' },
    { id: 'replica:r0', parent: 'node:local', phase: 'failed', since: 40_000, reason: undefined },
    { id: 'node:local', parent: undefined, phase: 'running', since: 0, reason: undefined },
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
  const watching = watchStatus(
    { url: gw.url, key: undefined },
    (rows) => {
      printed.push(rows.map((r) => `${r.id} ${r.phase}`));
      if (printed.length === 1) {
        fake.emit(actor('shard:r0-s0', 'loading', 'resting'));
        fake.emit(actor('shard:r0-s0', 'ready'));
      } else stop.abort();
    },
    { signal: stop.signal },
  );
  await assert.rejects(watching, (e: unknown) => e instanceof Error && e.name === 'AbortError');
  assert.deepEqual(printed, [['shard:r0-s0 loading'], ['shard:r0-s0 ready']]);
});
