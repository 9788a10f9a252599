// The hash verifier as a seam of its own: digestRun is vLLM's chain (a hybrid block hashed as its
// sub-blocks), the verifier decides verified or mismatch from the first stored blocks, and after a
// mismatch an engine's blocks are hashed by the worker pool, never by the stream's event loop.
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import {
  blockStored,
  digestRun,
  EngineEventStream,
  hashBlocks,
  HashVerifier,
  KvEventPublisher,
  type BlockHasher,
  type DigestTask,
  type EventBatch,
  type KvStatus,
} from '../../src/kv/index.js';
import { HashPool } from '../../src/workers/index.js';
import { probeUntilHeard } from '../support/kv-probe.js';
import { freePort, waitFor } from '../support/wait.js';

const BS = 16;
const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const tokens = (n: number, salt = 0): number[] => Array.from({ length: n }, (_, i) => (i * 7919 + salt * 104729 + 128000) % 151000);
const sorted = (keys: Iterable<bigint>): bigint[] => [...keys].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
const batchOf = (...events: ReturnType<typeof blockStored>[]): EventBatch => ({ ts: 0, events, dataParallelRank: 0 });

void test('digestRun: the chain of a run equals our prompt hashing, from the seed\'s NONE_HASH or a parent digest', () => {
  const t = tokens(4 * BS);
  const want = hashBlocks(t, { blockSizeTokens: BS, seed: '0' }).digests;
  const task = (from: number, parent: Uint8Array | null): DigestTask => ({
    parent,
    seed: '0',
    algo: 'sha256_cbor',
    tokens: t.slice(from * BS),
    blocks: 4 - from,
    blockSizeTokens: BS,
    unitTokens: BS,
    extraKeys: Array.from({ length: 4 - from }, () => null),
  });
  assert.deepEqual(digestRun(task(0, null)), want);
  assert.deepEqual(digestRun(task(2, want[1] ?? null)), want.slice(2));
});

void test('digestRun: a hybrid block of 2 x 16 tokens is the digest of its second 16-token sub-block', () => {
  const t = tokens(4 * BS);
  const want = hashBlocks(t, { blockSizeTokens: BS, seed: '0' }).digests;
  const got = digestRun({ parent: null, seed: '0', algo: 'sha256_cbor', tokens: t, blocks: 2, blockSizeTokens: 32, unitTokens: BS, extraKeys: [null, null] });
  assert.deepEqual(got, [want[1], want[3]]);
});

const verdicts = [
  { why: 'an engine hashing with our seed is verified after verifyBlocks matches', engineSeed: '0', want: 'verified', keyIsOurs: false },
  { why: 'an engine with another PYTHONHASHSEED is a mismatch, keyed by our digest', engineSeed: '42', want: 'mismatch', keyIsOurs: true },
] as const;
for (const v of verdicts) {
  void test(`HashVerifier: ${v.why}`, () => {
    const statuses: KvStatus['type'][] = [];
    const ver = new HashVerifier({ seed: '0', blockSizeTokens: BS, verifyBlocks: 4, onStatus: (s) => statuses.push(s.type) });
    const t = tokens(4 * BS);
    const theirs = hashBlocks(t, { blockSizeTokens: BS, seed: v.engineSeed }).keys as bigint[];
    const ours = hashBlocks(t, { blockSizeTokens: BS, seed: '0' }).keys as bigint[];
    assert.equal(ver.prepare(batchOf(blockStored({ blockHashes: theirs, parentBlockHash: null, tokenIds: t, blockSize: BS })), 0), undefined, 'in-thread hashing is done at once');
    assert.equal(ver.verification, v.want);
    assert.deepEqual(statuses, [v.want === 'verified' ? 'mirror.verified' : 'mirror.hash-mismatch']);
    assert.equal(ver.keyOf(theirs[0] ?? 0n), v.keyIsOurs ? ours[0] : theirs[0]);
  });
}

void test('HashVerifier: a hasher that cannot answer (pool full) leaves blocks unverified, never rejects', async () => {
  const ver = new HashVerifier({ seed: '0', blockSizeTokens: BS, hasher: { digests: () => Promise.reject(new Error('queue full')) } });
  const t = tokens(BS);
  const h = hashBlocks(t, { blockSizeTokens: BS, seed: '0' }).keys as bigint[];
  await ver.prepare(batchOf(blockStored({ blockHashes: h, parentBlockHash: null, tokenIds: t, blockSize: BS })), 0);
  assert.equal(ver.verification, 'pending');
});

void test('the stream and the mirror hold no hash function: all hashing goes through the verifier\'s hasher', () => {
  for (const f of ['mirror.ts', 'event-stream.ts', 'sequencer.ts', 'transport.ts', 'decoder.ts']) {
    const text = readFileSync(join(root, 'src', 'kv', f), 'utf8');
    assert.doesNotMatch(text, /node:crypto|blockMessage|digestRun|hashBlocks/, `src/kv/${f} must leave hashing to the verifier's hasher`);
  }
});

void test('after a mismatch every stored block is hashed in the worker pool, asynchronously, and routes by our keys', async (t) => {
  const pool = new HashPool({ indexBuffer: null, maxThreads: 1 });
  t.after(() => pool.close());
  const tasks: DigestTask[] = [];
  let pending = 0;
  // The pool's own answer, counted: each call is a task for a worker thread, answered later.
  const hasher: BlockHasher = {
    digests: (task) => {
      tasks.push(task);
      pending++;
      return pool.digests(task).finally(() => pending--);
    },
  };
  const [port, replayPort] = [await freePort(), await freePort()];
  const statuses: KvStatus[] = [];
  const stream = new EngineEventStream({
    engineId: 'other-seed',
    port,
    replayPort,
    topic: 'kv',
    blockSizeTokens: BS,
    seed: '0',
    capacityBlocks: 10_000,
    hasher,
    onDelta: () => undefined,
    onStatus: (s) => statuses.push(s),
  });
  t.after(() => stream.close());
  await stream.start();
  const pub = new KvEventPublisher({ endpoint: `tcp://127.0.0.1:${port}`, replayEndpoint: `tcp://127.0.0.1:${replayPort}`, topic: 'kv' });
  t.after(() => pub.close());
  await pub.ready();
  await probeUntilHeard(pub, stream);
  // An engine started with PYTHONHASHSEED=42: four conversations of three blocks each.
  const want: bigint[] = [];
  for (let c = 0; c < 4; c++) {
    const toks = tokens(3 * BS, c + 1);
    want.push(...(hashBlocks(toks, { blockSizeTokens: BS, seed: '0' }).keys as bigint[]));
    const theirs = hashBlocks(toks, { blockSizeTokens: BS, seed: '42' }).keys as bigint[];
    await pub.publish([blockStored({ blockHashes: theirs, parentBlockHash: null, tokenIds: toks, blockSize: BS })]);
  }
  const last = pub.seq - 1;
  await waitFor(() => stream.stats().ranks[0]?.lastSeq === last, { what: 'the four batches sequenced' });
  await stream.whenIdle();
  assert.equal(pending, 0);
  assert.equal(stream.verification, 'mismatch');
  assert.ok(statuses.some((s) => s.type === 'mirror.hash-mismatch'));
  assert.deepEqual(sorted(stream.keys()), sorted(want), 'every block is held under our key');
  assert.equal(
    tasks.reduce((n, task) => n + task.blocks, 0),
    12,
    'each stored block was hashed once, by the pool: the first to verify, every later one to key it',
  );
});
