// The only writer of the shared cluster index. It turns each replica's net block changes (from the
// agent's event streams) into slot writes, accepts them only from the node that runs the replica
// (a node reporting another's replicas would poison routing for both), and keeps the short-lived
// predictions that let a burst of siblings land together before the engine's events arrive.
import { hasCode, LlmgwError } from '../errors/index.js';
import type { KvDelta } from './delta.js';
import type { BlockKeyArray } from './block-key.js';
import { KeyExpiries } from './key-expiries.js';
import { forEachKey, hiOf, loOf } from './key-words.js';

/** What the writer needs of the shared index (kv's ClusterIndex satisfies it). */
export interface SharedIndex {
  add(slot: number, keys: Iterable<bigint>): void;
  remove(slot: number, keys: Iterable<bigint>): void;
  clearSlot(slot: number): void;
  readonly size: number;
}

/** The rank of a slot holding blocks merged over every data-parallel rank of a replica. */
export const anyRank = -1;

/** One place a replica's blocks can be: its rank and whether that is an offload tier. */
export interface HeldSlot {
  readonly rank: number;
  readonly offload: boolean;
  readonly slot: number;
}

/** The slots of one replica: blocks the engine reported, and blocks routed there but not yet reported. */
export interface ReplicaSlots {
  readonly predicted: number;
  readonly held: readonly HeldSlot[];
}

interface ReplicaState {
  readonly predicted: number;
  readonly held: HeldSlot[];
  // Key -> expiry time (ms); a later prediction of the same key extends it.
  readonly predictions: KeyExpiries;
}

/** Counts the writer reports; the gateway's metrics read them. */
export interface WriterStats {
  eventsApplied: number;
  /** Deltas from a node that does not run the replica. */
  rejected: number;
  /** Deltas and predictions dropped because every index slot is taken (too many replicas). */
  slotless: number;
  resets: Map<string, number>;
}

/** Applies replicas' deltas to the shared index; owns the allocation of index slots to replicas. */
export class IndexWriter {
  readonly #index: SharedIndex;
  readonly #ownerOf: (replicaId: string) => string | undefined;
  readonly #ttlMs: number;
  readonly #now: () => number;
  readonly #replicas = new Map<string, ReplicaState>();
  readonly #free: number[];
  readonly #expiries: { at: number; replicaId: string; keys: BigUint64Array }[] = [];
  readonly #timer: NodeJS.Timeout | undefined;
  readonly stats: WriterStats = { eventsApplied: 0, rejected: 0, slotless: 0, resets: new Map() };

  constructor(o: {
    index: SharedIndex;
    slotCount: number;
    ownerOf: (replicaId: string) => string | undefined;
    predictionTtlMs: number;
    now?: () => number;
    sweepIntervalMs?: number;
  }) {
    this.#index = o.index;
    this.#ownerOf = o.ownerOf;
    this.#ttlMs = o.predictionTtlMs;
    this.#now = o.now ?? Date.now;
    this.#free = Array.from({ length: o.slotCount }, (_, i) => i);
    const every = o.sweepIntervalMs ?? Math.max(100, Math.floor(o.predictionTtlMs / 2));
    if (o.sweepIntervalMs !== 0) {
      this.#timer = setInterval(() => this.sweep(), every);
      // Expiring predictions must never keep a process alive on its own.
      this.#timer.unref();
    }
  }

