// Every fault the sim injects on purpose, one test each, so supervision and event-stream tests can
// rely on the fault doing exactly what its flag says.
import { strict as assert } from 'node:assert';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { Dealer, Subscriber } from 'zeromq';
import { decodeEventBatch } from '../../src/kv/index.js';
import { startSim } from '../../src/sim/index.js';
import type { SimHandle, SimOptions } from '../../src/sim/index.js';
import { freePort, waitFor } from '../support/wait.js';
import { spawnSim } from './spawn-sim.js';

type After = { after(fn: () => Promise<void>): void };

async function sim(t: After, o: Partial<SimOptions>): Promise<SimHandle> {
  const s = await startSim({ model: 'sim-model', port: 0, tokenizer: 'bytes', hashSeed: '0', decodeTokensPerS: 1e4, prefillTokensPerS: 1e6, ...o });
  t.after(() => s.close());
  return s;
}

const health = async (s: { url: string }): Promise<number> => (await fetch(`${s.url}/health`, { signal: AbortSignal.timeout(2000) })).status;

async function complete(url: string, prompt: string): Promise<Response> {
  return fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: 1 }),
    signal: AbortSignal.timeout(10_000),
  });
}

void test('fault --load-time-ms: health (and the API) answer 503 while "loading", then 200', async (t) => {
  const noFaults = { failHealthAfterMs: undefined, crashAfterRequests: undefined, dropEventBatches: [], restartEventsAfterBatches: undefined, hang: false, failLoraLoads: [] };
  // A load far longer than the test: the 503 cannot race the end of loading on a busy machine.
  const loading = await sim(t, { faults: { ...noFaults, loadTimeMs: 600_000 } });
  const r = await fetch(`${loading.url}/health`);
  assert.equal(r.status, 503);
  assert.equal(((await r.json()) as { error: { message: string } }).error.message, 'Loading model');
  assert.equal((await complete(loading.url, 'x')).status, 503);
  const quick = await sim(t, { faults: { ...noFaults, loadTimeMs: 300 } });
  await waitFor(async () => (await health(quick)) === 200, { what: 'health 200 after the load delay' });
  assert.equal((await complete(quick.url, 'x')).status, 200);
});

void test('fault --fail-health-after-ms: health turns 503 once the time is up', async (t) => {
  const s = await sim(t, { faults: { loadTimeMs: 0, failHealthAfterMs: 1500, crashAfterRequests: undefined, dropEventBatches: [], restartEventsAfterBatches: undefined, hang: false, failLoraLoads: [] } });
  await s.ready;
  assert.equal(await health(s), 200);
  await waitFor(async () => (await health(s)) === 503, { what: 'health to fail' });
});

void test('fault --crash-after-requests: the process dies (exit 1) once N requests were answered', async (t) => {
  const { url, child } = await spawnSim(t, ['sim-model', '--tokenizer', 'bytes', '--crash-after-requests', '2']);
  const exited = once(child, 'exit');
  assert.equal((await complete(url, 'one')).status, 200);
  assert.equal((await complete(url, 'two')).status, 200, 'the Nth request is answered in full');
  const [code] = (await exited) as [number | null];
  assert.equal(code, 1);
});

void test('fault --hang: connections are accepted and nothing is ever answered', async (t) => {
  const s = await sim(t, { faults: { loadTimeMs: 0, failHealthAfterMs: undefined, crashAfterRequests: undefined, dropEventBatches: [], restartEventsAfterBatches: undefined, hang: true, failLoraLoads: [] } });
  const sock = connect(Number(new URL(s.url).port), '127.0.0.1');
  t.after(async () => {
    sock.destroy();
  });
  await once(sock, 'connect');
  await assert.rejects(fetch(`${s.url}/health`, { signal: AbortSignal.timeout(300) }), (e: Error) => e.name === 'TimeoutError');
});

