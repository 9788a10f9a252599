import { strict as assert } from 'node:assert';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import {
  blockExtraKeys,
  blockMessage,
  extendChain,
  hashBlockKeys,
  hashBlocks,
  keyOfDigest,
  noneHash,
  PrefixMemo,
  type ExtraKey,
  type HashAlgo,
  type HashOptions,
} from '../../src/kv/index.js';
import { hasCode, type ErrorCode } from '../../src/errors/index.js';
import { hex, readVector, toHex } from './golden.js';

interface Case {
  id: string;
  inputs: {
    hash_algo: string;
    PYTHONHASHSEED: string;
    num_tokens: number;
    block_size: number;
    lora_name: string | null;
    cache_salt: string | null;
    mm_features?: { identifier: string; offset: number; length: number }[];
  };
  none_hash_hex: string;
  num_full_blocks: number;
  extra_keys_per_block: unknown[];
  block_hashes_hex: string[];
  block_hashes_int64: (number | string)[];
}
interface Example {
  algo: string;
  label: string;
  python_repr: string;
  serialized_hex: string;
  digest_hex: string;
  int64: number;
}
interface Vectors {
  BASE_1000: number[];
  none_hash: Record<string, Record<string, { hex: string; int64: number; serialized_input_hex: string }>>;
  cases: Case[];
  cbor_examples: Example[];
  hybrid_view_example: {
    hashes_at_16_hex: string[];
    group_block_size_32_view_hex: string[];
    native_block_size_32_hex: string[];
    legacy_concat_view_int64: (number | string)[];
  };
}

const v = readVector('vllm-hash-vectors.json') as Vectors;
const base = Uint32Array.from(v.BASE_1000);

/** JSON extra keys (tuples as arrays, bytes as {bytes_hex}) in our ExtraKey form. */
function extraOf(x: unknown): ExtraKey[] | null {
  if (x === null) return null;
  const conv = (e: unknown): ExtraKey => {
    if (typeof e === 'string' || typeof e === 'number') return e;
    if (Array.isArray(e)) return e.map(conv);
    if (typeof e === 'object' && e !== null && 'bytes_hex' in e && typeof e.bytes_hex === 'string') return hex(e.bytes_hex);
    throw new Error(`unexpected extra key ${JSON.stringify(e)}`);
  };
  return (x as unknown[]).map(conv);
}

function optionsOf(c: Case): HashOptions {
  const i = c.inputs;
  return {
    blockSizeTokens: i.block_size,
    seed: i.PYTHONHASHSEED,
    algo: i.hash_algo as HashAlgo,
    ...(i.lora_name !== null ? { loraName: i.lora_name } : {}),
    ...(i.cache_salt !== null ? { cacheSalt: i.cache_salt } : {}),
    ...(i.mm_features !== undefined ? { mmFeatures: i.mm_features } : {}),
  };
}

const reproducible = (algo: string): boolean => algo === 'sha256_cbor' || algo === 'sha256';

for (const c of v.cases.filter((x) => reproducible(x.inputs.hash_algo))) {
  void test(`golden ${c.id}: every block hash matches vLLM's`, () => {
    const o = optionsOf(c);
    const tokens = base.subarray(0, c.inputs.num_tokens);
    assert.equal(toHex(noneHash(o.seed, o.algo)), c.none_hash_hex);
    const { digests, keys } = hashBlocks(tokens, o);
    assert.equal(digests.length, c.num_full_blocks);
    assert.deepEqual(digests.map(toHex), c.block_hashes_hex);
    assert.deepEqual(
      keys.map((k) => k.toString()),
      c.block_hashes_int64.map((n) => BigInt(n).toString()),
    );
    for (let i = 0; i < c.num_full_blocks; i++) {
      assert.deepEqual(blockExtraKeys(o, i), extraOf(c.extra_keys_per_block[i]), `extra keys of block ${i}`);
    }
  });
}

void test('the 64-bit form is the last 8 digest bytes big-endian, for every golden digest', () => {
  for (const c of v.cases) {
    assert.deepEqual(
      c.block_hashes_hex.map((h) => keyOfDigest(hex(h)).toString()),
      c.block_hashes_int64.map((n) => BigInt(n).toString()),
    );
  }
  const seed0 = v.none_hash.sha256_cbor?.['0'];
  assert.ok(seed0);
  assert.equal(keyOfDigest(hex(seed0.hex)), 17921330210090130494n);
});

for (const [algo, bySeed] of Object.entries(v.none_hash).filter(([a]) => reproducible(a))) {
  for (const [seed, want] of Object.entries(bySeed)) {
    void test(`NONE_HASH ${algo} seed ${JSON.stringify(seed)} is the hash of the seed string`, () => {
      assert.equal(toHex(noneHash(seed, algo as HashAlgo)), want.hex);
    });
  }
}

