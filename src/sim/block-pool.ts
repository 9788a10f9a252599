// One rank's KV cache, modelled on vLLM's BlockPool (vllm/v1/core/block_pool.py): a fixed number
// of blocks, a free queue in LRU order, full blocks kept findable by their chained hash after the
// request that filled them ends, and the same KV events vLLM emits. The order rules below are
// vLLM's, and they are what makes our events match a real engine's block for block.
import type { BlockRemoved, BlockStored, KvEvent } from '../kv/index.js';

/** One physical block: who holds it, and the hash it is findable by once full. */
export interface Block {
  readonly id: number;
  refCount: number;
  digest: Uint8Array | undefined;
  hashKey: string | undefined;
}

/** What a BlockStored needs to say about the request whose blocks filled (vLLM's cache_full_blocks). */
export interface FilledBlocks {
  readonly blocks: readonly Block[];
  readonly digests: readonly Uint8Array[];
  readonly tokenIds: readonly number[];
  readonly parent: Uint8Array | null;
  readonly loraId: number | null;
  readonly loraName: string | null;
  readonly extraKeys: readonly (readonly unknown[] | null)[];
}

/** How hashes appear in events: vLLM sends the digest's low 64 bits unless VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0. */
export type EventHash = (digest: Uint8Array) => bigint | Uint8Array;

const hexOf = (d: Uint8Array): string => Buffer.from(d.buffer, d.byteOffset, d.byteLength).toString('hex');

/** A rank's blocks, refcounts, LRU free queue, hash index, and the events they produce. */
export class BlockPool {
  readonly numBlocks: number;
  readonly #blocks: Block[];
  // Insertion order is the LRU order: the first entry is evicted first. A Map gives O(1) removal
  // from the middle, which touching a cached free block needs.
  readonly #free = new Map<number, Block>();
  readonly #cached = new Map<string, Map<number, Block>>();
  readonly #events: KvEvent[] = [];
  readonly #emitEvents: boolean;
  readonly #eventHash: EventHash;

  constructor(o: { numBlocks: number; emitEvents: boolean; eventHash: EventHash }) {
    this.numBlocks = o.numBlocks;
    this.#emitEvents = o.emitEvents;
    this.#eventHash = o.eventHash;
    this.#blocks = Array.from({ length: o.numBlocks }, (_, id) => ({ id, refCount: 0, digest: undefined, hashKey: undefined }));
    for (const b of this.#blocks) this.#free.set(b.id, b);
  }

  /** Blocks a new allocation could take (free, cached or not). */
  get numFree(): number {
    return this.#free.size;
  }

  /** Fraction of blocks held by running requests: vllm:kv_cache_usage_perc. */
  get usage(): number {
    return this.numBlocks === 0 ? 0 : 1 - this.#free.size / this.numBlocks;
  }

  /** Number of distinct hashes currently findable. */
  get cachedBlockCount(): number {
    let n = 0;
    for (const m of this.#cached.values()) n += m.size;
    return n;
  }

  /** A cached block holding this hash, if any. */
  cachedBlock(digest: Uint8Array): Block | undefined {
    const m = this.#cached.get(hexOf(digest));
    if (m === undefined) return undefined;
    for (const b of m.values()) return b;
    return undefined;
  }

  /** Takes a reference on cache hits; a hit sitting in the free queue leaves it, so it cannot be evicted under us. */
  touch(blocks: readonly Block[]): void {
    for (const b of blocks) {
      if (b.refCount === 0) this.#free.delete(b.id);
      b.refCount++;
    }
  }

  /** Pops n blocks from the head of the free queue, evicting any cached hash they held; undefined if short. */
  allocate(n: number): Block[] | undefined {
    if (n > this.#free.size) return undefined;
    const out: Block[] = [];
    for (const b of this.#free.values()) {
      if (out.length === n) break;
      out.push(b);
    }
    for (const b of out) {
      this.#free.delete(b.id);
      this.#evict(b);
      b.refCount = 1;
    }
    return out;
  }

  #evict(b: Block): void {
    if (b.hashKey === undefined || b.digest === undefined) return;
    const m = this.#cached.get(b.hashKey);
    m?.delete(b.id);
    if (m !== undefined && m.size === 0) this.#cached.delete(b.hashKey);
    const digest = b.digest;
    b.digest = undefined;
    b.hashKey = undefined;
    // vLLM sends one BlockRemoved per evicted block, never a batch of hashes in one event.
    if (this.#emitEvents) {
      const ev: BlockRemoved = { type: 'BlockRemoved', blockHashes: [this.#eventHash(digest)], medium: 'GPU', groupIdx: 0, locality: null };
      this.#events.push(ev);
    }
  }

  /** Makes newly full blocks findable and emits one BlockStored for them all, as one cache_full_blocks call does. */
  cacheFull(f: FilledBlocks): void {
    if (f.blocks.length === 0) return;
    f.blocks.forEach((b, i) => {
      const d = f.digests[i];
      if (d === undefined) return;
      const key = hexOf(d);
      b.digest = d;
      b.hashKey = key;
      let m = this.#cached.get(key);
      if (m === undefined) this.#cached.set(key, (m = new Map()));
      m.set(b.id, b);
    });
    if (!this.#emitEvents) return;
    const ev: BlockStored = {
      type: 'BlockStored',
      blockHashes: f.digests.map((d) => this.#eventHash(d)),
      parentBlockHash: f.parent === null ? null : this.#eventHash(f.parent),
      tokenIds: [...f.tokenIds],
      blockSize: f.tokenIds.length / f.blocks.length,
      loraId: f.loraId,
      medium: 'GPU',
      loraName: f.loraName,
      extraKeys: f.extraKeys.map((k) => (k === null ? null : [...k])),
      groupIdx: 0,
      kvCacheSpecKind: 'full_attention',
      kvCacheSpecSlidingWindow: null,
      locality: null,
    };
    this.#events.push(ev);
  }

  /**
   * Releases a finished or preempted request's blocks. Callers pass them tail first, as vLLM does,
   * so a prompt's last blocks are evicted before its first ones, which other prompts share more often.
   */
  release(blocksTailFirst: readonly Block[]): void {
    for (const b of blocksTailFirst) {
      b.refCount--;
      if (b.refCount === 0) this.#free.set(b.id, b);
    }
  }

  /** vLLM's reset_prefix_cache: refused while any block is held, else forgets every hash and says AllBlocksCleared. */
  reset(): boolean {
    if (this.#free.size !== this.numBlocks) return false;
    this.#forgetAll();
    if (this.#emitEvents) this.#events.push({ type: 'AllBlocksCleared' });
    return true;
  }

  /** A restarted engine knows no hashes and announces nothing: the fault the restart flag simulates. */
  forgetSilently(): void {
    this.#forgetAll();
  }

  #forgetAll(): void {
    for (const b of this.#blocks) {
      b.digest = undefined;
      b.hashKey = undefined;
    }
    this.#cached.clear();
  }

  /** The events produced since the last call: one scheduler step's batch. */
  takeEvents(): KvEvent[] {
    return this.#events.splice(0, this.#events.length);
  }
}
