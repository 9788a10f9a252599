// One engine's prefix-cache blocks as its KV events describe them, turned into the NET change of
// our own block keys that the cluster index needs. Which key a block gets is its verifier's word:
// the engine's hash while that is known or believed to be ours, our digest of its tokens after a
// mismatch (another PYTHONHASHSEED or hash algorithm), so routing keeps working for such an engine.
import { LlmgwError } from '../errors/index.js';
import type { BlockKey, HashAlgo } from './block-key.js';
import type { KvDelta, KvStatus, ResetReason, TierChange, Verification } from './delta.js';
import type { BlockRemoved, BlockStored, EventBatch } from './events.js';
import { engineHashOf, HashVerifier, type BlockHasher } from './verifier.js';

/** What the mirror reports about itself, besides deltas. */
export type MirrorStatus = Extract<KvStatus, { type: 'mirror.verified' | 'mirror.hash-mismatch' | 'mirror.reset' }>;

/** Options of an EngineMirror. */
export interface EngineMirrorOptions {
  /** PYTHONHASHSEED the engine was started with, as a string. */
  readonly seed: string;
  readonly algo?: HashAlgo;
  /** The block size the router hashes prompts at; a stored block of k times this is checked as k chained blocks. */
  readonly blockSizeTokens?: number;
  /** Blocks the engine can hold in all its tiers and ranks; the mirror never holds more than this x marginFactor. */
  readonly capacityBlocks: number;
  readonly marginFactor?: number;
  /** How many stored blocks must match our hash before the engine counts as verified. */
  readonly verifyBlocks?: number;
  /** Where the verifier's hashing runs (the worker pool); default: this thread. */
  readonly hasher?: BlockHasher;
  readonly onStatus?: (s: MirrorStatus) => void;
}

/** Counters of a mirror, for status pages and tests. */
export interface MirrorStats {
  blocks: number;
  keys: number;
  stored: number;
  removed: number;
  unknownRemovals: number;
  reannounced: number;
  unkeyed: number;
  overCapacityResets: number;
  clears: number;
}

interface Held {
  readonly parent: bigint | undefined;
  refs: number;
  key: BlockKey | undefined;
}

interface Partition {
  readonly rank: number;
  readonly medium: string;
  readonly group: number;
  readonly blocks: Map<bigint, Held>;
}

/** The blocks of one (rank, medium, group) as plain data: engine hash, references and our key (null: unkeyed). */
export interface PartitionState {
  readonly rank: number;
  readonly medium: string;
  readonly group: number;
  readonly hashes: readonly bigint[];
  readonly refs: readonly number[];
  readonly keys: readonly (BlockKey | null)[];
}

/** A mirror as plain data, for the agent to keep across its own restarts. */
export interface MirrorState {
  readonly verification: Verification;
  readonly parts: readonly PartitionState[];
}

// Entries of one key under non-GPU media. Kept only for keys that have such entries, so the usual
// GPU-only engine pays one number per key and no object.
interface OffGpu {
  n: number;
  readonly media: Map<string, number>;
}

const GPU = 'GPU';

// The cheapest tier holding a key with `n` entries: the GPU, then CPU memory, then the rest.
function tierOf(n: number, off: OffGpu | undefined): string {
  if (off === undefined || n > off.n) return GPU;
  if (off.media.has('CPU')) return 'CPU';
  let best = GPU;
  for (const m of off.media.keys()) if (best === GPU || m < best) best = m;
  return best;
}

/**
 * One engine's block set, keyed by (data-parallel rank, medium, group, engine hash), with parent
 * links and a reference count per key for re-announcements (offload tiers, duplicate physical
 * blocks). Applying a batch yields the net change of OUR keys; bounded by capacity x margin.
 */
