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
// Repeated prefixes skip the chain altogether through PrefixMemo (below the limit).
import { hash as oneShotHash } from 'node:crypto';
import { LlmgwError } from '../errors/index.js';
import type { ExtraKey } from './extra-key.js';
import { picklePrefix, pickleBlock } from './pickle.js';

/** Our block key: the low 64 bits of our sha256_cbor digest of a block. Never mixed with the engine's. */
export type BlockKey = bigint & { readonly __brand: 'BlockKey' };
/** A block hash exactly as vLLM announced it (int form); opaque to us until verified or mapped. */
export type EngineBlockHash = bigint & { readonly __brand: 'EngineBlockHash' };
/** A prompt's block keys in order, one BlockKey per full block, in 8 bytes each (no BigInt per block until read). */
export type BlockKeyArray = BigUint64Array & { readonly __brand: 'BlockKeyArray' };

/** A thread boundary keeps the array and drops its type: the worker's keys are BlockKeys again once checked. */
export function isBlockKeyArray(v: unknown): v is BlockKeyArray {
  return v instanceof BigUint64Array;
}

/** vLLM's `--prefix-caching-hash-algo` values we can reproduce. */
export type HashAlgo = 'sha256_cbor' | 'sha256';

/** A multimodal item in the prompt: vLLM's own identifier and where its placeholder tokens sit. */
export interface MultimodalFeature {
  readonly identifier: string;
  readonly offset: number;
  readonly length: number;
}

/** The raw prompt-embedding tensor of a request, row-major, one row per token. */
export interface PromptEmbeds {
  readonly bytes: Uint8Array;
  readonly bytesPerToken: number;
}

/** What decides a request's block hashes besides its tokens. */
export interface HashOptions {
  readonly blockSizeTokens: number;
  /** PYTHONHASHSEED of the engine, as a string ("0"), exactly as the engine saw it. */
  readonly seed: string;
  readonly algo?: HashAlgo;
  readonly loraName?: string;
  readonly cacheSalt?: string;
  /** Sorted by offset, non-overlapping, offsets in absolute token positions of the request. */
  readonly mmFeatures?: readonly MultimodalFeature[];
  readonly promptEmbeds?: PromptEmbeds;
}

/** Where a chain continues: the previous block's full digest and the index of the next block. */
export interface ChainStart {
  readonly parent: Uint8Array;
  readonly blockIndex: number;
}

const DIGEST_BYTES = 32;
/** Bytes before the token array in every block message: array(3) header, bytes(32) header, parent. */
const PARENT_AT = 3;
const TOKENS_AT = PARENT_AT + DIGEST_BYTES;

/** The 64-bit key form of a digest: its last 8 bytes read big-endian (vLLM's `maybe_convert_block_hash`). */
export function keyOfDigest(d: Uint8Array): bigint {
  if (d.length < 8) {
    throw new LlmgwError('LLMGW_DIGEST', `block digest of ${d.length} bytes is too short for a 64-bit key; want at least 8 bytes`);
  }
  const n = d.length;
  let v = 0n;
  for (let i = n - 8; i < n; i++) v = (v << 8n) | BigInt(d[i] ?? 0);
  return v;
}

function assertAlgo(algo: string): asserts algo is HashAlgo {
  if (algo !== 'sha256_cbor' && algo !== 'sha256') {
    throw new LlmgwError(
      'LLMGW_HASH_ALGO',
      `hash algorithm ${JSON.stringify(algo)} is not one we can reproduce; want "sha256_cbor" (or "sha256"); start vLLM with --prefix-caching-hash-algo sha256_cbor`,
    );
  }
}

function assertBlockSize(b: number): void {
  if (!Number.isSafeInteger(b) || b < 1) {
    throw new LlmgwError('LLMGW_BLOCK_SIZE', `block size ${String(b)} is not a positive integer; use the engine's block_size (16 by default)`);
  }
}

const sha256 = (data: Uint8Array): Buffer => oneShotHash('sha256', data, 'buffer');