  #take(replicaId: string): number {
    const slot = this.#free.shift();
    if (slot === undefined) {
      throw new LlmgwError(
        'LLMGW_INDEX_SLOTS',
        `replica ${replicaId}: the cluster index has no free slot (each replica takes one per data-parallel rank and cache tier, plus one); run fewer replicas per gateway`,
      );
    }
    return slot;
  }

  #state(replicaId: string): ReplicaState {
    let s = this.#replicas.get(replicaId);
    if (s === undefined) {
      s = { predicted: this.#take(replicaId), held: [], predictions: new KeyExpiries() };
      this.#replicas.set(replicaId, s);
    }
    return s;
  }

  #heldSlot(s: ReplicaState, replicaId: string, rank: number, offload: boolean): number {
    const found = s.held.find((h) => h.rank === rank && h.offload === offload);
    if (found !== undefined) return found.slot;
    const slot = this.#take(replicaId);
    s.held.push({ rank, offload, slot });
    return slot;
  }

  /** The slots of a replica, or undefined if nothing was ever reported or routed for it. */
  slotsOf(replicaId: string): ReplicaSlots | undefined {
    return this.#replicas.get(replicaId);
  }

  /** Applies `delta` for `replicaId` as reported by `node`; false (and counted) when node does not run it. */
  apply(node: string, replicaId: string, delta: Readonly<KvDelta<bigint>>): boolean {
    if (this.#ownerOf(replicaId) !== node) {
      this.stats.rejected++;
      return false;
    }
    try {
      this.#apply(replicaId, delta);
      return true;
    } catch (e) {
      // Called from the agent's event streams: a replica the index has no room for is routed by
      // the other tiers, it must not break the stream that reported it.
      if (!hasCode(e, 'LLMGW_INDEX_SLOTS')) throw e;
      this.stats.slotless++;
      return false;
    }
  }

  #apply(replicaId: string, delta: Readonly<KvDelta<bigint>>): void {
    const s = this.#state(replicaId);
    const rank = delta.rank ?? anyRank;
    if (delta.reset !== undefined) {
      if (delta.rank === undefined) this.#clear(s, delta.reset);
      else this.#clearRank(s, rank, delta.reset);
    }
    const device = this.#heldSlot(s, replicaId, rank, false);
    const offMedium = new Map<bigint, string>();
    for (const t of delta.tiers ?? []) offMedium.set(t.key, t.medium);
    const toDevice: bigint[] = [];
    const toOffload: bigint[] = [];
    for (const k of delta.added) {
      const m = offMedium.get(k);
      if (m === undefined || m === 'GPU') toDevice.push(k);
      else toOffload.push(k);
      offMedium.delete(k);
    }
    if (delta.removed.length > 0) {
      this.#index.remove(device, delta.removed);
      const off = s.held.find((h) => h.rank === rank && h.offload);
      if (off !== undefined) this.#index.remove(off.slot, delta.removed);
    }
    // Keys left in offMedium were held before and changed tier: move them between the two slots.
    const movedUp: bigint[] = [];
    for (const [k, m] of offMedium) {
      if (m === 'GPU') movedUp.push(k);
      else toOffload.push(k);
    }
    if (toOffload.length > 0) {
      const off = this.#heldSlot(s, replicaId, rank, true);
      this.#index.add(off, toOffload);
      this.#index.remove(device, toOffload);
    }
    if (movedUp.length > 0) {
      const off = s.held.find((h) => h.rank === rank && h.offload);
      if (off !== undefined) this.#index.remove(off.slot, movedUp);
      toDevice.push(...movedUp);
    }
    if (toDevice.length > 0) {
      this.#index.add(device, toDevice);
      // The engine now says it holds these: the guesses for them are no longer needed.
      const confirmed = toDevice.filter((k) => s.predictions.delete(hiOf(k), loOf(k)));
      if (confirmed.length > 0) this.#index.remove(s.predicted, confirmed);
    }
    this.stats.eventsApplied += delta.added.length + delta.removed.length;
  }

  #clear(s: ReplicaState, reason: string): void {
    for (const h of s.held) this.#index.clearSlot(h.slot);
    this.#index.clearSlot(s.predicted);
    s.predictions.clear();
    this.stats.resets.set(reason, (this.stats.resets.get(reason) ?? 0) + 1);
  }

  // One rank's cache started over: its slots are emptied; the other ranks' blocks and the
  // replica's predictions (which rank a request lands on is the engine's choice) stay.
  #clearRank(s: ReplicaState, rank: number, reason: string): void {
    for (const h of s.held) if (h.rank === rank) this.#index.clearSlot(h.slot);
    this.stats.resets.set(reason, (this.stats.resets.get(reason) ?? 0) + 1);
  }

  /** Clears everything known of a replica (its engine restarted or its stream was reset). */
  reset(replicaId: string, reason: string): void {
    const s = this.#replicas.get(replicaId);
    if (s !== undefined) this.#clear(s, reason);
  }

  /** The replica is gone for good: clear its slots and give them back. */
  forget(replicaId: string): void {
    const s = this.#replicas.get(replicaId);
    if (s === undefined) return;
    this.#clear(s, 'removed');
    this.#replicas.delete(replicaId);
    this.#free.push(s.predicted, ...s.held.map((h) => h.slot));
  }

  /**
   * Enters `keys` from index `from` on as routed to `replicaId`, held for the prediction lifetime
   * unless events confirm them. The keys before `from` are already in the index for it (reported,
   * or predicted by an earlier turn, keeping that turn's expiry): for a long conversation that is
   * nearly all of them, and entering them again would cost the event loop a map entry and an index
   * write per block on every turn.
   */
  predict(replicaId: string, keys: BlockKeyArray, from = 0): void {
    if (this.#ttlMs <= 0 || keys.length <= from) return;
    let s: ReplicaState;
    try {
      s = this.#state(replicaId);
    } catch (e) {
      if (!hasCode(e, 'LLMGW_INDEX_SLOTS')) throw e;
      this.stats.slotless++;
      return;
    }
    const at = this.#now() + this.#ttlMs;
    // A copy of the new keys, not a view: the expiry list holds them for the prediction's lifetime,
    // and a view of a 100k-token turn's keys would hold all 6000 (48 KB) for its 55 new ones.
    const fresh = from === 0 ? keys : keys.slice(from);
    forEachKey(fresh, (hi, lo) => s.predictions.set(hi, lo, at));
    this.#index.add(s.predicted, fresh);
    this.#expiries.push({ at, replicaId, keys: fresh });
  }

  /** Drops predictions whose lifetime has passed (a timer calls this; tests may call it directly). */
  sweep(): void {
    const now = this.#now();
    while (this.#expiries.length > 0 && (this.#expiries[0]?.at ?? Infinity) <= now) {
      const e = this.#expiries.shift();
      const s = e === undefined ? undefined : this.#replicas.get(e.replicaId);
      if (e === undefined || s === undefined) continue;
      // A key predicted again later carries the later expiry and stays.
      const due: bigint[] = [];
      forEachKey(e.keys, (hi, lo, i) => {
        const until = s.predictions.get(hi, lo);
        if (until === undefined || until > now) return;
        s.predictions.delete(hi, lo);
        due.push(e.keys[i] ?? 0n);
      });
      if (due.length > 0) this.#index.remove(s.predicted, due);
    }
  }

  /** Blocks in the index (all slots). */
  get size(): number {
    return this.#index.size;
  }

  /** Stops the expiry timer; the index itself belongs to whoever created it. */
  close(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
  }
}
