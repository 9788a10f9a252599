// The names of what block hashing makes and takes: our keys and the engine's hashes as distinct types,
// and the options that decide a block's hash besides its tokens.
import { LlmgwError } from '../errors/index.js';

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
