// vLLM's KV-cache events (vllm/distributed/kv_events.py), with vLLM's field names in camelCase.
// Absent fields of older versions are null, never undefined, so every consumer handles one shape.

/**
 * A block hash as vLLM sends it: the uint64 int form (the default, VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1,
 * the last 8 digest bytes) or the full digest bytes (=0). Ints are BigInt: a Number loses bits past 2^53.
 */
export type WireBlockHash = bigint | Uint8Array;

/** Blocks newly cached by one request in one KV-cache group (or announced by an offload tier). */
export interface BlockStored {
  readonly type: 'BlockStored';
  readonly blockHashes: WireBlockHash[];
  readonly parentBlockHash: WireBlockHash | null;
  /** len = blockHashes.length x blockSize; empty with blockSize 0 for an offload placeholder. */
  readonly tokenIds: number[];
  readonly blockSize: number;
  readonly loraId: number | null;
  readonly medium: string | null;
  readonly loraName: string | null;
  /** One entry per block: the extra-keys tuple (as an array) or null. */
  readonly extraKeys: (unknown[] | null)[] | null;
  readonly groupIdx: number | null;
  readonly kvCacheSpecKind: string | null;
  readonly kvCacheSpecSlidingWindow: number | null;
  readonly locality: string | null;
}

/** Blocks evicted (vLLM's GPU pool sends one hash per event; offload tiers may send several). */
export interface BlockRemoved {
  readonly type: 'BlockRemoved';
  readonly blockHashes: WireBlockHash[];
  readonly medium: string | null;
  readonly groupIdx: number | null;
  readonly locality: string | null;
}

/** reset_prefix_cache: the engine dropped every cached block. */
export interface AllBlocksCleared {
  readonly type: 'AllBlocksCleared';
}

/** One KV-cache event. */
export type KvEvent = BlockStored | BlockRemoved | AllBlocksCleared;

/** One published batch: one engine step's events. */
export interface EventBatch {
  /** Seconds since the epoch, as the engine's time.time(). */
  readonly ts: number;
  readonly events: KvEvent[];
  /** The publisher stamps its data-parallel rank; null only in v0.9.0's 2-element batches. */
  readonly dataParallelRank: number | null;
}

/** How a vLLM version encodes the events inside a batch: tagged maps (>= v0.24) or positional arrays (<= v0.23). */
export type EventFormat = 'map' | 'array';

/** Field order of each event as vLLM declares it: map keys and array positions follow it. */
export const BLOCK_STORED_FIELDS = [
  'block_hashes',
  'parent_block_hash',
  'token_ids',
  'block_size',
  'lora_id',
  'medium',
  'lora_name',
  'extra_keys',
  'group_idx',
  'kv_cache_spec_kind',
  'kv_cache_spec_sliding_window',
  'locality',
] as const;

/** BlockRemoved's fields in declaration order. */
export const BLOCK_REMOVED_FIELDS = ['block_hashes', 'medium', 'group_idx', 'locality'] as const;

/** Elements of the longest positional BlockStored (tag and 11 fields; `locality` came with the map form). */
export const STORED_ARITY_MAX = 12;

/** Elements of the longest positional BlockRemoved (tag and 3 fields). */
export const REMOVED_ARITY_MAX = 4;

/** A BlockStored with vLLM's defaults for everything not given (GPU medium, no LoRA, no extra keys). */
export function blockStored(
  f: Pick<BlockStored, 'blockHashes' | 'parentBlockHash' | 'tokenIds' | 'blockSize'> & Partial<BlockStored>,
): BlockStored {
  return {
    type: 'BlockStored',
    blockHashes: f.blockHashes,
    parentBlockHash: f.parentBlockHash,
    tokenIds: f.tokenIds,
    blockSize: f.blockSize,
    loraId: f.loraId ?? null,
    medium: f.medium === undefined ? 'GPU' : f.medium,
    loraName: f.loraName ?? null,
    extraKeys: f.extraKeys ?? null,
    groupIdx: f.groupIdx ?? null,
    kvCacheSpecKind: f.kvCacheSpecKind ?? null,
    kvCacheSpecSlidingWindow: f.kvCacheSpecSlidingWindow ?? null,
    locality: f.locality ?? null,
  };
}

/** A BlockRemoved with vLLM's defaults (GPU medium). */
export function blockRemoved(f: Pick<BlockRemoved, 'blockHashes'> & Partial<BlockRemoved>): BlockRemoved {
  return {
    type: 'BlockRemoved',
    blockHashes: f.blockHashes,
    medium: f.medium === undefined ? 'GPU' : f.medium,
    groupIdx: f.groupIdx ?? null,
    locality: f.locality ?? null,
  };
}