async function eventSession(t: After, faults: Partial<SimOptions['faults']>) {
  const [port, replayPort] = [await freePort(), await freePort()];
  const sub = new Subscriber({ linger: 0 });
  t.after(async () => {
    sub.close();
  });
  sub.subscribe();
  await sub.bind(`tcp://127.0.0.1:${port}`);
  const live: { seq: number; types: string[] }[] = [];
  void (async () => {
    for await (const [, seq, payload] of sub) {
      if (seq === undefined || payload === undefined) continue;
      const d = decodeEventBatch(payload);
      live.push({ seq: Number(seq.readBigUInt64BE(0)), types: d.ok ? d.batch.events.map((e) => e.type) : ['undecodable'] });
    }
  })().catch(() => undefined);
  const s = await sim(t, {
    blockSizeTokens: 4,
    kvEvents: { enableKvCacheEvents: true, publisher: 'zmq', endpoint: `tcp://127.0.0.1:${port}`, replayEndpoint: `tcp://127.0.0.1:${replayPort}`, bufferSteps: 100, hwm: 1000, maxQueueSize: 1000, topic: '' },
    faults: { loadTimeMs: 0, failHealthAfterMs: undefined, crashAfterRequests: undefined, dropEventBatches: [], restartEventsAfterBatches: undefined, hang: false, failLoraLoads: [], ...faults },
  });
  await s.ready;
  return { s, live, replayPort };
}

void test('fault --drop-event-batches: the dropped seq never arrives live but replay still has it (a gap to recover)', async (t) => {
  const { s, live, replayPort } = await eventSession(t, { dropEventBatches: [1] });
  let n = 0;
  await waitFor(
    async () => {
      // The first batch may be lost to the PUB/SUB slow-joiner window; keep stepping until seq 2 shows up.
      await complete(s.url, `prompt number ${n++} padded to blocks`);
      return live.some((b) => b.seq >= 2);
    },
    { what: 'a live batch after the dropped one' },
  );
  assert.ok(!live.some((b) => b.seq === 1), 'seq 1 was never sent live');
  const dealer = new Dealer({ linger: 0 });
  t.after(async () => {
    dealer.close();
  });
  dealer.connect(`tcp://127.0.0.1:${replayPort}`);
  const start = Buffer.alloc(8);
  start.writeBigUInt64BE(1n);
  await dealer.send(['', start]);
  const [, , seq, payload] = await dealer.receive();
  assert.equal(seq?.readBigUInt64BE(0), 1n, 'replay starts at the dropped batch');
  assert.ok(payload !== undefined && decodeEventBatch(payload).ok);
});

void test('fault --restart-events-after-batches: seq goes back to 0 without AllBlocksCleared, and the cache is forgotten', async (t) => {
  const { s, live } = await eventSession(t, { restartEventsAfterBatches: 2 });
  const first = 'the first prompt, long enough for blocks';
  await complete(s.url, first);
  let n = 0;
  await waitFor(
    async () => {
      await complete(s.url, `another prompt ${n++} long enough for blocks`);
      const seqs = live.map((b) => b.seq);
      return seqs.some((q, i) => i > 0 && q < (seqs[i - 1] ?? 0));
    },
    { what: 'a live seq that went back (the restarted publisher)' },
  );
  assert.ok(!live.some((b) => b.types.includes('AllBlocksCleared')), 'a restart says nothing about the blocks it lost');
  const again = await complete(s.url, first);
  assert.equal(again.headers.get('x-llmgw-sim-cached-tokens'), '0', 'the restarted engine has an empty cache');
});

void test('sim: a KV events endpoint that cannot bind fails the start (ready rejects), as vLLM fails', async (t) => {
  // ipc:// binds (vLLM's rule); a socket path in a directory that does not exist cannot be bound.
  const s = await sim(t, {
    kvEvents: { enableKvCacheEvents: true, publisher: 'zmq', endpoint: 'ipc:///nonexistent-llmgw-dir/kv.sock', replayEndpoint: null, bufferSteps: 10, hwm: 10, maxQueueSize: 10, topic: '' },
  });
  await assert.rejects(s.ready);
  assert.equal(await health(s), 503);
});

void test('sim: ipc:// with more than one data-parallel rank fails the start, as vLLM refuses to offset it', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-sim-ipc-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const endpoint = `ipc://${join(dir, 'kv.pub')}`;
  const kvEvents = { enableKvCacheEvents: true, publisher: 'zmq', endpoint, replayEndpoint: null, bufferSteps: 10, hwm: 10, maxQueueSize: 10, topic: '' } as const;
  const started = sim(t, { dataParallelSize: 2, kvEvents }).then((s) => s.ready);
  await assert.rejects(started, /must contain 'inproc' or 'tcp'/);
});
