// EngineMirror rules, one row per rule: net deltas of OUR keys, reference counts for
// re-announcements, ranks/media/groups kept apart, clears, the capacity bound, and the
// self-verification that keeps routing working when an engine hashes with another seed.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import type { BlockRemoved, BlockStored, EventBatch, KvEvent } from '../../src/kv/events.js';
import { keyOfDigest, type BlockKey, type HashOptions } from '../../src/kv/block-key.js';
import { hashBlocks } from '../../src/kv/hashing.js';
import type { KvDelta } from '../../src/kv/delta.js';
import { EngineMirror, type MirrorStatus } from '../../src/kv/mirror.js';

const BS = 16;
const tokens = (n: number, salt = 0): number[] => Array.from({ length: n }, (_, i) => (i * 7919 + salt * 104729 + 128000) % 151000);
const hashOpts = (seed = '0', more: Partial<HashOptions> = {}): HashOptions => ({ blockSizeTokens: BS, seed, ...more });

function stored(o: {
  hashes: (bigint | Uint8Array)[];
  tokens?: number[];
  parent?: bigint | Uint8Array | null;
  blockSize?: number;
  medium?: string | null;
  groupIdx?: number | null;
  loraName?: string | null;
  extraKeys?: (unknown[] | null)[] | null;
}): BlockStored {
  return {
    type: 'BlockStored',
    blockHashes: o.hashes,
    parentBlockHash: o.parent ?? null,
    tokenIds: o.tokens ?? [],
    blockSize: o.blockSize ?? BS,
    loraId: o.loraName === undefined || o.loraName === null ? null : 1,
    medium: o.medium === undefined ? 'GPU' : o.medium,
    loraName: o.loraName ?? null,
    extraKeys: o.extraKeys === undefined ? o.hashes.map(() => null) : o.extraKeys,
    groupIdx: o.groupIdx === undefined ? 0 : o.groupIdx,
    kvCacheSpecKind: null,
    kvCacheSpecSlidingWindow: null,
    locality: null,
  };
}

const removed = (hashes: bigint[], medium: string | null = 'GPU', groupIdx: number | null = 0): BlockRemoved => ({
  type: 'BlockRemoved',
  blockHashes: hashes,
  medium,
  groupIdx,
  locality: null,
});

const batch = (...events: KvEvent[]): EventBatch => ({ ts: 1767225600, events, dataParallelRank: 0 });

// A prompt of n blocks as vLLM (seed "0" unless told) would store it on the GPU in one event.
function prompt(nBlocks: number, o: { seed?: string; salt?: number } = {}) {
  const t = tokens(nBlocks * BS, o.salt);
  const h = hashBlocks(t, hashOpts(o.seed ?? '0'));
  return { tokens: t, keys: h.keys as bigint[], digests: h.digests, event: stored({ hashes: h.keys as bigint[], tokens: t }) };
}

function mirror(o: { capacityBlocks?: number; marginFactor?: number; seed?: string; verifyBlocks?: number } = {}) {
  const statuses: MirrorStatus[] = [];
  const m = new EngineMirror({
    seed: o.seed ?? '0',
    blockSizeTokens: BS,
    capacityBlocks: o.capacityBlocks ?? 1000,
    marginFactor: o.marginFactor ?? 2,
    verifyBlocks: o.verifyBlocks ?? 4,
    onStatus: (s) => statuses.push(s),
  });
  return { m, statuses };
}

const sorted = (keys: readonly bigint[]): bigint[] => [...keys].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
const same = (got: readonly bigint[], want: readonly bigint[], msg?: string): void => assert.deepEqual(sorted(got), sorted(want), msg);
const isEmpty = (d: KvDelta): boolean => d.added.length === 0 && d.removed.length === 0 && d.reset === undefined;

void test('stored blocks become added keys; with our seed the engine verifies and keys equal its hashes', () => {
  const { m, statuses } = mirror();
  const p = prompt(4);
  const d = m.apply(batch(p.event), 0);
  same(d.added, p.keys);
  assert.deepEqual(d.removed, []);
  assert.equal(m.verification, 'verified');
  assert.deepEqual(statuses, [{ type: 'mirror.verified', blocks: 4 }]);
});

