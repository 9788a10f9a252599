// The one shape an engine's KV state travels in from the socket to the cluster index: a net change
// of our block keys (KvDelta), and one vocabulary of status facts (KvStatus). Plain data (bigint
// keys, strings, numbers), so the agent link can serialize it unchanged and the gateway's index
// writer reads exactly what the mirror produced.
import type { BlockKey, EngineBlockHash } from './block-key.js';

/** Why a rank's mirrored state was thrown away; the words operators see in logs, status and metrics. */
export type ResetReason =
  | 'engine-restart'
  | 'late-join'
  | 'replay-gap'
  | 'replay-timeout'
  | 'replay-unavailable'
  | 'all-blocks-cleared'
  | 'over-capacity'
  | 'requested';

/** Every ResetReason, for tables and metrics that show each one from the start. */
export const RESET_REASONS: readonly ResetReason[] = [
  'engine-restart',
  'late-join',
  'replay-gap',
  'replay-timeout',
  'replay-unavailable',
  'all-blocks-cleared',
  'over-capacity',
  'requested',
];

/** A key's cheapest tier changed, or a key became held only off the GPU (CPU, STORAGE...). */
export interface TierChange<K extends bigint = BlockKey> {
  readonly key: K;
  readonly medium: string;
}

/**
 * The NET change of an engine's keys after one batch. With `reset`, the consumer first drops every
 * key of this engine (of `rank` only, when given) and then holds exactly `added`. `tiers` lists only
 * keys whose best medium is not the GPU or just changed; a key never listed there is on the GPU.
 * `K` is our BlockKey; a consumer that only stores 64-bit keys (the index writer) takes any bigint.
 */
export interface KvDelta<K extends bigint = BlockKey> {
  added: K[];
  removed: K[];
  reset?: ResetReason;
  tiers?: TierChange<K>[];
  /**
   * The data-parallel rank whose cache this is, set by a stream over several ranks (each rank has
   * its own cache and its own mirror); absent: the engine's only rank. A reset with a rank drops
   * only that rank's keys.
   */
  rank?: number;
}

/** Whether the engine's hashes are ours: decided from its first stored blocks. */
export type Verification = 'pending' | 'verified' | 'mismatch';

/**
 * Everything an engine's stream says besides deltas, named as facts, in the order it happened:
 * the sequencer's (gapped, replaying, resynced, reset), the transport's and decoder's (malformed) and the
 * mirror's (verified, hash-mismatch, reset by the engine's own clear or by the capacity bound).
 */
export type KvStatus =
  | { type: 'stream.gapped'; rank: number; expected: number; got: number }
  | { type: 'stream.replaying'; rank: number; from: number }
  | { type: 'stream.resynced'; rank: number; from: number; to: number; replayed: number }
  | { type: 'stream.reset'; rank: number; reason: ResetReason; detail: string }
  | { type: 'stream.malformed'; rank: number; seq: number | null; reason: string; count: number }
  | { type: 'mirror.verified'; blocks: number }
  | { type: 'mirror.hash-mismatch'; rank: number; reason: string; engineHash: EngineBlockHash; ourKey: BlockKey }
  | { type: 'mirror.reset'; rank: number | null; reason: ResetReason; detail: string };