// --- hand-written canonical CBOR (cbor2 canonical=True is plain shortest-form definite CBOR here) ---

let scratch: Buffer = Buffer.allocUnsafeSlow(4096);
// crypto.hash needs a view of exactly the message; one cached view per length avoids a subarray per block.
let views: Buffer[] = [];

function ensureScratch(bytes: number): Buffer {
  if (scratch.length < bytes) {
    let size = scratch.length;
    while (size < bytes) size *= 2;
    scratch = Buffer.allocUnsafeSlow(size);
    views = [];
  }
  return scratch;
}

function viewOf(len: number): Buffer {
  let v = views[len];
  if (v === undefined) {
    v = scratch.subarray(0, len);
    views[len] = v;
  }
  return v;
}

function writeHead(m: Uint8Array, p: number, major: number, n: number): number {
  const mt = major << 5;
  if (n < 24) {
    m[p] = mt | n;
    return p + 1;
  }
  if (n < 0x100) {
    m[p] = mt | 24;
    m[p + 1] = n;
    return p + 2;
  }
  if (n < 0x10000) {
    m[p] = mt | 25;
    m[p + 1] = n >>> 8;
    m[p + 2] = n & 0xff;
    return p + 3;
  }
  if (n <= 0xffffffff) {
    m[p] = mt | 26;
    m[p + 1] = n >>> 24;
    m[p + 2] = (n >>> 16) & 0xff;
    m[p + 3] = (n >>> 8) & 0xff;
    m[p + 4] = n & 0xff;
    return p + 5;
  }
  const hi = Math.floor(n / 0x100000000);
  const lo = n >>> 0;
  m[p] = mt | 27;
  m[p + 1] = hi >>> 24;
  m[p + 2] = (hi >>> 16) & 0xff;
  m[p + 3] = (hi >>> 8) & 0xff;
  m[p + 4] = hi & 0xff;
  m[p + 5] = lo >>> 24;
  m[p + 6] = (lo >>> 16) & 0xff;
  m[p + 7] = (lo >>> 8) & 0xff;
  m[p + 8] = lo & 0xff;
  return p + 9;
}

function writeInt(m: Uint8Array, p: number, v: number): number {
  if (!Number.isSafeInteger(v)) {
    throw new LlmgwError('LLMGW_HASH_INPUT', `${String(v)} is not an integer vLLM could hash; token ids and offsets must be safe integers`);
  }
  return v >= 0 ? writeHead(m, p, 0, v) : writeHead(m, p, 1, -1 - v);
}

/** Upper bound of the CBOR size of an extra key (strings are sized by their UTF-8 length). */
function cborSize(v: ExtraKey): number {
  if (typeof v === 'string') return 9 + Buffer.byteLength(v, 'utf8');
  if (typeof v === 'number') return 9;
  if (v instanceof Uint8Array) return 9 + v.length;
  let n = 9;
  for (const x of v) n += cborSize(x);
  return n;
}

function writeCbor(m: Buffer, p: number, v: ExtraKey): number {
  if (typeof v === 'string') {
    const n = Buffer.byteLength(v, 'utf8');
    const q = writeHead(m, p, 3, n);
    m.write(v, q, n, 'utf8');
    return q + n;
  }
  if (typeof v === 'number') return writeInt(m, p, v);
  if (v instanceof Uint8Array) {
    const q = writeHead(m, p, 2, v.length);
    m.set(v, q);
    return q + v.length;
  }
  let q = writeHead(m, p, 4, v.length);
  for (const x of v) q = writeCbor(m, q, x);
  return q;
}

/** Canonical CBOR of an extra-keys tuple or None, as cbor2.dumps(x, canonical=True) writes it. */
export function cborOfExtraKeys(keys: readonly ExtraKey[] | null): Uint8Array {
  if (keys === null) return Uint8Array.of(0xf6);
  const out = Buffer.alloc(cborSize(keys));
  return out.subarray(0, writeCbor(out, 0, keys));
}