const specNoneHashes = [
  { seed: '0', hex: '4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e' },
  { seed: '42', hex: '9fa6eb003f14425eb9c8e6baacfbcaab26257357b829c7bfa74ffcc4f31c1780' },
  { seed: 'llmgw', hex: 'd84cf894aab3650424a79bb7b69073827ff66ddc0eea949b142dc85912f230bf' },
];
for (const s of specNoneHashes) {
  void test(`NONE_HASH sha256_cbor for seed ${JSON.stringify(s.seed)}: any seed works, not only "0"`, () => {
    assert.equal(toHex(noneHash(s.seed)), s.hex);
  });
}

void test('spec tiny example: (NONE_HASH, (1,2,3), None) hashes to int64 5015190061827119123', () => {
  const { keys } = hashBlocks([1, 2, 3], { blockSizeTokens: 3, seed: '0' });
  assert.deepEqual(keys, [5015190061827119123n]);
});

/** Python repr of an example's tuple, parsed just enough: parent {bytes_hex}, tokens, extra keys. */
function exampleParts(e: Example): { parent: Uint8Array; tokens: number[]; extra: ExtraKey[] | null } {
  const parent = /'bytes_hex': '([0-9a-f]+)'/.exec(e.python_repr)?.[1];
  const tokens = /}, \(([^)]*)\)/.exec(e.python_repr)?.[1];
  const extraText = /\), (.*)\)$/.exec(e.python_repr)?.[1];
  assert.ok(parent !== undefined && tokens !== undefined && extraText !== undefined, e.python_repr);
  const json = extraText.replace(/\(/g, '[').replace(/\)/g, ']').replace(/'/g, '"').replace(/,\s*]/g, ']').replace(/None/g, 'null');
  return {
    parent: hex(parent),
    tokens: tokens.trim() === '' ? [] : tokens.split(',').map((t) => Number(t.trim())),
    extra: extraOf(JSON.parse(json)),
  };
}

for (const e of v.cbor_examples.filter((x) => reproducible(x.algo))) {
  void test(`serialisation ${e.algo} "${e.label}" is byte for byte vLLM's`, () => {
    const p = exampleParts(e);
    const msg = blockMessage(p.parent, p.tokens, p.extra, e.algo as HashAlgo);
    assert.equal(toHex(msg), e.serialized_hex);
  });
}

void test('hybrid view: a 32-token group reports the last of each pair of chained 16-token hashes, unlike native 32', () => {
  const h = v.hybrid_view_example;
  const tokens = base.subarray(0, 128);
  const at16 = hashBlocks(tokens, { blockSizeTokens: 16, seed: '0' }).digests.map(toHex);
  assert.deepEqual(at16, h.hashes_at_16_hex);
  assert.deepEqual(
    at16.filter((_, i) => i % 2 === 1),
    h.group_block_size_32_view_hex,
  );
  assert.deepEqual(hashBlocks(tokens, { blockSizeTokens: 32, seed: '0' }).digests.map(toHex), h.native_block_size_32_hex);
});

void test('continuing a chain from a parent digest gives the same blocks as hashing the whole prompt', () => {
  const o: HashOptions = { blockSizeTokens: 16, seed: '0', loraName: 'sql-lora', cacheSalt: 'tenant-a' };
  const whole = hashBlocks(base, o);
  const head = hashBlocks(base.subarray(0, 160), o);
  const parent = head.digests[9];
  assert.ok(parent);
  const tail = hashBlocks(base.subarray(160), o, { parent, blockIndex: 10 });
  assert.deepEqual([...head.keys, ...tail.keys], whole.keys);
});

void test('cache_salt applies to the block starting at token 0 only, even when a chain is continued', () => {
  const o: HashOptions = { blockSizeTokens: 16, seed: '0', cacheSalt: 'tenant-a' };
  assert.deepEqual(blockExtraKeys(o, 0), ['tenant-a']);
  assert.equal(blockExtraKeys(o, 1), null);
  assert.equal(blockExtraKeys({ ...o, cacheSalt: '' }, 0), null, 'an empty salt is falsy in Python');
});

void test('extra keys order: LoRA name, multimodal tuples, cache_salt, prompt-embedding digest', () => {
  const embeds = new Uint8Array(64 * 2).map((_, i) => i);
  const o: HashOptions = {
    blockSizeTokens: 16,
    seed: '0',
    loraName: 'l',
    cacheSalt: 's',
    mmFeatures: [{ identifier: 'img', offset: 3, length: 4 }],
    promptEmbeds: { bytes: embeds, bytesPerToken: 2 },
  };
  const k = blockExtraKeys(o, 0);
  assert.ok(k);
  assert.deepEqual(k.slice(0, 3), ['l', ['img', 3], 's']);
  assert.equal(toHex(k[3] as Uint8Array), createHash('sha256').update(embeds.subarray(0, 32)).digest('hex'));
  assert.deepEqual(blockExtraKeys(o, 1)?.slice(0, 1), ['l'], 'the image ended in block 0');
});