void test('a block stored on top of a known parent chains, and removal yields the removed key', () => {
  const { m } = mirror();
  const p = prompt(5);
  m.apply(batch(stored({ hashes: p.keys.slice(0, 4), tokens: p.tokens.slice(0, 64) })), 0);
  const d = m.apply(batch(stored({ hashes: [p.keys[4] as bigint], tokens: p.tokens.slice(64, 80), parent: p.keys[3] })), 0);
  same(d.added, [p.keys[4] as bigint]);
  const r = m.apply(batch(removed([p.keys[4] as bigint]), removed([p.keys[3] as bigint])), 0);
  same(r.removed, [p.keys[4] as bigint, p.keys[3] as bigint]);
  same(m.snapshot(), p.keys.slice(0, 3));
});

void test('a re-announced block is reference-counted: it stays until removed as often as stored', () => {
  const { m } = mirror();
  const p = prompt(2);
  m.apply(batch(p.event), 0);
  assert.ok(isEmpty(m.apply(batch(p.event), 0)), 're-announcement changes nothing');
  assert.ok(isEmpty(m.apply(batch(removed([p.keys[1] as bigint])), 0)), 'one of two announcements removed: still held');
  same(m.apply(batch(removed([p.keys[1] as bigint])), 0).removed, [p.keys[1] as bigint]);
  assert.equal(m.stats().reannounced, 2);
});

void test('removing a block we never saw (stored before a reset or a late join) is counted, not thrown', () => {
  const { m } = mirror();
  const d = m.apply(batch(removed([123n, 456n])), 0);
  assert.ok(isEmpty(d));
  assert.equal(m.stats().unknownRemovals, 2);
});

void test('the delta is NET: a block stored and removed in one batch is not reported', () => {
  const { m } = mirror();
  const p = prompt(3);
  const d = m.apply(batch(p.event, removed([p.keys[2] as bigint])), 0);
  same(d.added, p.keys.slice(0, 2));
  assert.deepEqual(d.removed, []);
});

void test('AllBlocksCleared resets: the consumer drops the engine and holds what other ranks still have', () => {
  const { m, statuses } = mirror();
  const a = prompt(2, { salt: 1 });
  const b = prompt(2, { salt: 2 });
  m.apply(batch(a.event), 0);
  m.apply(batch(b.event), 1);
  const d = m.apply(batch({ type: 'AllBlocksCleared' }), 1);
  assert.equal(d.reset, 'all-blocks-cleared');
  same(d.added, a.keys);
  same(m.snapshot(), a.keys);
  assert.ok(statuses.some((s) => s.type === 'mirror.reset' && s.reason === 'all-blocks-cleared' && s.rank === 1));
});

void test('blocks stored after a clear in the same batch are what the reset delta holds', () => {
  const { m } = mirror();
  const a = prompt(2, { salt: 1 });
  const b = prompt(2, { salt: 2 });
  m.apply(batch(a.event), 0);
  const d = m.apply(batch({ type: 'AllBlocksCleared' }, b.event), 0);
  assert.equal(d.reset, 'all-blocks-cleared');
  same(d.added, b.keys);
});

void test('ranks are kept apart: the same hash on two ranks stays held until both remove it', () => {
  const { m } = mirror();
  const p = prompt(1);
  m.apply(batch(p.event), 0);
  assert.ok(isEmpty(m.apply(batch(p.event), 1)));
  assert.ok(isEmpty(m.apply(batch(removed(p.keys)), 0)));
  same(m.apply(batch(removed(p.keys)), 1).removed, p.keys);
});

