// A hung engine (SIGSTOPped: its port still accepts, nothing answers) must be failed by the health
// watch within its bound even while the agent's heap is being collected. With AbortSignal.any over
// AbortSignal.timeout a full GC dropped the probe's deadline (nodejs/node#57736): the probe never
// ended, the engine stayed ready, and a request waited 29.6 s.
import { strict as assert } from 'node:assert';
import { createServer, type Socket } from 'node:net';
import { test } from 'node:test';
import { Registry } from 'prom-client';
import { createActor, toPromise } from 'xstate';
import { probeOnce } from '../../src/actors/processes.js';
import { watchHealth } from '../../src/actors/shard-machine.js';
import { gatewayDefaults, startGateway, type ReplicaView } from '../../src/gateway/index.js';
import { forceGcEvery } from '../support/gc.js';
import { waitFor } from '../support/wait.js';
import { spawnSim } from '../sim/spawn-sim.js';
import { startFakeEngine } from '../gateway/fake-engine.js';

const intervalMs = 100;
const failures = 2;
// probeOnce's own timeout in the watch is max(1 s, interval): the bound the watch must meet.
const healthTimeoutMs = failures * (intervalMs + Math.max(1_000, intervalMs));

/** Resolves with `p`, or rejects once `ms` pass: the test's own bound, so a hang fails instead of stalling. */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not happen within ${ms} ms`)), ms);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

void test('a SIGSTOPped sim under forced major GCs is failed by the health watch within its health timeout', async (t) => {
  const { url, child } = await spawnSim(t, ['sim-model', '--tokenizer', 'bytes']);
  const pid = child.pid;
  assert.ok(pid !== undefined);
  assert.equal(await probeOnce(`${url}/health`, { signal: AbortSignal.timeout(5_000), timeoutMs: 1_000 }), 200);
  process.kill(pid, 'SIGSTOP');
  const stopGc = forceGcEvery(5);
  try {
    const watch = createActor(watchHealth, { input: { url: `${url}/health`, intervalMs, failures } }).start();
    t.after(() => watch.stop());
    // Twice the bound: a loaded CI box may be slow, but a lost deadline never ends at all.
    const reason = await within(toPromise(watch), 2 * healthTimeoutMs + 2_000, 'the health watch failing the hung engine');
    assert.match(reason, /failed 2 times in a row \(last: no answer\)/);
  } finally {
    stopGc();
    process.kill(pid, 'SIGCONT');
  }
});

void test('the queue poller keeps polling a live engine while another hangs, under forced major GCs', async (t) => {
  // A port that accepts and never answers, as a stopped engine's does.
  const held = new Set<Socket>();
  const hung = createServer((s) => held.add(s));
  await new Promise<void>((resolve) => hung.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => {
    for (const s of held) s.destroy();
    hung.close(() => resolve());
  }));
  const address = hung.address();
  assert.ok(address !== null && typeof address === 'object');
  const live = await startFakeEngine({ id: 'live' });
  t.after(() => live.close());
  const view = (id: string, u: URL): ReplicaView => ({
    id, node: 'n', model: 'm', adapters: [], url: u, apiKey: undefined, generation: 1, kvEvents: false, blockSizeTokens: 16, hashSeed: '0', dataParallelSize: 1,
  });
  const replicas = [view('hung', new URL(`http://127.0.0.1:${address.port}/`)), view('live', live.url)];
  const gw = await startGateway({
    config: { ...gatewayDefaults, port: 0, router: { ...gatewayDefaults.router, loadPollIntervalMs: 50 } },
    directory: { ready: () => replicas, models: () => ['m'] },
    registry: new Registry(),
  });
  t.after(() => gw.close());
  const stopGc = forceGcEvery(5);
  t.after(stopGc);
  live.waiting = 3;
  await waitFor(() => gw.load.get('live').engineWaiting === 3, { what: 'the first poll of the live engine', timeoutMs: 10_000 });
  // The next round waits on the hung engine's poll: it must time out (200 ms) for the loop to go on.
  live.waiting = 5;
  await waitFor(() => gw.load.get('live').engineWaiting === 5, { what: 'a poll after the hung engine timed out', timeoutMs: 10_000 });
});