void test('hashBlockKeys (the routing hot path) gives the same keys as hashBlocks', () => {
  for (const o of [
    { blockSizeTokens: 16, seed: '0' },
    { blockSizeTokens: 16, seed: 'llmgw', loraName: 'sql-lora', cacheSalt: 'x' },
    { blockSizeTokens: 7, seed: '42', algo: 'sha256' as const },
  ]) {
    assert.deepEqual([...hashBlockKeys(base, o)], hashBlocks(base, o).keys);
  }
});

void test('token ids of every CBOR width, including above 2^32, encode as cbor2 does', () => {
  const msg = blockMessage(new Uint8Array(32), [0, 23, 24, 255, 256, 65535, 65536, 2 ** 32 - 1, 2 ** 32], null);
  assert.equal(
    toHex(msg.subarray(35)),
    '89' + '00' + '17' + '1818' + '18ff' + '190100' + '19ffff' + '1a00010000' + '1affffffff' + '1b0000000100000000' + 'f6',
  );
});

void test('only full blocks are hashed: 15 tokens at block size 16 give no block', () => {
  assert.deepEqual(hashBlocks(base.subarray(0, 15), { blockSizeTokens: 16, seed: '0' }), { digests: [], keys: [] });
});

const badInputs: { why: string; tokens: number[]; code: ErrorCode }[] = [
  { why: 'a negative token id cannot be a vocabulary entry', tokens: [1, -1, 2, 3], code: 'LLMGW_HASH_INPUT' },
  { why: 'a fractional token id would hash to garbage', tokens: [1, 1.5, 2, 3], code: 'LLMGW_HASH_INPUT' },
];
for (const b of badInputs) {
  void test(`hashBlocks rejects input: ${b.why}`, () => {
    assert.throws(
      () => hashBlocks(b.tokens, { blockSizeTokens: 4, seed: '0' }),
      (e: unknown) => hasCode(e, b.code),
    );
  });
}

void test('hashBlocks rejects an algorithm we cannot reproduce, naming the flag that fixes it', () => {
  assert.throws(
    () => hashBlocks(base, { blockSizeTokens: 16, seed: '0', algo: 'xxhash' as HashAlgo }),
    (e: unknown) => hasCode(e, 'LLMGW_HASH_ALGO') && /--prefix-caching-hash-algo sha256_cbor/.test(e.message),
  );
  assert.throws(() => hashBlocks(base, { blockSizeTokens: 0, seed: '0' }), (e: unknown) => hasCode(e, 'LLMGW_BLOCK_SIZE'));
});

void test('the legacy concat view of v0.12-v0.23 has the same int64 as the last sub-hash', () => {
  const h = v.hybrid_view_example;
  assert.deepEqual(
    h.group_block_size_32_view_hex.map((x) => keyOfDigest(hex(x)).toString()),
    h.legacy_concat_view_int64.map((n) => BigInt(n).toString()),
  );
});

void test('prefix memo: keys are the same with or without it, cold, warm, extended and diverging', () => {
  const memo = new PrefixMemo({ maxChunks: 1000 });
  const long = Uint32Array.from({ length: 5000 }, (_, i) => (i * 7919) % 151_000);
  const diverged = long.slice();
  diverged[1700] = 42;
  const cases: [string, Uint32Array, HashOptions][] = [
    ['cold', long.subarray(0, 3000), { blockSizeTokens: 16, seed: '0' }],
    ['warm: the same prompt again', long.subarray(0, 3000), { blockSizeTokens: 16, seed: '0' }],
    ['a later turn extends the prompt', long, { blockSizeTokens: 16, seed: '0' }],
    ['diverges in the middle', diverged, { blockSizeTokens: 16, seed: '0' }],
    ['same tokens, other seed', long, { blockSizeTokens: 16, seed: '42' }],
    ['same tokens, LoRA', long, { blockSizeTokens: 16, seed: '0', loraName: 'sql-lora' }],
    ['same tokens, cache_salt', long, { blockSizeTokens: 16, seed: '0', cacheSalt: 'tenant-a' }],
    ['same tokens, block size 32', long, { blockSizeTokens: 32, seed: '0' }],
    ['same tokens, pickle sha256', long.subarray(0, 1100), { blockSizeTokens: 16, seed: '0', algo: 'sha256' }],
    ['pickle again, warm', long.subarray(0, 1100), { blockSizeTokens: 16, seed: '0', algo: 'sha256' }],
  ];
  for (const [why, tokens, o] of cases) {
    assert.deepEqual([...hashBlockKeys(tokens, o, undefined, memo)], [...hashBlockKeys(tokens, o)], why);
  }
  assert.ok(memo.stats.hits > 0);
});

