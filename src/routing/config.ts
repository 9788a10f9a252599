// The router's configuration (gateway.router in llmgw.yaml); parsed and validated with the rest of
// the gateway section, declared here so routing needs nothing from the layer above it.
import type { RoutePolicy } from './policy.js';

/** The router's knobs; the defaults suit a small cluster of vLLM-like engines. */
export interface RouterConfig {
  /** Which tiers decide: precise (default), approximate, least-load, round-robin (the last three are baselines for benchmarks). */
  readonly policy: RoutePolicy;
  readonly tokenizeTimeoutMs: number;
  /**
   * How long a request waits for its model's tokenizer while it loads (after a restart) before it is
   * routed without it; 0: never waits. Meanwhile the pool's threads are busy loading, so the scores
   * of the engine's ids miss their deadline and a cached conversation would be routed by load.
   */
  readonly tokenizerLoadWaitMs: number;
  readonly tokenizeCacheEntries: number;
  /** Tokenize in the worker pool with the model's tokenizer (verified against /tokenize) instead of asking the engine. */
  readonly localTokenize: boolean;
  /** Requests per model tokenized both ways before local ids are used alone. */
  readonly tokenizeVerifyFirst: number;
  /** After that, one request in this many is checked against /tokenize in the background (0: never). */
  readonly tokenizeVerifyEvery: number;
  /** Bytes of segment ids each worker keeps per tokenizer, so a new turn encodes only what is new. */
  readonly tokenizeSegmentCacheBytes: number;
  /**
   * Bodies of at most this many bytes are tokenized, hashed and scored on the event loop instead of
   * in the pool (0: always in the pool): below it the trip to a worker costs more than the work.
   */
  readonly inlineTokenizeMaxBytes: number;
  /**
   * An answered chat's next turn is made ready in the pool only when its prompt had at least this
   * many tokens (0: every chat). A shorter chat's whole next turn encodes and hashes in less than
   * the pool trip that would prepare it, and most short chats never have a next turn.
   */
  readonly prepareMinPromptTokens: number;
  readonly scoreTimeoutMs: number;
  /** A replica whose queued uncached prefill takes longer than this to clear is not chosen for its cache. */
  readonly ttftBudgetMs: number;
  /** A replica with this many times the average requests waiting for a first token (at least 2) is not chosen for its cache; 0: no bound. */
  readonly boundedLoadFactor: number;
  /**
   * A cache holder too busy to be chosen for its cache (the two knobs above) is still waited for
   * when its queue plus the uncached rest is sooner than the best other replica's whole prefill;
   * false: it is always passed over, as before.
   */
  readonly waitOrSpill: boolean;
  /** Prefill rate assumed for a replica that does not state its own: the prior of the learned rate. */
  readonly prefillTokensPerS: number;
  /** How long a routed request's blocks count as held by its replica before the engine's events say so. */
  readonly predictionTtlMs: number;
  /** Bound on the approximate prefix tree, in chunks remembered. */
  readonly approxMaxChunks: number;
  /** Characters per chunk of the approximate tree (about 4 characters a token). */
  readonly approxChunkChars: number;
  /** How often each engine's /metrics is read for its queue. */
  readonly loadPollIntervalMs: number;
  /** What a block held only in a CPU-offload tier is worth against one in GPU memory (0..1). */
  readonly offloadTierWeight: number;
  /**
   * Prefill/decode disaggregation: a request whose decode replica already caches all but at most this
   * many of its prompt tokens is sent to that replica whole, without the prefill hop.
   */
  readonly pdSkipPrefillTokens: number;
  /**
   * The secret every gateway of a cluster signs its x-session-token with ('' : unsigned, llm-d's
   * plain base64 of the replica id, which a client can forge to choose its replica).
   */
  readonly sessionSecret: string;
}
