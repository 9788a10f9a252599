// vLLM's prefix-cache block hashing, reproduced bit for bit so that the keys we compute from a prompt's
// token ids are the keys vLLM announces in its KV events. If one byte of the serialisation differs,
// every hash differs and precise routing silently never matches anything.
//
// Speed: a 128k-token prompt is 8192 chained blocks, and the chain is sequential (block i hashes the
// digest of block i-1), so the cost is one SHA-256 call per block. Measured on this machine for that
// prompt (bench/hash.ts): one SHA-256 pass over all the encoded bytes ~0.5 ms; cbor-x encode +
// createHash per block ~43 ms; createHash per block on a hand-encoded buffer ~15 ms; crypto.hash()
// returning a Buffer ~11 ms, because most of its cost is making the Buffer in C++; crypto.hash()
// returning a one-byte ('binary') string ~2 ms; a pure-JS SHA-256 ~6.6 ms (no SHA-NI instructions).
// So we encode CBOR by hand into one reused buffer, hash with crypto.hash(..., 'binary') through
// OpenSSL (which uses SHA-NI), and write the 32 digest characters straight back into the next
// block's parent slot. Token widths are encoded without a branch (see writeTokens). That measured
// 3.0-3.5 ms against 0.50-0.57 ms (5.4-6.8x the single-pass limit) on a quiet core, of which ~1.9 ms
// is the crypto.hash calls themselves, the floor for any per-block call into OpenSSL; on a loaded
// machine per-call costs grow faster than the single pass (8-15x). Pure JS or WebAssembly
// SHA-256 cannot help: without SHA-NI one compression costs more than a whole OpenSSL call.
// Repeated prefixes skip the chain altogether through PrefixMemo (prefix-memo.ts).
import { hash as oneShotHash } from 'node:crypto';
import { LlmgwError } from '../errors/index.js';
import { cborBlockMessage, cborOfExtraKeys, cborOfString, cborSize, DIGEST_BYTES, ensureScratch, PARENT_AT, TOKENS_AT, viewOf, writeCbor, writeTokens } from './block-cbor.js';
import type { BlockKey, BlockKeyArray, ChainStart, HashAlgo, HashOptions } from './block-key.js';
import type { ExtraKey } from './extra-key.js';
import { picklePrefix, pickleBlock } from './pickle.js';
import type { PrefixMemo, Segmenter } from './prefix-memo.js';

function assertAlgo(algo: string): asserts algo is HashAlgo {
  if (algo !== 'sha256_cbor' && algo !== 'sha256') {
    throw new LlmgwError(
      'LLMGW_HASH_ALGO',
      `hash algorithm ${JSON.stringify(algo)} is not one we can reproduce; want "sha256_cbor" (or "sha256"); start vLLM with --prefix-caching-hash-algo sha256_cbor`,
    );
  }
}

/** Throws, naming the fix, unless `b` is a block size vLLM could have (a positive integer). */
export function assertBlockSize(b: number): void {
  if (!Number.isSafeInteger(b) || b < 1) {
    throw new LlmgwError('LLMGW_BLOCK_SIZE', `block size ${String(b)} is not a positive integer; use the engine's block_size (16 by default)`);
  }
}

const sha256 = (data: Uint8Array): Buffer => oneShotHash('sha256', data, 'buffer');

// --- NONE_HASH and extra keys ---

const noneHashes = new Map<string, Uint8Array>();

/** vLLM's NONE_HASH (parent of block 0): the hash of the seed STRING, e.g. CBOR `61 30` for "0". */
export function noneHash(seed: string, algo: HashAlgo = 'sha256_cbor'): Uint8Array {
  assertAlgo(algo);
  const k = `${algo}\0${seed}`;
  let d = noneHashes.get(k);
  if (d === undefined) {
    const input = algo === 'sha256_cbor' ? cborOfString(seed) : picklePrefix(seed);
    d = new Uint8Array(sha256(input));
    noneHashes.set(k, d);
  }
  return d.slice();
}

/**
 * vLLM's extra-keys tuple of one block (`generate_block_hash_extra_keys`): the LoRA name on every
 * block, then (identifier, offset in block) for each multimodal item overlapping it, then cache_salt
 * on the block starting at token 0 only, then the sha256 of the block's prompt-embedding bytes;
 * null when there are none, as vLLM uses None rather than an empty tuple.
 */
