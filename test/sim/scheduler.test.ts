// The sim's prefix cache follows vLLM's block pool rules; each row is one rule, named for why it holds.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { hashBlocks, keyOfDigest } from '../../src/kv/index.js';
import type { KvEvent } from '../../src/kv/index.js';
import { RankScheduler, stepCostMs } from '../../src/sim/scheduler.js';
import type { FinishReason, RequestAccount, SchedulerOptions } from '../../src/sim/scheduler.js';

const B = 4;

function rank(o: Partial<SchedulerOptions> = {}): { sched: RankScheduler; batches: KvEvent[][] } {
  const batches: KvEvent[][] = [];
  const sched = new RankScheduler({
    rank: 0,
    blockSizeTokens: B,
    numBlocks: 6,
    maxNumSeqs: 8,
    maxNumBatchedTokens: 1024,
    prefillTokensPerS: 1e9,
    decodeTokensPerS: 1e9,
    enablePrefixCaching: true,
    hashSeed: '0',
    hashAlgo: 'sha256_cbor',
    emitEvents: true,
    intBlockHashes: true,
    outputToken: (i) => 200 + i,
    onEvents: (e) => batches.push(e),
    ...o,
  });
  return { sched, batches };
}

function run(
  sched: RankScheduler,
  prompt: number[],
  o: { maxTokens?: number; loraName?: string; cacheSalt?: string; priority?: number } = {},
): Promise<{ reason: FinishReason; account: RequestAccount; tokens: number[] }> {
  return new Promise((resolve) => {
    const tokens: number[] = [];
    sched.submit({
      id: `r${prompt.join('.')}`,
      promptTokenIds: prompt,
      maxTokens: o.maxTokens ?? 1,
      loraId: o.loraName === undefined ? null : 1,
      loraName: o.loraName ?? null,
      cacheSalt: o.cacheSalt ?? null,
      priority: o.priority,
      onToken: (t) => {
        tokens.push(t);
        return 'continue';
      },
      onFinish: (reason, account) => resolve({ reason, account: { ...account }, tokens }),
    });
  });
}

const range = (from: number, n: number): number[] => Array.from({ length: n }, (_, i) => from + i);
const keys = (tokens: number[], o: { loraName?: string; cacheSalt?: string } = {}): bigint[] =>
  hashBlocks(tokens, { blockSizeTokens: B, seed: '0', algo: 'sha256_cbor', ...o }).digests.map(keyOfDigest);

void test('scheduler: a filled prompt is announced in one BlockStored with its full blocks only, parent None', async (t) => {
  const { sched, batches } = rank();
  t.after(() => sched.close());
  const a = range(1, 10);
  await run(sched, a);
  assert.equal(batches.length, 1);
  const ev = batches[0]?.[0];
  assert.equal(ev?.type, 'BlockStored');
  if (ev?.type !== 'BlockStored') return;
  assert.deepEqual(ev.blockHashes, keys(a));
  assert.equal(ev.parentBlockHash, null);
  assert.deepEqual(ev.tokenIds, a.slice(0, 8));
  assert.equal(ev.blockSize, B);
  assert.deepEqual(ev.extraKeys, [null, null]);
  assert.equal(ev.medium, 'GPU');
});

void test('scheduler: the last prompt token is always recomputed, so a fully cached prompt hits one block less', async (t) => {
  const { sched } = rank();
  t.after(() => sched.close());
  const a = range(1, 8);
  await run(sched, a);
  const second = await run(sched, a);
  assert.equal(second.account.cachedTokens, 4);
  assert.equal(second.account.prefillComputedTokens, 4);
});

