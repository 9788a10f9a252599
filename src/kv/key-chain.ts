// A conversation's chains kept to extend: the next turn hashes only the blocks after the ones it
// shares with the last, in place in the same buffers when it can.
import type { BlockKeyArray, HashOptions } from './block-key.js';
import { DIGEST_BYTES } from './block-cbor.js';
import { assertBlockSize, chainInto } from './hashing.js';

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