export function blockExtraKeys(o: HashOptions, blockIndex: number): readonly ExtraKey[] | null {
  const keys: ExtraKey[] = [];
  const start = blockIndex * o.blockSizeTokens;
  const end = start + o.blockSizeTokens;
  if (o.loraName !== undefined) keys.push(o.loraName);
  if (o.mmFeatures !== undefined) {
    // vLLM walks the items with an index carried from block to block and drops an item once a block
    // ends at or past its end; for sorted, non-overlapping items that is exactly this overlap test.
    // Block 0 keeps an item that ends at 0, as vLLM's walk does.
    for (const f of o.mmFeatures) {
      if (f.offset < end && (start < f.offset + f.length || start === 0)) keys.push([f.identifier, f.offset - start]);
    }
  }
  // An empty salt is falsy in Python and adds nothing.
  if (blockIndex === 0 && o.cacheSalt !== undefined && o.cacheSalt !== '') keys.push(o.cacheSalt);
  if (o.promptEmbeds !== undefined) {
    const { bytes, bytesPerToken } = o.promptEmbeds;
    const from = Math.min(start * bytesPerToken, bytes.length);
    const to = Math.min(end * bytesPerToken, bytes.length);
    keys.push(new Uint8Array(sha256(bytes.subarray(from, to))));
  }
  return keys.length === 0 ? null : keys;
}

// --- the chain ---

const littleEndian = new Uint8Array(Uint16Array.of(1).buffer)[0] === 1;
const HI = littleEndian ? 1 : 0;
const LO = littleEndian ? 0 : 1;

/**
 * Hashes every full block of `tokens`. Writes block i's 64-bit key as two 32-bit words into
 * `words` (native order of a BigUint64Array over the same memory), and, when `digests` is given,
 * its full digest at i*32. Returns the number of blocks. The tokens are the request's tokens from
 * block `from.blockIndex` on; extra keys use absolute positions.
 */
export function chainInto(
  tokens: ArrayLike<number>,
  o: HashOptions,
  from: ChainStart | undefined,
  words: Uint32Array,
  digests: Uint8Array | null,
  memo?: PrefixMemo,
): number {
  const algo = o.algo ?? 'sha256_cbor';
  assertAlgo(algo);
  const bs = o.blockSizeTokens;
  assertBlockSize(bs);
  const n = Math.floor(tokens.length / bs);
  if (n === 0) return 0;
  const first = from?.blockIndex ?? 0;
  const parent = from?.parent ?? noneHash(o.seed, algo);
  if (parent.length !== DIGEST_BYTES) {
    throw new LlmgwError('LLMGW_DIGEST', `parent digest of ${parent.length} bytes cannot continue a sha256 chain; want 32 bytes`);
  }
  const seg = algo === 'sha256' ? pickleSegmenter(tokens, o, first, parent, words, digests) : cborSegmenter(tokens, o, first, parent, n, words, digests);
  if (memo === undefined || from !== undefined || o.mmFeatures !== undefined || o.promptEmbeds !== undefined) seg.run(0, n);
  else memo.chain(tokens, o, n, seg, words);
  return n;
}

function cborSegmenter(
  tokens: ArrayLike<number>,
  o: HashOptions,
  first: number,
  parent: Uint8Array,
  n: number,
  words: Uint32Array,
  digests: Uint8Array | null,
): Segmenter {
  const bs = o.blockSizeTokens;
  // Extra keys that are the same on every block (none, or the LoRA name alone) are encoded once.
  const varying = o.mmFeatures !== undefined || o.promptEmbeds !== undefined || (o.cacheSalt !== undefined && o.cacheSalt !== '' && first === 0);
  const steady = varying ? null : cborOfExtraKeys(o.loraName === undefined ? null : [o.loraName]);
  let room = TOKENS_AT + 9 + bs * 9 + (steady?.length ?? 0);
  if (varying) {
    for (let i = 0; i < n; i++) room = Math.max(room, TOKENS_AT + 9 + bs * 9 + cborSize(blockExtraKeys(o, first + i) ?? []));
  }
  const m = ensureScratch(room);
  m[0] = 0x83; // a 3-tuple
  m[1] = 0x58; // bytes, 1-byte length
  m[2] = DIGEST_BYTES;
  m.set(parent, PARENT_AT);
  return {
    run(i0: number, i1: number): void {
      for (let i = i0; i < i1; i++) {
        let p = writeTokens(m, TOKENS_AT, tokens, i * bs, (i + 1) * bs);
        if (steady !== null) {
          for (let j = 0; j < steady.length; j++) m[p++] = steady[j] as number;
        } else {
          const extra = blockExtraKeys(o, first + i);
          p = extra === null ? ((m[p] = 0xf6), p + 1) : writeCbor(m, p, extra);
        }
        const d = oneShotHash('sha256', viewOf(p), 'binary');
        // The digest becomes the next block's parent in place: no Buffer per block. A charCodeAt
        // loop measured faster than Buffer#write(d, …, 'latin1'), whose argument checks cost more
        // than copying 32 characters.
        for (let j = 0; j < DIGEST_BYTES; j++) m[PARENT_AT + j] = d.charCodeAt(j);
        storeBlock(m, PARENT_AT, i, words, digests);
      }
    },
    // A copy: Buffer#slice would be a view of the scratch buffer, which the next block overwrites.
    parent: () => new Uint8Array(m.subarray(PARENT_AT, PARENT_AT + DIGEST_BYTES)),
    setParent: (d: Uint8Array) => m.set(d, PARENT_AT),
  };
}