/** The tokens' CBOR array into `m` at `p`; a slow path only for ids above 2^32 or bad values. */
function writeTokens(m: Buffer, p: number, tokens: ArrayLike<number>, start: number, end: number): number {
  p = writeHead(m, p, 4, end - start);
  for (let k = start; k < end; k++) {
    const v = tokens[k] as number;
    if (v >>> 0 !== v) {
      if (!(v >= 0)) {
        throw new LlmgwError('LLMGW_HASH_INPUT', `token id ${String(v)} at position ${k} is not a non-negative integer; token ids come from the tokenizer`);
      }
      p = writeInt(m, p, v);
    } else if (v < 24) {
      m[p++] = v;
    } else if (v < 0x100) {
      m[p++] = 0x18;
      m[p++] = v;
    } else {
      // 2-byte (19) or 4-byte (1a) argument without a branch on the width: a real vocabulary mixes
      // both at random, so that branch mispredicts about every other token. A 2-byte argument is
      // shifted up so its bytes come first; the two spare bytes after it are overwritten by what
      // follows, and every buffer written here has room for them. `wide` is 0 or 1 by arithmetic
      // because V8 turns a ternary into a branch; on random token ids this measured 17% faster.
      const wide = ((v >>> 16) + 0xffff) >>> 16;
      const x = v << (16 - (wide << 4));
      m[p] = 0x19 + wide;
      m[p + 1] = x >>> 24;
      m[p + 2] = (x >>> 16) & 0xff;
      m[p + 3] = (x >>> 8) & 0xff;
      m[p + 4] = x & 0xff;
      p += 3 + (wide << 1);
    }
  }
  return p;
}

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