export class EngineMirror {
  readonly #o: EngineMirrorOptions;
  readonly #limit: number;
  readonly #verifier: HashVerifier;
  // Batches the verifier has hashed, so apply() knows their keys are ready.
  readonly #prepared = new WeakSet<EventBatch>();
  #rekeyed = false;
  readonly #parts = new Map<string, Partition>();
  // Our key -> how many (rank, medium, group, hash) entries map to it.
  readonly #keys = new Map<BlockKey, number>();
  readonly #offGpu = new Map<BlockKey, OffGpu>();
  // Each touched key's tier before the batch being applied (null: not held), for its net delta;
  // undefined outside apply().
  #touched: Map<BlockKey, string | null> | undefined;
  readonly #touchedMap = new Map<BlockKey, string | null>();
  #size = 0;
  readonly #stats: MirrorStats = {
    blocks: 0,
    keys: 0,
    stored: 0,
    removed: 0,
    unknownRemovals: 0,
    reannounced: 0,
    unkeyed: 0,
    overCapacityResets: 0,
    clears: 0,
  };

  constructor(o: EngineMirrorOptions) {
    this.#o = o;
    this.#limit = Math.max(1, Math.ceil(o.capacityBlocks * (o.marginFactor ?? 2)));
    this.#verifier = new HashVerifier({
      seed: o.seed,
      algo: o.algo,
      blockSizeTokens: o.blockSizeTokens,
      verifyBlocks: o.verifyBlocks,
      hasher: o.hasher,
      onStatus: (st) => this.#status(st),
    });
  }

  /** Whether the engine's hashes are known to equal ours. */
  get verification(): Verification {
    return this.#verifier.verification;
  }

  /**
   * Hashes what the batch needs before apply(): undefined when that is done, else a promise to
   * wait for (the hasher runs in the worker pool). apply() prepares a batch itself when it can.
   */
  prepare(batch: EventBatch, rank: number): Promise<void> | undefined {
    const p = this.#verifier.prepare(batch, rank);
    if (p === undefined) this.#prepared.add(batch);
    return p?.then(() => void this.#prepared.add(batch));
  }

  /** The most blocks the mirror holds before it resets itself. */
  get limitBlocks(): number {
    return this.#limit;
  }

  /** Counters, copied. */
  stats(): MirrorStats {
    return { ...this.#stats, blocks: this.#size, keys: this.#keys.size };
  }

  /** Applies one batch from data-parallel rank `rank`; returns the net change of our keys. */
  apply(batch: EventBatch, rank: number): KvDelta {
    if (!this.#prepared.has(batch) && this.prepare(batch, rank) !== undefined) {
      throw new LlmgwError('LLMGW_KV_UNPREPARED', `rank ${rank}: a batch was applied while its hashes were still being computed; await prepare() first`);
    }
    this.#prepared.delete(batch);
    const touched = this.#touchedMap;
    touched.clear();
    this.#touched = touched;
    let reset: ResetReason | undefined;
    try {
      // After a mismatch the keys handed out so far (the engine's hashes) are wrong.
      if (this.#verifier.verification === 'mismatch' && !this.#rekeyed) {
        this.#rekeyed = true;
        this.#rekeyAll();
      }
      reset = this.#applyEvents(batch, rank);
    } finally {
      this.#touched = undefined;
    }
    if (reset !== undefined) return this.#fullDelta(reset);
    return this.#deltaOf(touched);
  }

  #applyEvents(batch: EventBatch, rank: number): ResetReason | undefined {
    let reset: ResetReason | undefined;
    for (const ev of batch.events) {
      switch (ev.type) {
        case 'BlockStored':
          if (this.#stored(ev, rank)) reset = 'over-capacity';
          break;
        case 'BlockRemoved':
          this.#removed(ev, rank);
          break;
        case 'AllBlocksCleared':
          this.#stats.clears++;
          this.#clearRank(rank);
          this.#status({ type: 'mirror.reset', rank, reason: 'all-blocks-cleared', detail: 'the engine cleared its prefix cache' });
          reset ??= 'all-blocks-cleared';
          break;
      }
    }
    return reset;
  }

  /** Drops everything one rank held (its stream lost history, as the caller reports); the delta resets the consumer. */
  resetRank(rank: number, reason: ResetReason): KvDelta {
    this.#clearRank(rank);
    return this.#fullDelta(reason);
  }

  /** Every key the engine holds, for a new upstream stream. */
  snapshot(): BlockKey[] {
    return [...this.#keys.keys()];
  }

  /** Keys whose best tier is not the GPU, with that tier. */
  tiersSnapshot(): TierChange[] {
    const out: TierChange[] = [];
    for (const [key, off] of this.#offGpu) {
      const t = tierOf(this.#keys.get(key) ?? 0, off);
      if (t !== GPU) out.push({ key, medium: t });
    }
    return out;
  }

  /** Everything held, as plain data: what restore() takes back. */
  state(): MirrorState {
    const parts: PartitionState[] = [];
    for (const p of this.#parts.values()) {
      if (p.blocks.size === 0) continue;
      const hashes: bigint[] = [];
      const refs: number[] = [];
      const keys: (BlockKey | null)[] = [];
      for (const [hash, held] of p.blocks) {
        hashes.push(hash);
        refs.push(held.refs);
        keys.push(held.key ?? null);
      }
      parts.push({ rank: p.rank, medium: p.medium, group: p.group, hashes, refs, keys });
    }
    return { verification: this.#verifier.verification, parts };
  }

  /**
   * Takes back what state() gave, into a mirror that holds nothing yet (an agent restarted beside a
   * running engine). Digests are not kept: after a mismatch, a continuation of a restored block is
   * unkeyed until its chain is stored again.
   */
  restore(s: MirrorState): void {
    if (this.#size > 0) return;
    this.#verifier.restore(s.verification);
    this.#rekeyed = s.verification === 'mismatch';
    for (const p of s.parts) {
      const part = this.#partition(p.rank, p.medium, p.group);
      for (let i = 0; i < p.hashes.length && this.#size < this.#limit; i++) {
        const hash = p.hashes[i];
        const refs = p.refs[i] ?? 1;
        const key = p.keys[i] ?? undefined;
        if (hash === undefined || part.blocks.has(hash)) continue;
        part.blocks.set(hash, { parent: undefined, refs, key });
        this.#size++;
        this.#verifier.retain(hash);
        if (key === undefined) this.#stats.unkeyed++;
        else this.#hold(key, part.medium);
      }
    }
  }

  /** Whether `key` is held anywhere, and in which best tier. */
  tierOf(key: BlockKey): string | undefined {
    const n = this.#keys.get(key);
    return n === undefined ? undefined : tierOf(n, this.#offGpu.get(key));
  }

  #status(s: MirrorStatus): void {
    this.#o.onStatus?.(s);
  }

  #partition(rank: number, medium: string | null, groupIdx: number | null): Partition {
    const m = medium ?? GPU;
    const id = `${rank}\u0000${m}\u0000${groupIdx ?? 0}`;
    let p = this.#parts.get(id);
    if (p === undefined) {
      p = { rank, medium: m, group: groupIdx ?? 0, blocks: new Map() };
      this.#parts.set(id, p);
    }
    return p;
  }

  // Returns true when the bound forced a reset.
  #stored(ev: BlockStored, rank: number): boolean {
    let part = this.#partition(rank, ev.medium, ev.groupIdx);
    const n = ev.blockHashes.length;
    const parent = ev.parentBlockHash === null ? undefined : engineHashOf(ev.parentBlockHash);
    let overflowed = false;
    let prev = parent;
    for (let i = 0; i < n; i++) {
      const hash = engineHashOf(ev.blockHashes[i]);
      const held = part.blocks.get(hash);
      this.#stats.stored++;
      if (held !== undefined) {
        held.refs++;
        this.#stats.reannounced++;
        prev = hash;
        continue;
      }
      if (this.#size >= this.#limit) {
        overflowed = true;
        this.#overCapacity(rank);
        part = this.#partition(rank, ev.medium, ev.groupIdx);
      }
      const key = this.#verifier.keyOf(hash);
      part.blocks.set(hash, { parent: prev, refs: 1, key });
      prev = hash;
      this.#size++;
      this.#verifier.retain(hash);
      if (key === undefined) this.#stats.unkeyed++;
      else this.#hold(key, part.medium);
    }
    return overflowed;
  }

  #removed(ev: BlockRemoved, rank: number): void {
    const part = this.#partition(rank, ev.medium, ev.groupIdx);
    for (const raw of ev.blockHashes) {
      const hash = engineHashOf(raw);
      const held = part.blocks.get(hash);
      if (held === undefined) {
        // Normal after a reset or a late join: the block was stored before we could see it.
        this.#stats.unknownRemovals++;
        continue;
      }
      this.#stats.removed++;
      if (--held.refs > 0) continue;
      this.#drop(part, hash, held);
    }
  }

  #drop(part: Partition, hash: bigint, held: Held): void {
    part.blocks.delete(hash);
    this.#size--;
    if (held.key === undefined) this.#stats.unkeyed--;
    else this.#release(held.key, part.medium);
    this.#verifier.release(hash);
  }

  #hold(key: BlockKey, medium: string): void {
    const n = this.#keys.get(key);
    const touched = this.#touched;
    if (touched !== undefined && !touched.has(key)) touched.set(key, n === undefined ? null : tierOf(n, this.#offGpu.get(key)));
    this.#keys.set(key, (n ?? 0) + 1);
    if (medium === GPU) return;
    let off = this.#offGpu.get(key);
    if (off === undefined) {
      off = { n: 0, media: new Map() };
      this.#offGpu.set(key, off);
    }
    off.n++;
    off.media.set(medium, (off.media.get(medium) ?? 0) + 1);
  }

  #release(key: BlockKey, medium: string): void {
    const n = this.#keys.get(key);
    if (n === undefined) return;
    const off = this.#offGpu.get(key);
    const touched = this.#touched;
    if (touched !== undefined && !touched.has(key)) touched.set(key, tierOf(n, off));
    if (n === 1) {
      this.#keys.delete(key);
      this.#offGpu.delete(key);
      return;
    }
    this.#keys.set(key, n - 1);
    if (medium === GPU || off === undefined) return;
    const left = (off.media.get(medium) ?? 1) - 1;
    if (left > 0) off.media.set(medium, left);
    else off.media.delete(medium);
    if (--off.n === 0) this.#offGpu.delete(key);
  }

  #deltaOf(touched: Map<BlockKey, string | null>): KvDelta {
    const added: BlockKey[] = [];
    const removed: BlockKey[] = [];
    let tiers: TierChange[] | undefined;
    for (const [key, before] of touched) {
      const n = this.#keys.get(key);
      if (n === undefined) {
        if (before !== null) removed.push(key);
        continue;
      }
      if (before === null) added.push(key);
      const tier = tierOf(n, this.#offGpu.get(key));
      if (tier !== before && (before !== null || tier !== GPU)) (tiers ??= []).push({ key, medium: tier });
    }
    return tiers === undefined ? { added, removed } : { added, removed, tiers };
  }

  #fullDelta(reset: ResetReason): KvDelta {
    const tiers = this.tiersSnapshot();
    const d: KvDelta = { added: this.snapshot(), removed: [], reset };
    if (tiers.length > 0) d.tiers = tiers;
    return d;
  }

  #clearRank(rank: number): void {
    for (const [id, part] of this.#parts) {
      if (part.rank !== rank) continue;
      for (const [hash, held] of part.blocks) this.#drop(part, hash, held);
      this.#parts.delete(id);
    }
  }

  // More blocks than the engine can hold means we missed removals: what we hold is partly stale.
  // Starting the engine over costs routing a warm-up; keeping stale blocks would send requests to
  // a replica for prefixes it evicted, and growing without bound would take the gateway down.
  #overCapacity(rank: number): void {
    this.#stats.overCapacityResets++;
    for (const part of this.#parts.values()) {
      for (const [hash, held] of part.blocks) this.#drop(part, hash, held);
    }
    this.#parts.clear();
    this.#status({
      type: 'mirror.reset',
      rank,
      reason: 'over-capacity',
      detail: `the engine announced more than ${this.#limit} blocks (capacity x margin) without removing any: removals were lost`,
    });
  }

  // Moves every block to our key where we know it, or makes it unroutable where we do not.
  #rekeyAll(): void {
    for (const part of this.#parts.values()) {
      for (const [hash, held] of part.blocks) {
        const key = this.#verifier.keyOf(hash);
        if (held.key === key) continue;
        if (held.key !== undefined) this.#release(held.key, part.medium);
        else this.#stats.unkeyed--;
        held.key = key;
        if (key === undefined) this.#stats.unkeyed++;
        else this.#hold(key, part.medium);
      }
    }
  }
}