function pickleSegmenter(
  tokens: ArrayLike<number>,
  o: HashOptions,
  first: number,
  parent: Uint8Array,
  words: Uint32Array,
  digests: Uint8Array | null,
): Segmenter {
  const bs = o.blockSizeTokens;
  let prev: Uint8Array = parent;
  return {
    run(i0: number, i1: number): void {
      for (let i = i0; i < i1; i++) {
        const d = sha256(pickleBlock(prev, tokens, i * bs, (i + 1) * bs, blockExtraKeys(o, first + i)));
        storeBlock(d, 0, i, words, digests);
        prev = d;
      }
    },
    parent: () => new Uint8Array(prev),
    setParent: (d: Uint8Array) => {
      prev = new Uint8Array(d);
    },
  };
}

function storeBlock(src: Uint8Array, at: number, i: number, words: Uint32Array, digests: Uint8Array | null): void {
  const k = at + DIGEST_BYTES - 8;
  words[2 * i + HI] = (((src[k] as number) << 24) | ((src[k + 1] as number) << 16) | ((src[k + 2] as number) << 8) | (src[k + 3] as number)) >>> 0;
  words[2 * i + LO] = (((src[k + 4] as number) << 24) | ((src[k + 5] as number) << 16) | ((src[k + 6] as number) << 8) | (src[k + 7] as number)) >>> 0;
  if (digests !== null) {
    const off = i * DIGEST_BYTES;
    for (let j = 0; j < DIGEST_BYTES; j++) digests[off + j] = src[at + j] as number;
  }
}

/**
 * The block hashes of a request, as vLLM computes them: floor(n / blockSizeTokens) full blocks,
 * chained from NONE_HASH, or from `from` to continue an earlier chain (its blockIndex decides
 * which block gets cache_salt and where multimodal items fall).
 */
export function hashBlocks(
  tokens: ArrayLike<number>,
  o: HashOptions,
  from?: ChainStart,
): { digests: Uint8Array[]; keys: BlockKey[] } {
  assertBlockSize(o.blockSizeTokens);
  const max = Math.floor(tokens.length / o.blockSizeTokens);
  const keys64 = new BigUint64Array(max);
  const flat = new Uint8Array(max * DIGEST_BYTES);
  const n = chainInto(tokens, o, from, new Uint32Array(keys64.buffer), flat);
  const digests: Uint8Array[] = new Array<Uint8Array>(n);
  const keys: BlockKey[] = new Array<BlockKey>(n);
  for (let i = 0; i < n; i++) {
    digests[i] = flat.subarray(i * DIGEST_BYTES, (i + 1) * DIGEST_BYTES);
    keys[i] = keys64[i] as BlockKey;
  }
  return { digests, keys };
}

/**
 * The 64-bit keys only, in a BigUint64Array: the hot path of routing, which needs no digests and
 * no BigInt per block until a key is read. Same rules as hashBlocks. With a memo (and no `from`,
 * multimodal items or prompt embeddings), prefixes hashed before are taken from it.
 */
export function hashBlockKeys(tokens: ArrayLike<number>, o: HashOptions, from?: ChainStart, memo?: PrefixMemo): BlockKeyArray {
  assertBlockSize(o.blockSizeTokens);
  const keys64 = new BigUint64Array(Math.floor(tokens.length / o.blockSizeTokens));
  chainInto(tokens, o, from, new Uint32Array(keys64.buffer), null, memo);
  // The one place a BlockKeyArray is made: every key in it came out of our own chain.
  return keys64 as BlockKeyArray;
}

/** A copy of block keys in a buffer of its own, to move to another thread while the original is kept. */
export function copyBlockKeys(keys: BlockKeyArray): BlockKeyArray {
  // A copy of keys that came out of our chain are keys that came out of our chain.
  return keys.slice() as BlockKeyArray;
}

/** The serialised input of one block, exactly the bytes vLLM hashes (for tests and diagnostics). */
export function blockMessage(
  parent: Uint8Array,
  blockTokens: ArrayLike<number>,
  extraKeys: readonly ExtraKey[] | null,
  algo: HashAlgo = 'sha256_cbor',
): Uint8Array {
  assertAlgo(algo);
  return algo === 'sha256' ? pickleBlock(parent, blockTokens, 0, blockTokens.length, extraKeys) : cborBlockMessage(parent, blockTokens, extraKeys);
}
