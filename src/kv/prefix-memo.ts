// The memo of prompt prefixes already hashed, so routing pays one fingerprint pass, not one SHA-256
// call per block, for the system prompts and earlier turns it sees again and again.
import { LlmgwError } from '../errors/index.js';
import type { HashOptions } from './block-key.js';

/** Hashes a run of blocks of one chain; the chain's state (the parent digest) carries over between runs. */
export interface Segmenter {
  run(i0: number, i1: number): void;
  parent(): Uint8Array;
  setParent(d: Uint8Array): void;
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