void test('prefix memo is bounded and drops the least recently used chunk', () => {
  const memo = new PrefixMemo({ maxChunks: 3 });
  const tokens = Uint32Array.from({ length: 16 * 32 * 5 }, (_, i) => i);
  hashBlockKeys(tokens, { blockSizeTokens: 16, seed: '0' }, undefined, memo);
  assert.equal(memo.stats.chunks, 3);
  assert.equal(memo.stats.misses, 5);
});

void test('prefix memo never turns a bad token id into a good one', () => {
  const memo = new PrefixMemo({ maxChunks: 100 });
  const tokens = Array.from({ length: 1024 }, (_, i) => i);
  hashBlockKeys(tokens, { blockSizeTokens: 16, seed: '0' }, undefined, memo);
  tokens[3] = 3.5;
  assert.throws(() => hashBlockKeys(tokens, { blockSizeTokens: 16, seed: '0' }, undefined, memo), (e: unknown) => hasCode(e, 'LLMGW_HASH_INPUT'));
});

void test("extendChain: a conversation's next turn hashes into the buffers of the chain it extends, and blocks written over are hashed again", () => {
  const o = { blockSizeTokens: 16, seed: '0' };
  // Long enough for the chain's buffers to have room to grow (a short chain is copied: it costs less).
  const turn = (n: number, salt: number): Uint32Array => Uint32Array.from({ length: n }, (_, i) => (i < 16 * 300 ? (i * 7919) % 151_000 : salt + i));
  // Turn 1 ends in a stand-in the real turn 2 parts from at block 300.
  const first = extendChain(turn(16 * 302 + 3, 1), o);
  const firstKeys = [...first.keys];
  const second = extendChain(turn(16 * 310, 2), o, first, 300);
  assert.equal(second.keys.buffer, first.keys.buffer, 'no copy of the blocks the turns share');
  assert.deepEqual([...second.keys], [...hashBlockKeys(turn(16 * 310, 2), o)]);
  assert.notDeepEqual([...first.keys], firstKeys, "turn 1's last blocks were written over");
  // Turn 1 again, extended from its own chain: the blocks written over are not taken from it.
  const again = extendChain(turn(16 * 302 + 3, 1), o, first, 302);
  assert.deepEqual([...again.keys], firstKeys);
  assert.deepEqual([...again.digests], [...hashBlocks(turn(16 * 302 + 3, 1), o).digests.flatMap((d) => [...d])]);
});

void test('extendChain: a prompt hashed again and again from its own chain is laid over itself 64 times, then in new buffers', () => {
  const o = { blockSizeTokens: 16, seed: '0' };
  const tokens = Uint32Array.from({ length: 16 * 300 + 5 }, (_, i) => (i * 7919) % 151_000);
  const want = [...hashBlockKeys(tokens, o)];
  let chain = extendChain(tokens, o);
  const buffers = new Set<ArrayBufferLike>([chain.keys.buffer]);
  for (let i = 0; i < 70; i++) {
    // Each time from a block short of its end, as a turn parts from its stand-in.
    chain = extendChain(tokens, o, chain, 299);
    assert.deepEqual([...chain.keys], want);
    buffers.add(chain.keys.buffer);
  }
  assert.equal(buffers.size, 2);
});

void test('extendChain: a chain extended from an earlier prompt equals the chain hashed whole, whatever the two share', () => {
  const base = Uint32Array.from({ length: 16 * 40 + 5 }, (_, i) => (i * 7919) % 151_000);
  for (const o of [
    { blockSizeTokens: 16, seed: '0' },
    { blockSizeTokens: 16, seed: '0', cacheSalt: 'tenant' },
    { blockSizeTokens: 16, seed: '42', loraName: 'adapter-a', algo: 'sha256' as const },
  ]) {
    const prev = extendChain(base, o);
    assert.deepEqual([...prev.keys], [...hashBlockKeys(base, o)]);
    for (const cut of [0, 1, 15, 16, 17, 16 * 39, base.length]) {
      // The next prompt keeps `cut` tokens of the earlier one and goes on differently.
      const next = Uint32Array.from([...base.subarray(0, cut), ...Array.from({ length: 16 * 7 + 3 }, (_, i) => 90_000 + i)]);
      const extended = extendChain(next, o, prev, Math.floor(cut / 16));
      assert.deepEqual([...extended.keys], [...hashBlockKeys(next, o)], `${JSON.stringify(o)}, ${cut} tokens shared`);
      assert.deepEqual(extended.digests, Uint8Array.from(hashBlocks(next, o).digests.flatMap((d) => [...d])));
    }
  }
});