void test('scheduler: a shared prefix is served from cache and only the rest is computed (prefill work drops)', async (t) => {
  const { sched, batches } = rank();
  t.after(() => sched.close());
  const first = await run(sched, range(1, 10));
  const second = await run(sched, [...range(1, 8), 11, 12, 13, 14, 15]);
  assert.equal(first.account.prefillComputedTokens, 10);
  assert.equal(second.account.cachedTokens, 8);
  assert.equal(second.account.prefillComputedTokens, 5);
  const ev = batches[1]?.[0];
  assert.equal(ev?.type, 'BlockStored');
  if (ev?.type !== 'BlockStored') return;
  assert.equal(ev.parentBlockHash, keys(range(1, 8))[1], 'the new block chains on the last cached one');
  assert.deepEqual(ev.tokenIds, [11, 12, 13, 14]);
  assert.equal(sched.stats.prefixQueries, 23);
  assert.equal(sched.stats.prefixHits, 8);
});

void test('scheduler: eviction takes free blocks in LRU order, a finished prompt tail first, one BlockRemoved each', async (t) => {
  const { sched, batches } = rank();
  t.after(() => sched.close());
  const a = range(1, 10);
  await run(sched, a);
  await run(sched, [...range(1, 8), 11, 12, 13, 14, 15]);
  await run(sched, range(100, 20));
  const batch = batches[2] ?? [];
  const [ka0, ka1] = keys(a);
  const kb2 = keys([...range(1, 8), 11, 12, 13, 14])[2];
  assert.deepEqual(
    batch.map((e) => (e.type === 'BlockRemoved' ? e.blockHashes : e.type)),
    [[kb2], [ka1], 'BlockStored'],
    'removals come before the store of the same step, newest tail first',
  );
  assert.notEqual(ka0, undefined);
});

void test('scheduler: reset is refused while a request holds blocks, then clears with AllBlocksCleared', async (t) => {
  const { sched, batches } = rank({ decodeTokensPerS: 1000 });
  t.after(() => sched.close());
  const running = run(sched, range(1, 10), { maxTokens: 3 });
  await new Promise((r) => setImmediate(r));
  assert.equal(sched.resetPrefixCache(), false);
  await running;
  assert.equal(sched.resetPrefixCache(), true);
  assert.deepEqual(batches.at(-1), [{ type: 'AllBlocksCleared' }]);
  const again = await run(sched, range(1, 10));
  assert.equal(again.account.cachedTokens, 0);
});

void test('scheduler: generated tokens fill blocks too, once they are fed back (the last sampled token never is)', async (t) => {
  const { sched, batches } = rank();
  t.after(() => sched.close());
  // 6 prompt tokens + 3 generated: tokens 0..7 are computed (the 9th is sampled last, never fed back).
  await run(sched, range(1, 6), { maxTokens: 3 });
  const stored = batches.flat().filter((e) => e.type === 'BlockStored');
  assert.equal(stored.length, 2);
  const second = stored[1];
  if (second?.type !== 'BlockStored') return assert.fail('no second BlockStored');
  assert.deepEqual(second.tokenIds, [5, 6, 200, 201]);
});

void test('scheduler: a LoRA adapter name is on every block and cache_salt on block 0 only, as vLLM hashes them', async (t) => {
  const { sched, batches } = rank();
  t.after(() => sched.close());
  const d = range(1, 8);
  await run(sched, d, { loraName: 'sql', cacheSalt: 'tenant-a' });
  const ev = batches[0]?.[0];
  if (ev?.type !== 'BlockStored') return assert.fail('no BlockStored');
  assert.deepEqual(ev.extraKeys, [['sql', 'tenant-a'], ['sql']]);
  assert.equal(ev.loraName, 'sql');
  assert.equal(ev.loraId, 1);
  assert.deepEqual(ev.blockHashes, keys(d, { loraName: 'sql', cacheSalt: 'tenant-a' }));
  const plain = await run(sched, d);
  assert.equal(plain.account.cachedTokens, 0, 'the same tokens without the adapter are a different prefix');
});

void test('scheduler: with no free block a running request preempts the newest one, which recomputes later', async (t) => {
  const { sched } = rank({ numBlocks: 4, decodeTokensPerS: 1e6 });
  t.after(() => sched.close());
  const [a, b] = await Promise.all([run(sched, range(1, 7), { maxTokens: 6 }), run(sched, range(50, 7), { maxTokens: 6 })]);
  assert.equal(a.reason, 'length');
  assert.equal(b.reason, 'length');
  assert.equal(a.tokens.length + b.tokens.length, 12);
  assert.ok(sched.stats.preemptions >= 1, 'someone was preempted');
});