void test('groups are kept apart (hybrid models announce per KV-cache group)', () => {
  const { m } = mirror();
  const p = prompt(1);
  m.apply(batch(p.event), 0);
  m.apply(batch(stored({ hashes: p.keys, tokens: p.tokens, groupIdx: 1 })), 0);
  assert.ok(isEmpty(m.apply(batch(removed(p.keys, 'GPU', 0)), 0)));
  same(m.apply(batch(removed(p.keys, 'GPU', 1)), 0).removed, p.keys);
});

void test('an offloaded block is still held, tagged with its medium; placeholders (block_size 0) are accepted', () => {
  const { m } = mirror();
  const p = prompt(2);
  m.apply(batch(p.event), 0);
  const k = p.keys[1] as bigint;
  const placeholder = stored({ hashes: [k], tokens: [], blockSize: 0, medium: 'CPU', extraKeys: null });
  const d1 = m.apply(batch(placeholder), 0);
  assert.ok(isEmpty(d1), 'already held on the GPU: best tier unchanged');
  const d2 = m.apply(batch(removed([k], 'GPU')), 0);
  assert.deepEqual(d2.removed, [], 'evicted from the GPU but still in CPU memory');
  assert.deepEqual(d2.tiers, [{ key: k, medium: 'CPU' }]);
  assert.equal(m.tierOf(k as BlockKey), 'CPU');
  assert.deepEqual(m.tiersSnapshot(), [{ key: k, medium: 'CPU' }]);
  const d3 = m.apply(batch(stored({ hashes: [k], tokens: p.tokens.slice(16, 32), parent: p.keys[0] })), 0);
  assert.deepEqual(d3.tiers, [{ key: k, medium: 'GPU' }], 'back on the GPU');
  const d4 = m.apply(batch(removed([k], 'GPU'), removed([k], 'CPU')), 0);
  assert.deepEqual(d4.removed, [k]);
});

void test('a block that arrives only off the GPU is added with its tier', () => {
  const { m } = mirror();
  const d = m.apply(batch(stored({ hashes: [77n], tokens: [], blockSize: 0, medium: 'STORAGE', extraKeys: null })), 0);
  assert.deepEqual(d.added, [77n]);
  assert.deepEqual(d.tiers, [{ key: 77n, medium: 'STORAGE' }]);
});

void test('the mirror cannot grow past capacity x margin: it resets, says so, counts it, never throws', () => {
  const { m, statuses } = mirror({ capacityBlocks: 4, marginFactor: 1.5 });
  assert.equal(m.limitBlocks, 6);
  const a = prompt(4, { salt: 1 });
  const b = prompt(4, { salt: 2 });
  m.apply(batch(a.event), 0);
  const d = m.apply(batch(b.event), 0);
  assert.equal(d.reset, 'over-capacity');
  assert.ok(m.stats().blocks <= 6);
  same(d.added, m.snapshot());
  assert.equal(m.stats().overCapacityResets, 1);
  assert.ok(statuses.some((s) => s.type === 'mirror.reset' && s.reason === 'over-capacity'));
});

void test('resetRank drops one rank and hands the consumer the rest', () => {
  const { m } = mirror();
  const a = prompt(2, { salt: 1 });
  const b = prompt(2, { salt: 2 });
  m.apply(batch(a.event), 0);
  m.apply(batch(b.event), 1);
  const d = m.resetRank(0, 'engine-restart');
  assert.equal(d.reset, 'engine-restart');
  same(d.added, b.keys);
});

// --- self-verification ---

