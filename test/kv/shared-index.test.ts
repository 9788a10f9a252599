import { strict as assert } from 'node:assert';
import { once } from 'node:events';
import { test } from 'node:test';
import { Worker } from 'node:worker_threads';
import { ClusterIndex, IndexReader, MAX_SLOTS, REMOVED_RING, hashBlockKeys } from '../../src/kv/index.js';
import { hasCode } from '../../src/errors/index.js';
import { waitFor } from '../support/wait.js';

/** Deterministic 64-bit keys (splitmix64), so a failure reproduces. */
function keys(n: number, seed = 1n): bigint[] {
  const out: bigint[] = [];
  let x = seed;
  for (let i = 0; i < n; i++) {
    x = BigInt.asUintN(64, x + 0x9e3779b97f4a7c15n);
    let z = x;
    z = BigInt.asUintN(64, (z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n);
    z = BigInt.asUintN(64, (z ^ (z >> 27n)) * 0x94d049bb133111ebn);
    out.push(z ^ (z >> 31n));
  }
  return out;
}

const bit = (s: number): bigint => 1n << BigInt(s);

void test('add, holds and remove per slot, across both mask words (slots 0, 31, 32, 63)', () => {
  const index = new ClusterIndex({ capacityBlocks: 100 });
  const reader = new IndexReader(index.buffer);
  const [a, b] = keys(2);
  assert.ok(a !== undefined && b !== undefined);
  for (const s of [0, 31, 32, 63]) assert.equal(index.add(s, [a]), 1);
  assert.equal(index.add(0, [a]), 0, 'adding a held key again changes nothing');
  assert.equal(reader.holds(a), bit(0) | bit(31) | bit(32) | bit(63));
  assert.equal(reader.holds(b), 0n);
  assert.equal(index.size, 1);
  assert.equal(index.remove(31, [a, b]), 1);
  assert.equal(reader.holds(a), bit(0) | bit(32) | bit(63));
  index.remove(0, [a]);
  index.remove(32, [a]);
  index.remove(63, [a]);
  assert.equal(reader.holds(a), 0n);
  assert.equal(index.size, 0, 'a key no slot holds leaves the table');
});

void test(`slots outside 0..${MAX_SLOTS - 1} are refused with the limit named`, () => {
  const index = new ClusterIndex({ capacityBlocks: 10 });
  assert.throws(() => index.add(MAX_SLOTS, [1n]), (e: unknown) => hasCode(e, 'LLMGW_INDEX_SLOT') && /at most 64/.test(e.message));
  assert.throws(() => index.add(-1, [1n]), (e: unknown) => hasCode(e, 'LLMGW_INDEX_SLOT'));
});

void test('key 0 (the empty marker) is still a key: it lives in its own entry', () => {
  const index = new ClusterIndex({ capacityBlocks: 10 });
  const reader = new IndexReader(index.buffer);
  index.add(5, [0n]);
  assert.equal(reader.holds(0n), bit(5));
  assert.equal(index.size, 1);
  assert.equal(index.clearSlot(5), 1);
  assert.equal(reader.holds(0n), 0n);
  assert.equal(index.size, 0);
});

/** Keys that all want the same home entry (equal low words), to build long clusters. */
const colliding = (n: number, lo: bigint): bigint[] => Array.from({ length: n }, (_, i) => (BigInt(i + 1) << 32n) | lo);

void test('deleting from the middle of a collision cluster keeps every later key reachable (no tombstones)', () => {
  for (const lo of [0n, 0x7fffffffn, 0xffffffffn]) {
    // lo = 0xffffffff homes at the last entry, so the cluster wraps around to the start.
    const index = new ClusterIndex({ capacityBlocks: 64 });
    const reader = new IndexReader(index.buffer);
    const ks = colliding(20, lo);
    index.add(1, ks);
    for (const k of ks.filter((_, i) => i % 3 === 0)) index.remove(1, [k]);
    for (const [i, k] of ks.entries()) assert.equal(reader.holds(k), i % 3 === 0 ? 0n : bit(1), `key ${i} of cluster at ${lo}`);
    assert.equal(index.size, ks.length - Math.ceil(ks.length / 3));
  }
});

void test('random adds, removes and clears agree with a reference model', () => {
  const index = new ClusterIndex({ capacityBlocks: 3000 });
  const reader = new IndexReader(index.buffer);
  const pool = [...keys(2000, 7n), ...colliding(40, 0xfffffff0n), ...colliding(40, 5n)];
  const model = new Map<bigint, bigint>();
  let x = 12345;
  const rnd = (n: number): number => {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    return x % n;
  };
  for (let round = 0; round < 40; round++) {
    for (let op = 0; op < 400; op++) {
      const k = pool[rnd(pool.length)] ?? 0n;
      const s = rnd(6) * 12;
      if (rnd(3) > 0) {
        index.add(s, [k]);
        model.set(k, (model.get(k) ?? 0n) | bit(s));
      } else {
        index.remove(s, [k]);
        const m = (model.get(k) ?? 0n) & ~bit(s);
        if (m === 0n) model.delete(k);
        else model.set(k, m);
      }
    }
    if (round % 10 === 9) {
      const s = rnd(6) * 12;
      index.clearSlot(s);
      for (const [k, m] of model) {
        const left = m & ~bit(s);
        if (left === 0n) model.delete(k);
        else model.set(k, left);
      }
    }
    for (const k of pool) assert.equal(reader.holds(k), model.get(k) ?? 0n);
    assert.equal(index.size, model.size);
  }
});

void test('leadingBlocks counts, per slot, the held keys from the first one up to the first gap', () => {
  const index = new ClusterIndex({ capacityBlocks: 100 });
  const reader = new IndexReader(index.buffer);
  const ks = keys(10);
  index.add(0, ks.slice(0, 10));
  index.add(1, ks.slice(0, 4));
  index.add(2, ks.slice(1, 10)); // no block 0: holds nothing LEADING
  index.add(3, [...ks.slice(0, 2), ...ks.slice(3, 10)]);
  const slots = [0, 1, 2, 3, 4];
  assert.deepEqual(reader.leadingBlocks(ks, slots), [10, 4, 0, 2, 0]);
  assert.deepEqual(reader.leadingBlocks(BigUint64Array.from(ks), slots), [10, 4, 0, 2, 0], 'same from a BigUint64Array');
  assert.deepEqual(reader.leadingBlocks([], slots), [0, 0, 0, 0, 0]);
});

void test('removals counts, per slot, the keys it lost (remove and clearSlot), never the ones another slot lost or it never held', () => {
  const index = new ClusterIndex({ capacityBlocks: 100 });
  const reader = new IndexReader(index.buffer);
  const ks = keys(6);
  index.add(0, ks);
  index.add(1, ks.slice(0, 2));
  assert.deepEqual([reader.removals(0), reader.removals(1)], [0, 0], 'adds move nothing');
  index.remove(0, [ks[3] ?? 0n]);
  index.remove(1, [ks[5] ?? 0n]);
  assert.deepEqual([reader.removals(0), reader.removals(1)], [1, 0], 'a key slot 1 never held is no loss of its');
  index.clearSlot(1);
  assert.deepEqual([reader.removals(0), reader.removals(1)], [1, 2]);
});

void test('keptRun: a run stands whole through losses of other keys, is cut at the first of its own the slot lost, and goes back to 0 past what the ring remembers', () => {
  const index = new ClusterIndex({ capacityBlocks: 20_000 });
  const reader = new IndexReader(index.buffer);
  const run = BigUint64Array.from(keys(40));
  const others = keys(REMOVED_RING + 10, 7n);
  index.add(0, [...run, ...others]);
  index.add(1, run);
  const since = [reader.removals(0), reader.removals(1)];
  assert.equal(reader.keptRun(0, run, 40, since[0] ?? 0), 40, 'nothing lost');
  index.remove(0, others.slice(0, 100));
  assert.equal(reader.keptRun(0, run, 40, since[0] ?? 0), 40, 'an engine evicting other blocks leaves the run whole');
  index.remove(0, [run[25] ?? 0n, run[12] ?? 0n]);
  assert.equal(reader.keptRun(0, run, 40, since[0] ?? 0), 12, 'cut at the first of its keys lost, whatever the order of the losses');
  assert.equal(reader.keptRun(0, run, 10, since[0] ?? 0), 10, 'a shorter run before the loss still stands');
  index.add(0, [run[12] ?? 0n]);
  assert.equal(reader.keptRun(0, run, 40, since[0] ?? 0), 12, 'a key back since is still probed again, from where it was lost');
  assert.deepEqual(reader.leadingBlocks(run, [0], [12]), [25], 'and the probe from there finds it back and stops at the next gap');
  // A run of 25 that stood at this count, then 3000 losses of other keys and one of its own.
  const later = reader.removals(0);
  index.remove(0, [...others.slice(100, 3100), run[20] ?? 0n, ...others.slice(3100, 3200)]);
  assert.equal(reader.keptRun(0, run, 25, later), 20, 'found among thousands of other losses');
  index.remove(0, others.slice(3200));
  assert.equal(reader.keptRun(0, run, 40, since[0] ?? 0), 0, `over ${REMOVED_RING} losses: the ring no longer says which, so the run is probed from the start`);
  assert.equal(reader.keptRun(1, run, 40, since[1] ?? 0), 40, 'another slot keeps its own losses');
  index.clearSlot(1);
  assert.equal(reader.keptRun(1, run, 40, since[1] ?? 0), 0, 'a slot emptied lost the whole run');
});

void test('leadingBlocks from a known run probes only past it, and still stops at the first gap after', () => {
  const index = new ClusterIndex({ capacityBlocks: 100 });
  const reader = new IndexReader(index.buffer);
  const ks = keys(16);
  index.add(0, [...ks.slice(0, 10), ...ks.slice(11, 16)]);
  index.add(1, ks.slice(0, 16));
  assert.deepEqual(reader.leadingBlocks(ks, [0, 1], [6, 12]), [10, 16]);
  // What comes before `from` is the caller's word (a run it found while the slot lost nothing):
  // the probe does not look there again.
  index.remove(1, [ks[2] ?? 0n]);
  assert.deepEqual(reader.leadingBlocks(ks, [1], [12]), [16]);
  assert.deepEqual(reader.leadingBlocks(ks, [1], [0]), [2]);
});

void test('leadingBlocks over real prompt keys: a replica that cached a prompt leads by its full blocks', () => {
  const index = new ClusterIndex({ capacityBlocks: 1000 });
  const reader = new IndexReader(index.buffer);
  const tokens = Uint32Array.from({ length: 100 }, (_, i) => 1000 + i);
  const o = { blockSizeTokens: 16, seed: '0' };
  index.add(2, hashBlockKeys(tokens.subarray(0, 64), o));
  assert.deepEqual(reader.leadingBlocks(hashBlockKeys(tokens, o), [2, 3]), [4, 0]);
});

void test('a full index refuses new keys and counts them, never grows past its capacity', () => {
  const index = new ClusterIndex({ capacityBlocks: 50 });
  index.add(0, keys(80));
  assert.equal(index.size, 50);
  assert.equal(index.dropped, 30);
  assert.equal(index.add(1, keys(10)), 10, 'keys already present still take another slot');
});

void test('capacity must be a positive size, named in the error', () => {
  assert.throws(() => new ClusterIndex({ capacityBlocks: 0 }), (e: unknown) => hasCode(e, 'LLMGW_INDEX_CAPACITY'));
});

void test('a reader refuses a buffer that is not a cluster index', () => {
  assert.throws(() => new IndexReader(new SharedArrayBuffer(1024)), (e: unknown) => hasCode(e, 'LLMGW_INDEX_LAYOUT'));
});

void test('one million blocks fit, and every one is found', () => {
  const index = new ClusterIndex({ capacityBlocks: 1_000_000 });
  const reader = new IndexReader(index.buffer);
  const ks = new BigUint64Array(1_000_000);
  const words = new Uint32Array(ks.buffer);
  let x = 99;
  for (let i = 0; i < words.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    words[i] = x >>> 0;
  }
  index.add(7, ks);
  assert.equal(index.size + index.dropped, 1_000_000);
  assert.equal(index.dropped, 0);
  for (let i = 0; i < ks.length; i += 997) assert.equal(reader.holds(ks[i] ?? 0n), bit(7));
});

void test('a reader in a worker thread never sees a slot that was not given while the main thread writes', async (t) => {
  const index = new ClusterIndex({ capacityBlocks: 20_000 });
  const stable = keys(500, 3n);
  const churn = [...keys(4000, 4n), ...colliding(30, 0xffffffffn)];
  const stableMask = bit(1) | bit(40);
  index.add(1, stable);
  index.add(40, stable);
  const stop = new Int32Array(new SharedArrayBuffer(8));
  const worker = new Worker(new URL('./index-reader-worker.js', import.meta.url), {
    workerData: { buffer: index.buffer, stable, stableMask, churn, churnMask: bit(2) | bit(3), stop },
  });
  t.after(() => worker.terminate());
  const result = once(worker, 'message', { signal: AbortSignal.timeout(30_000) });
  await waitFor(() => Atomics.load(stop, 1) === 1, { what: 'the reader worker to start' });
  // Churn keys come and go in two slots, so entries are inserted, deleted and shifted under the reader.
  for (let round = 0; round < 30; round++) {
    index.add(2, churn);
    index.add(3, churn.filter((_, i) => i % 2 === 0));
    index.remove(2, churn.filter((_, i) => i % 3 === 0));
    index.clearSlot(3);
    index.remove(2, churn);
    await new Promise((r) => setImmediate(r));
  }
  Atomics.store(stop, 0, 1);
  const [r] = (await result) as [{ checks: number; misses: number; wrong: number; note: string[] }];
  assert.equal(r.wrong, 0, r.note.join('; '));
  assert.ok(r.checks > 0);
  t.diagnostic(`reader checks ${r.checks}, misses on stable keys ${r.misses}`);
  for (const k of stable) assert.equal(new IndexReader(index.buffer).holds(k), stableMask);
});