void test('scheduler: no running sequences beyond max-num-seqs; the rest wait', async (t) => {
  const { sched } = rank({ maxNumSeqs: 1, decodeTokensPerS: 1000 });
  t.after(() => sched.close());
  const both = Promise.all([run(sched, range(1, 3), { maxTokens: 2 }), run(sched, range(9, 3), { maxTokens: 2 })]);
  await new Promise((r) => setImmediate(r));
  assert.equal(sched.numRunning, 1);
  assert.equal(sched.numWaiting, 1);
  await both;
});

void test('scheduler: with prefix caching off nothing is hit and nothing is announced', async (t) => {
  const { sched, batches } = rank({ enablePrefixCaching: false });
  t.after(() => sched.close());
  await run(sched, range(1, 10));
  const second = await run(sched, range(1, 10));
  assert.equal(second.account.cachedTokens, 0);
  assert.deepEqual(batches, []);
  assert.equal(sched.stats.prefixQueries, 0, 'no queries are counted either, as vLLM counts none');
});

for (const policy of [{ byPriority: true, want: ['interactive', 'standard', 'batch'] }, { byPriority: false, want: ['batch', 'standard', 'interactive'] }]) {
  void test(`scheduler: ${policy.byPriority ? 'the priority policy serves lower priorities first' : 'first come first served ignores priority'}, as vLLM's`, async () => {
    const { sched } = rank({ maxNumSeqs: 1, byPriority: policy.byPriority });
    const done: string[] = [];
    const sent = [
      { name: 'batch', priority: 1, prompt: range(10, 5) },
      { name: 'standard', priority: 0, prompt: range(20, 5) },
      { name: 'interactive', priority: -1, prompt: range(30, 5) },
    ].map((r) => run(sched, r.prompt, { priority: r.priority, maxTokens: 2 }).then(() => done.push(r.name)));
    await Promise.all(sent);
    assert.deepEqual(done, policy.want);
  });
}

void test('scheduler: under the priority policy a better request preempts the worst running one rather than wait for its slot', async () => {
  const { sched } = rank({ maxNumSeqs: 1, byPriority: true });
  const done: string[] = [];
  let urgent: Promise<unknown> | undefined;
  const batch = new Promise<RequestAccount>((resolve) => {
    sched.submit({
      id: 'batch',
      promptTokenIds: range(10, 5),
      maxTokens: 4,
      loraId: null,
      loraName: null,
      cacheSalt: null,
      priority: 1,
      onToken: () => {
        urgent ??= run(sched, range(30, 5), { priority: -1, maxTokens: 1 }).then(() => done.push('interactive'));
        return 'continue';
      },
      onFinish: (_reason, account) => {
        done.push('batch');
        resolve({ ...account });
      },
    });
  });
  const account = await batch;
  await urgent;
  assert.deepEqual(done, ['interactive', 'batch']);
  assert.equal(account.preemptions, 1);
});

// The bench's engine: 20,000 prompt tokens/s, 50 tokens/s of decode (a 20 ms decode step).
void test('scheduler: a step mixing a prefill chunk and decodes costs the larger of the two, not their sum', () => {
  // A 1,500-token prompt (75 ms) with three sequences decoding beside it: one forward pass, 75 ms.
  assert.equal(stepCostMs(1500, 3, 20_000, 50), 75);
  // A short chunk beside a decode: the decode step's floor (the weights are read once), 20 ms not 25.
  assert.equal(stepCostMs(100, 1, 20_000, 50), 20);
  // Either alone is unchanged: a prefill at its rate, a decode step at its own.
  assert.equal(stepCostMs(100, 0, 20_000, 50), 5);
  assert.equal(stepCostMs(0, 4, 20_000, 50), 20);
});