void test('an engine with another seed is reported with the reason and keyed by OUR hash of its tokens', () => {
  const { m, statuses } = mirror();
  const theirs = prompt(5, { seed: '42' });
  const ours = hashBlocks(theirs.tokens, hashOpts('0')).keys as bigint[];
  const d = m.apply(batch(stored({ hashes: theirs.keys.slice(0, 4), tokens: theirs.tokens.slice(0, 64) })), 0);
  assert.equal(m.verification, 'mismatch');
  const s = statuses.find((x) => x.type === 'mirror.hash-mismatch');
  if (s?.type !== 'mirror.hash-mismatch') assert.fail('no hash-mismatch status');
  assert.match(s.reason, /PYTHONHASHSEED "0"/);
  assert.equal(s.engineHash, theirs.keys[0]);
  same(d.added, ours.slice(0, 4), 'routing keys are ours');
  const d2 = m.apply(batch(stored({ hashes: [theirs.keys[4] as bigint], tokens: theirs.tokens.slice(64), parent: theirs.keys[3] })), 0);
  same(d2.added, [ours[4] as bigint], 'a continuation is keyed through the map from its hashes');
  const d3 = m.apply(batch(removed([theirs.keys[4] as bigint])), 0);
  same(d3.removed, [ours[4] as bigint], 'removal by the engine hash removes our key');
  const d4 = m.apply(batch(stored({ hashes: [theirs.keys[2] as bigint], tokens: [], blockSize: 0, medium: 'CPU', extraKeys: null })), 0);
  assert.deepEqual(d4.added, [], 'a placeholder of a known block maps to our key, already held');
  assert.equal(m.tierOf(ours[2] as BlockKey), 'GPU');
});

void test('keys announced before a mismatch was known are taken back and replaced by ours', () => {
  const { m } = mirror();
  const theirs = prompt(3, { seed: '42' });
  const ours = hashBlocks(theirs.tokens, hashOpts('0')).keys as bigint[];
  // A continuation whose parent we never saw: nothing to verify yet, so its hash is used as is.
  const d1 = m.apply(batch(stored({ hashes: [theirs.keys[2] as bigint], tokens: theirs.tokens.slice(32), parent: theirs.keys[1] })), 0);
  same(d1.added, [theirs.keys[2] as bigint]);
  assert.equal(m.verification, 'pending');
  const d2 = m.apply(batch(stored({ hashes: theirs.keys.slice(0, 2), tokens: theirs.tokens.slice(0, 32) })), 0);
  assert.equal(m.verification, 'mismatch');
  same(d2.removed, [theirs.keys[2] as bigint], 'its unverifiable key is withdrawn');
  same(d2.added, ours.slice(0, 2));
  assert.equal(m.stats().unkeyed, 1);
});

void test('LoRA name and cache_salt from the event extra keys verify', () => {
  const { m } = mirror();
  const t = tokens(64);
  const h = hashBlocks(t, hashOpts('0', { loraName: 'sql-lora', cacheSalt: 'tenant-a' }));
  const extra = [['sql-lora', 'tenant-a'], ['sql-lora'], ['sql-lora'], ['sql-lora']];
  m.apply(batch(stored({ hashes: h.keys as bigint[], tokens: t, loraName: 'sql-lora', extraKeys: extra })), 0);
  assert.equal(m.verification, 'verified');
});

void test('an older vLLM without extra_keys verifies from lora_name', () => {
  const { m } = mirror();
  const t = tokens(64);
  const h = hashBlocks(t, hashOpts('0', { loraName: 'sql-lora' }));
  m.apply(batch(stored({ hashes: h.keys as bigint[], tokens: t, loraName: 'sql-lora', extraKeys: null })), 0);
  assert.equal(m.verification, 'verified');
});

void test('32-byte digests (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0) verify on the whole digest and key by their last 8 bytes', () => {
  const { m } = mirror();
  const t = tokens(64);
  const h = hashBlocks(t, hashOpts('0'));
  const d = m.apply(batch(stored({ hashes: h.digests.map((x) => Uint8Array.from(x)), tokens: t })), 0);
  assert.equal(m.verification, 'verified');
  same(d.added, h.digests.map((x) => keyOfDigest(x)));
});

void test('a hybrid group announcing 32-token blocks by the last of two 16-token hashes verifies', () => {
  const { m } = mirror();
  const t = tokens(128);
  const h = hashBlocks(t, hashOpts('0'));
  const last = (h.keys as bigint[]).filter((_, i) => i % 2 === 1);
  m.apply(batch(stored({ hashes: last, tokens: t, blockSize: 32 })), 0);
  assert.equal(m.verification, 'verified');
});