function cborOfString(s: string): Uint8Array {
  const out = Buffer.alloc(9 + Buffer.byteLength(s, 'utf8'));
  return out.subarray(0, writeCbor(out, 0, s));
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

/** Hashes a run of blocks of one chain; the chain's state (the parent digest) carries over between runs. */
interface Segmenter {
  run(i0: number, i1: number): void;
  parent(): Uint8Array;
  setParent(d: Uint8Array): void;
}

/**
 * Hashes every full block of `tokens`. Writes block i's 64-bit key as two 32-bit words into
 * `words` (native order of a BigUint64Array over the same memory), and, when `digests` is given,
 * its full digest at i*32. Returns the number of blocks. The tokens are the request's tokens from
 * block `from.blockIndex` on; extra keys use absolute positions.
 */
function chainInto(
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

/** Blocks per memo entry: 512 tokens at block size 16. */
const MEMO_CHUNK_BLOCKS = 32;

interface MemoEntry {
  readonly words: Uint32Array;
  readonly last: Uint8Array;
}

/**
 * Remembers the keys of prompt prefixes already hashed, in chunks of 32 blocks keyed by a 53-bit
 * fingerprint of every token up to the chunk's end (and the hash options), least recently used
 * first out. Routing sees the same long prefixes again and again (system prompts, every turn of a
 * conversation resends the ones before), and a fingerprint pass over the tokens costs a fraction
 * of one SHA-256 call per block. The fingerprint is not cryptographic: a collision, which a
 * client would have to construct on purpose, can only misroute that client's own request, because
 * the engine computes its own hashes.
 */
export class PrefixMemo {
  readonly #maxChunks: number;
  readonly #entries = new Map<number, MemoEntry>();
  #hits = 0;
  #misses = 0;

  constructor(o: { maxChunks: number }) {
    if (!Number.isSafeInteger(o.maxChunks) || o.maxChunks < 1) {
      throw new LlmgwError('LLMGW_MEMO_SIZE', `prefix memo size ${String(o.maxChunks)} is not a positive number of chunks`);
    }
    this.#maxChunks = o.maxChunks;
  }

  /** Chunks found and chunks hashed since the memo was made. */
  get stats(): { chunks: number; hits: number; misses: number } {
    return { chunks: this.#entries.size, hits: this.#hits, misses: this.#misses };
  }

  /** Runs a whole chain from block 0, taking every full chunk it can from the memo. */
  chain(tokens: ArrayLike<number>, o: HashOptions, n: number, seg: Segmenter, words: Uint32Array): void {
    const bs = o.blockSizeTokens;
    // The options that change every hash start the fingerprint.
    const tag = `${o.algo ?? 'sha256_cbor'}\0${o.seed}\0${bs}\0${o.loraName ?? '\u0001'}\0${o.cacheSalt ?? ''}`;
    // Both lanes start as int32 (| 0) so the optimizer keeps them in integer registers.
    let a = 0x2545f491 | 0;
    let b = 0x9e3779b9 | 0;
    for (let i = 0; i < tag.length; i++) {
      const c = tag.charCodeAt(i);
      a = Math.imul(a ^ c, 0x85ebca6b);
      a = (a << 13) | (a >>> 19);
      b = Math.imul(b + c, 0xc2b2ae35);
      b ^= b >>> 15;
    }
    const chunkTokens = MEMO_CHUNK_BLOCKS * bs;
    const full = Math.floor(n / MEMO_CHUNK_BLOCKS);
    for (let c = 0; c < full; c++) {
      const t0 = c * chunkTokens;
      for (let k = t0; k < t0 + chunkTokens; k++) {
        const t = tokens[k] as number;
        // A bad token id must reach the encoder, which rejects it, not alias a good one here.
        if (t >>> 0 !== t) {
          seg.run(c * MEMO_CHUNK_BLOCKS, n);
          return;
        }
        a = Math.imul(a ^ t, 0x85ebca6b);
        a = (a << 13) | (a >>> 19);
        b = Math.imul(b + t, 0xc2b2ae35);
        b ^= b >>> 15;
      }
      const key = (a >>> 0) * 0x200000 + ((b >>> 0) & 0x1fffff);
      const i0 = c * MEMO_CHUNK_BLOCKS;
      const i1 = i0 + MEMO_CHUNK_BLOCKS;
      const hit = this.#entries.get(key);
      if (hit !== undefined) {
        this.#hits++;
        words.set(hit.words, 2 * i0);
        seg.setParent(hit.last);
        // Refresh: a Map iterates in insertion order, so the first key is the least recently used.
        this.#entries.delete(key);
        this.#entries.set(key, hit);
        continue;
      }
      this.#misses++;
      seg.run(i0, i1);
      this.#entries.set(key, { words: words.slice(2 * i0, 2 * i1), last: seg.parent() });
      if (this.#entries.size > this.#maxChunks) {
        const oldest = this.#entries.keys().next();
        if (oldest.done !== true) this.#entries.delete(oldest.value);
      }
    }
    seg.run(full * MEMO_CHUNK_BLOCKS, n);
  }
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

/** The hash parameters of a text prompt (no multimodal items, no prompt embeddings). */
export type TextHashOptions = Omit<HashOptions, 'mmFeatures' | 'promptEmbeds'>;

/**
 * The buffers of a conversation's chains: each turn's chain is a view of its first blocks, and the
 * next turn's is hashed into the same buffers from the block where the two part. A 100k-token
 * turn's chain is 6000 keys and 192 KB of digests: copied into new arrays each turn, its fresh pages
 * cost a worker more than hashing the turn's new blocks. `cuts` lists every block written over, so
 * a chain can tell how many of its blocks still stand.
 */
export class ChainRun {
  readonly keys: BigUint64Array;
  readonly digests: Uint8Array;
  /** Blocks written, from 0: the length of the last chain laid in this run. */
  used = 0;
  readonly cuts: number[] = [];

  constructor(blocks: number) {
    this.keys = new BigUint64Array(blocks);
    this.digests = new Uint8Array(blocks * DIGEST_BYTES);
  }

  /** How many of the first `n` blocks still stand since the run had `cutsSeen` cuts. */
  standing(n: number, cutsSeen: number): number {
    let k = n;
    for (let i = cutsSeen; i < this.cuts.length; i++) k = Math.min(k, this.cuts[i] ?? 0);
    return k;
  }
}

// Chains laid over each other in one run before it takes no more: a prompt sent again and again
// would grow its list of cuts, every one read by `standing`.
const maxChainCuts = 64;

// Room for the next turns' blocks, an eighth; none under 256 blocks, whose keys copy in less time
// than zeroing the room would take.
const chainRunBlocks = (blocks: number): number => blocks + (blocks < 256 ? 0 : Math.ceil(blocks / 8));

/** A prompt's chain as routing keeps it to extend later: every block's key and full digest. */
export interface KeyChain {
  readonly keys: BlockKeyArray;
  /** Block i's digest at i*32. */
  readonly digests: Uint8Array;
  /** The run `keys` and `digests` are views of, and how many cuts it had when they were laid. */
  readonly run: ChainRun;
  readonly cutsSeen: number;
}

/**
 * The chain of `tokens`, taking its first `same` blocks from `prev` (a chain of a prompt whose
 * tokens are known to equal these up to at least `same` blocks) and hashing only the rest. A
 * conversation's next turn resends every earlier block: this costs it a copy of their keys instead
 * of one SHA-256 call per block, or a fingerprint pass over every token as PrefixMemo needs, and no
 * copy at all when `prev` is the last chain laid in its run and the run has room: the new blocks
 * are hashed in place, over what followed in `prev`. So a chain's views are only sure to stand until
 * the next extendChain; copy what you keep. Text prompts only: a multimodal item's or a prompt
 * embedding's keys depend on more than the tokens.
 */
export function extendChain(tokens: Uint32Array, o: TextHashOptions, prev?: KeyChain, same = 0): KeyChain {
  assertBlockSize(o.blockSizeTokens);
  const bs = o.blockSizeTokens;
  const n = Math.floor(tokens.length / bs);
  // Blocks of `prev` written over since it was laid are not taken from it.
  const b = prev === undefined ? 0 : prev.run.standing(Math.max(0, Math.min(same, n, prev.keys.length)), prev.cutsSeen);
  const inPlace = prev !== undefined && prev.run.used === prev.keys.length && n <= prev.run.keys.length && prev.run.cuts.length < maxChainCuts;
  const run = inPlace ? prev.run : new ChainRun(chainRunBlocks(n));
  if (inPlace) {
    if (b < run.used) run.cuts.push(b);
  } else if (prev !== undefined && b > 0) {
    run.keys.set(prev.keys.subarray(0, b));
    run.digests.set(prev.digests.subarray(0, b * DIGEST_BYTES));
  }
  if (b < n) {
    const rest = tokens.subarray(b * bs);
    const from = b === 0 ? undefined : { parent: run.digests.subarray((b - 1) * DIGEST_BYTES, b * DIGEST_BYTES), blockIndex: b };
    chainInto(rest, o, from, new Uint32Array(run.keys.buffer, b * 8, (n - b) * 2), run.digests.subarray(b * DIGEST_BYTES, n * DIGEST_BYTES));
  }
  run.used = n;
  // The one other place a BlockKeyArray is made: its keys came out of our own chain, old or new.
  return { keys: run.keys.subarray(0, n) as BlockKeyArray, digests: run.digests.subarray(0, n * DIGEST_BYTES), run, cutsSeen: run.cuts.length };
}

/** The serialised input of one block, exactly the bytes vLLM hashes (for tests and diagnostics). */
export function blockMessage(
  parent: Uint8Array,
  blockTokens: ArrayLike<number>,
  extraKeys: readonly ExtraKey[] | null,
  algo: HashAlgo = 'sha256_cbor',
): Uint8Array {
  assertAlgo(algo);
  if (algo === 'sha256') return pickleBlock(parent, blockTokens, 0, blockTokens.length, extraKeys);
  const extra = cborOfExtraKeys(extraKeys);
  const out = Buffer.alloc(TOKENS_AT + 9 + blockTokens.length * 9 + extra.length);
  out[0] = 0x83;
  let p = writeHead(out, 1, 2, parent.length);
  out.set(parent, p);
  p = writeTokens(out, p + parent.length, blockTokens, 0, blockTokens.length);
  out.set(extra, p);
  return out.subarray(0, p + extra.length);
}
