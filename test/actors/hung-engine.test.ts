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
import { probeHealth } from '../../src/actors/shard-machine.js';
import { gatewayDefaults, startGateway } from '../../src/gateway/index.js';
import { type ReplicaView } from '../../src/routing/index.js';
import { forceGcEvery } from '../support/gc.js';
import { waitFor } from '../support/wait.js';
import { spawnSim } from '../sim/spawn-sim.js';
import { startFakeEngine } from '../gateway/fake-engine.js';

const intervalMs = 100;
const failures = 2;
const probeTimeoutMs = 1_000;
// The shard chart fails an engine after `failures` probes in a row got no answer, each resting
// intervalMs before the next: the bound the probes must meet.
const healthTimeoutMs = failures * (intervalMs + probeTimeoutMs);

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
    // The chart's own probe actor, as the shard invokes it: each must settle on "no answer" in time.
    const probes = async (): Promise<number[]> => {
      const statuses: number[] = [];
      for (let i = 0; i < failures; i++) {
        const probe = createActor(probeHealth, { input: { url: `${url}/health`, timeoutMs: probeTimeoutMs } }).start();
        t.after(() => probe.stop());
        statuses.push(await toPromise(probe));
      }
      return statuses;
    };
    // Twice the bound: a loaded CI box may be slow, but a lost deadline never ends at all.
    const statuses = await within(probes(), 2 * healthTimeoutMs + 2_000, 'the health probes failing the hung engine');
    assert.deepEqual(statuses, Array.from({ length: failures }, () => 0));
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
