// How full each replica's cache is, by the engines' own KV events: the load tier's tie-break for a
// prompt no replica holds. Several gateways each keep their own load book and their own turn
// counter, so on an idle cluster every gateway's first cold prompt went to the same first replica:
// three 8 000-token documents through three gateways landed on one 16 000-token cache and evicted
// each other (bench/gateways.ts, long-doc at 3 gateways: 0.875 of the oracle's cached tokens). The
// block counts come from the index every gateway builds from the same events, so they agree on
// which replica has room without a word between them, and a lone gateway places by them too. They
// are counts, not shares of a capacity the gateway does not know: of two replicas with caches of
// different sizes, the larger looks fuller once both fill and is passed over in the ties it should
// win, which costs it cold prompts, never a hit (the tiers before this one place by hits).
import type { ReplicaSlots, SharedIndex } from '../kv/index.js';
import { MAX_SLOTS } from '../kv/index.js';

/** The shared index as kv's ClusterIndex is: each write says how many keys it changed for the slot. */
export interface CountingIndex extends SharedIndex {
  add(slot: number, keys: Iterable<bigint> | BigUint64Array): number;
  remove(slot: number, keys: Iterable<bigint> | BigUint64Array): number;
  clearSlot(slot: number): number;
}

/**
 * The shared index with the number of keys each slot holds kept beside it: the index writer writes
 * through it. The counts are the index's own answers, so a key reported twice or removed unheld
 * does not skew them; one addition per write, nothing on the decision path but a read.
 */
export class SlotCounts implements SharedIndex {
  readonly #index: CountingIndex;
  readonly #counts = new Float64Array(MAX_SLOTS);

  constructor(index: CountingIndex) {
    this.#index = index;
  }

  get size(): number {
    return this.#index.size;
  }

  add(slot: number, keys: Iterable<bigint> | BigUint64Array): number {
    const n = this.#index.add(slot, keys);
    this.#counts[slot] = (this.#counts[slot] ?? 0) + n;
    return n;
  }

  remove(slot: number, keys: Iterable<bigint> | BigUint64Array): number {
    const n = this.#index.remove(slot, keys);
    this.#counts[slot] = Math.max(0, (this.#counts[slot] ?? 0) - n);
    return n;
  }

  clearSlot(slot: number): number {
    const n = this.#index.clearSlot(slot);
    this.#counts[slot] = 0;
    return n;
  }

  /** Keys `slot` holds. */
  blocksIn(slot: number): number {
    return this.#counts[slot] ?? 0;
  }
}

/**
 * Blocks a replica's GPU cache holds by the index, for a replica with KV events: every rank's device
 * slot, plus what this gateway routed there that the engine has not reported yet (its own burst of
 * cold prompts counts at once). Offload tiers are left out: what they hold takes no GPU room. A
 * replica the index has no slots for reported nothing and was sent nothing: it holds none.
 */
export function cachedBlocksOf(s: ReplicaSlots | undefined, counts: SlotCounts): number {
  if (s === undefined) return 0;
  let n = counts.blocksIn(s.predicted);
  for (const h of s.held) if (!h.offload) n += counts.blocksIn(h.slot);
  return n;
}

/**
 * The room order of two candidates for a prompt of `promptBlocks` full blocks: negative when `a`
 * holds at least one such prompt's worth fewer blocks than `b`. Counted in whole prompts, so two
 * caches a few blocks apart tie and take turns as before (every gateway sending its cold prompts to
 * whichever full cache happens to be a block emptier would herd them), and the comparison stays a
 * consistent order for the sort. 0 when either count is unknown or the prompt fills no block.
 */
export function roomOrder(a: number | undefined, b: number | undefined, promptBlocks: number): number {
  if (a === undefined || b === undefined || promptBlocks < 1) return 0;
  return Math.floor(a / promptBlocks) - Math.floor(b / promptBlocks);
}
