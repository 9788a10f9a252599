// Public surface of kv/: vLLM-compatible block hashing, KV event codec and publisher, the shared index.
export {
  blockExtraKeys,
  blockMessage,
  cborOfExtraKeys,
  hashBlockKeys,
  PrefixMemo,
  hashBlocks,
  keyOfDigest,
  noneHash,
  type BlockKey,
  type ChainStart,
  type EngineBlockHash,
  type ExtraKey,
  type HashAlgo,
  type HashOptions,
  type MultimodalFeature,
  type PromptEmbeds,
} from './hashing.js';
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
export { decodeEventBatch, encodeEventBatch, type DecodeResult } from './codec.js';
export {
  END_SEQ,
  KvEventPublisher,
  offsetEndpointPort,
  publisherBinds,
  type KvEventPublisherOptions,
  type ReplayFraming,
} from './publisher.js';
export { ClusterIndex, IndexReader } from './shared-index.js';
export { MAX_SLOTS } from './index-layout.js';
export {
  KvEventSubscriber,
  RankSequencer,
  parseReplayReply,
  readSeq,
  requestReplay,
  seqFrame,
  type EngineBoundEndpoints,
  type KvEventSubscriberOptions,
  type RankStats,
  type ReplayFn,
  type ReplayResult,
  type ResetReason,
  type SeqFrame,
  type SubscriberEvent,
} from './subscriber.js';
export {
  EngineMirror,
  type EngineMirrorOptions,
  type MirrorDelta,
  type MirrorStats,
  type MirrorStatus,
  type TierChange,
  type Verification,
} from './mirror.js';
export {
  EngineEventStream,
  type EngineEventStreamOptions,
  type EngineStreamStats,
  type EngineStreamStatus,
} from './event-stream.js';
