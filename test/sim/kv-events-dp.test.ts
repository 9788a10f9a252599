// Data parallelism: each rank is its own cache with its own publisher on endpoint port + rank (and
// replay port + rank), stamping its rank in every batch, as vLLM's DP ranks do.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { Dealer, Subscriber } from 'zeromq';
import { decodeEventBatch } from '../../src/kv/index.js';
import { startSim } from '../../src/sim/index.js';
import { freePortRange, waitFor } from '../support/wait.js';

void test('kv events: with --data-parallel-size 2, rank r publishes on port + r with data_parallel_rank r, and replays on replay port + r', async (t) => {
  // Rank 1 uses port + 1: both from below the ephemeral range, where no outgoing connection of the
  // suite can take one between the pick and the bind.
  const port = await freePortRange(2);
  const replayPort = await freePortRange(2);
  const seen: { rank: number; port: number; seq: number }[] = [];
  for (const r of [0, 1]) {
    const sub = new Subscriber({ linger: 0 });
    t.after(() => {
      sub.close();
    });
    sub.subscribe();
    await sub.bind(`tcp://127.0.0.1:${port + r}`);
    void (async () => {
      for await (const [, seq, payload] of sub) {
        if (seq === undefined || payload === undefined) continue;
        const d = decodeEventBatch(payload);
        if (d.ok) seen.push({ rank: d.batch.dataParallelRank ?? -1, port: port + r, seq: Number(seq.readBigUInt64BE(0)) });
      }
    })().catch(() => undefined);
  }
  const sim = await startSim({
    model: 'sim-model',
    port: 0,
    tokenizer: 'bytes',
    hashSeed: '0',
    blockSizeTokens: 4,
    dataParallelSize: 2,
    decodeTokensPerS: 1e4,
    kvEvents: { enableKvCacheEvents: true, publisher: 'zmq', endpoint: `tcp://127.0.0.1:${port}`, replayEndpoint: `tcp://127.0.0.1:${replayPort}`, bufferSteps: 100, hwm: 1000, maxQueueSize: 1000, topic: '' },
  });
  t.after(() => sim.close());
  await sim.ready;
  let n = 0;
  await waitFor(
    async () => {
      for (const rank of ['0', '1']) {
        const r = await fetch(`${sim.url}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-data-parallel-rank': rank },
          body: JSON.stringify({ prompt: `distinct prompt ${n++} for rank ${rank}`, max_tokens: 1 }),
        });
        assert.equal(r.status, 200);
      }
      return [0, 1].every((r) => seen.some((s) => s.rank === r));
    },
    { what: 'a live batch from each rank' },
  );
  for (const s of seen) assert.equal(s.port, port + s.rank, 'rank r publishes on port + r');
  const dealer = new Dealer({ linger: 0 });
  t.after(() => {
    dealer.close();
  });
  dealer.connect(`tcp://127.0.0.1:${replayPort + 1}`);
  await dealer.send(['', Buffer.alloc(8)]);
  const [, , , payload] = await dealer.receive();
  const d = payload === undefined ? undefined : decodeEventBatch(payload);
  assert.equal(d?.ok === true ? d.batch.dataParallelRank : undefined, 1, 'rank 1 replays its own batches on replay port + 1');
});
