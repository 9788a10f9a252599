// Public surface of kv/: vLLM-compatible block hashing, the KV event codec and publisher, the
// intake of an engine's events (transport, sequencer, replay, decoder, mirror) and the shared index.
export { blockExtraKeys, blockMessage, copyBlockKeys, hashBlockKeys, hashBlocks, noneHash } from './hashing.js';
export { cborOfExtraKeys } from './block-cbor.js';
export {
  isBlockKeyArray,
  keyOfDigest,
  type BlockKey,
  type BlockKeyArray,
  type ChainStart,
  type EngineBlockHash,
  type HashAlgo,
  type HashOptions,
  type MultimodalFeature,
  type PromptEmbeds,
} from './block-key.js';
export { extendChain, type KeyChain, type TextHashOptions } from './key-chain.js';
export { PrefixMemo } from './prefix-memo.js';
export {
  BLOCK_REMOVED_FIELDS,
  BLOCK_STORED_FIELDS,
  blockRemoved,
  blockStored,
  type AllBlocksCleared,
  type BlockRemoved,
  type BlockStored,
  type EventBatch,
  type EventFormat,
  type KvEvent,
  type WireBlockHash,
} from './events.js';
export { decodeEventBatch, type DecodeResult } from './decoder.js';
export { encodeEventBatch } from './encoder.js';
export { asExtraKeys, type ExtraKey } from './extra-key.js';
export {
  RESET_REASONS,
  type KvDelta,
  type KvStatus,
  type ResetReason,
  type TierChange,
  type Verification,
} from './delta.js';
export {
  END_SEQ,
  KvEventPublisher,
  offsetEndpointPort,
  publisherBinds,
  type KvEventPublisherOptions,
  type ReplayFraming,
} from './publisher.js';
export { ClusterIndex, IndexReader } from './shared-index.js';
export { KeyExpiries } from './key-expiries.js';
export { forEachKey, hiOf, loOf } from './key-words.js';
export { MAX_SLOTS, REMOVED_RING } from './index-layout.js';
export { SubTransport, type EngineBoundEndpoints, type SubTransportOptions } from './transport.js';
export {
  RankSequencer,
  type RankStats,
  type ReplayFn,
  type ReplayResult,
  type SeqFrame,
  type SequencerHooks,
  type SequencerStatus,
} from './sequencer.js';
export { parseReplayReply, readSeq, requestReplay, seqFrame } from './replay.js';
export { EngineMirror, type EngineMirrorOptions, type MirrorState, type MirrorStats, type MirrorStatus, type PartitionState } from './mirror.js';
export {
  digestRun,
  engineHashOf,
  HashVerifier,
  inThreadHasher,
  type BlockHasher,
  type DigestTask,
  type HashVerifierOptions,
} from './verifier.js';
export {
  EngineEventStream,
  parseStreamState,
  type AppliedBatch,
  type EngineEventStreamOptions,
  type EngineStreamStats,
  type StreamState,
} from './event-stream.js';
export { KvMetrics, type KvEngineHealth, type KvMetricsOptions } from './metrics.js';
export { anyRank, IndexWriter } from './index-writer.js';
export type { HeldSlot, ReplicaSlots, SharedIndex, WriterStats } from './index-writer.js';
