// The sim's settings: vLLM's names and defaults where vLLM has the setting, our own for speed,
// capacity and faults. Parsed once (src/cli/sim.ts maps argv here) and frozen.
import { LlmgwError } from '../errors/index.js';
import type { HashAlgo } from '../kv/index.js';
import type { Logger } from '../log/index.js';
import type { KvTransferConfig } from './kv-transfer.js';
import type { ReasoningParserName } from '../tokenize/index.js';

/** vLLM's KVEventsConfig, camelCased; the same JSON as `--kv-events-config`. */
export interface KvEventsConfig {
  readonly enableKvCacheEvents: boolean;
  readonly publisher: 'zmq' | 'null';
  readonly endpoint: string;
  readonly replayEndpoint: string | null;
  readonly bufferSteps: number;
  readonly hwm: number;
  readonly maxQueueSize: number;
  readonly topic: string;
}

/** Faults the sim injects on purpose, for supervision and event-stream tests. */
export interface SimFaults {
  /** Health answers 503 for this long after start (a slow model load). */
  readonly loadTimeMs: number;
  /** Health turns 503 this long after the sim became ready. */
  readonly failHealthAfterMs: number | undefined;
  /** The process dies once this many requests have been answered. */
  readonly crashAfterRequests: number | undefined;
  /** These batch sequence numbers are counted and kept for replay but never sent live: a gap. */
  readonly dropEventBatches: readonly number[];
  /** After this many batches the publisher is recreated (seq back to 0) and the cache forgotten without an event. */
  readonly restartEventsAfterBatches: number | undefined;
  /** The process dies once it has streamed this many tokens of one answer: an engine lost mid-stream. */
  readonly crashMidStreamAfterTokens?: number | undefined;
  /** Accept connections and never answer anything. */
  readonly hang: boolean;
  /** Adapters whose run-time load fails as vLLM's does for a missing path (absent: none). */
  readonly failLoraLoads?: readonly string[] | undefined;
}

/** A LoRA adapter served under its own model name (`--lora-modules name=path`). */
export interface LoraModule {
  readonly name: string;
  readonly path: string;
}

/** Everything startSim needs. */
export interface SimOptions {
  readonly model: string;
  readonly servedModelNames: readonly string[];
  readonly host: string;
  readonly port: number;
  readonly blockSizeTokens: number;
  readonly enablePrefixCaching: boolean;
  readonly hashAlgo: HashAlgo;
  /** PYTHONHASHSEED; undefined means random per start, as vLLM does (hashes then never match a gateway's). */
  readonly hashSeed: string | undefined;
  readonly kvEvents: KvEventsConfig | undefined;
  /** vLLM's --kv-transfer-config: the NIXL connector's role in prefill/decode disaggregation; undefined: none. */
  readonly kvTransfer: KvTransferConfig | undefined;
  /** Bytes of KV cache per token, which a transfer moves. */
  readonly kvBytesPerToken: number;
  /** The bandwidth between engines a transfer runs at, in bytes per second. */
  readonly kvTransferBytesPerS: number;
  readonly kvEventsFormat: 'map' | 'array';
  readonly kvReplayFraming: 'topic' | 'legacy';
  /** VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES (default on): hashes as uint64 rather than digest bytes. */
  readonly intBlockHashes: boolean;
  readonly dataParallelSize: number;
  readonly loraModules: readonly LoraModule[];
  /** VLLM_ALLOW_RUNTIME_LORA_UPDATING: adapters may be added and removed over HTTP. */
  readonly allowRuntimeLoraUpdating: boolean;
  /** How long a run-time adapter load takes (reading and moving its weights), so its cost shows in a bench. */
  readonly loraLoadTimeMs: number;
  readonly maxNumSeqs: number;
  readonly maxNumBatchedTokens: number;
  /** vLLM's --scheduling-policy: fcfs (a request's priority other than 0 is a 400), or priority (lower first). */
  readonly schedulingPolicy: 'fcfs' | 'priority';
  readonly maxModelLen: number;
  readonly kvCapacityBlocks: number;
  readonly prefillTokensPerS: number;
  readonly decodeTokensPerS: number;
  /** Tokens after which the model ends its answer (EOS, finish_reason "stop") when a request sets no max_tokens. */
  readonly answerTokens: number;
  /** Tokens a thinking answer reasons for before it answers (0: the model never thinks); see thinking.ts. */
  readonly thinkTokens: number;
  /** vLLM's --reasoning-parser: chat answers split into reasoning and content; absent: the raw text is the content. */
  readonly reasoningParser: ReasoningParserName | undefined;
  /** vLLM's --runner: 'pooling' serves /v1/embeddings (and refuses chat and completions), 'generate' the reverse. */
  readonly runner: 'generate' | 'pooling';
  /** The length of an embedding (the model's hidden size). */
  readonly embeddingDimensions: number;
  /** A Matryoshka model: a request's `dimensions` may shorten its vectors (vLLM's is_matryoshka). */
  readonly matryoshka: boolean;
  /** 'qwen3', 'bytes', or the path of a tokenizer.json. */
  readonly tokenizer: string;
  /** VLLM_API_KEY: when set, /v1/* needs `Authorization: Bearer <key>`. */
  readonly apiKey: string | undefined;
  readonly enablePromptTokensDetails: boolean;
  /** vLLM's --trust-request-chat-template: without it a request's chat_template is a 400. */
  readonly trustRequestChatTemplate: boolean;
  readonly faults: SimFaults;
  readonly log: Logger | undefined;
  /** What a crash fault does; the CLI exits the process, in-process tests get an abrupt close. */
  readonly onCrash: (() => void) | undefined;
}

/** Defaults for everything but the model. */
export const simDefaults = {
  host: '127.0.0.1',
  port: 8000,
  blockSizeTokens: 16,
  enablePrefixCaching: true,
  hashAlgo: 'sha256',
  kvEventsFormat: 'map',
  kvReplayFraming: 'topic',
  intBlockHashes: true,
  dataParallelSize: 1,
  maxNumSeqs: 256,
  schedulingPolicy: 'fcfs',
  maxNumBatchedTokens: 8192,
  kvCapacityBlocks: 4096,
  prefillTokensPerS: 20_000,
  decodeTokensPerS: 50,
  answerTokens: 48,
  thinkTokens: 0,
  loraLoadTimeMs: 300,
  tokenizer: 'qwen3',
  runner: 'generate',
  // all-MiniLM-L6-v2's size: a small embedding model's.
  embeddingDimensions: 384,
  enablePromptTokensDetails: true,
  // An 8B GQA model in bf16: 36 layers × 2 (K and V) × 8 heads × 128 dims × 2 bytes.
  kvBytesPerToken: 147_456,
  // One 100 Gb/s NIC's worth, less protocol overhead.
  kvTransferBytesPerS: 10e9,
} as const;

/** Fills defaults and checks ranges; every problem is reported with the flag to fix. */
export function resolveSimOptions(o: Partial<SimOptions> & { model: string }): SimOptions {
  const problems: string[] = [];
  const positive = (flag: string, v: number): number => {
    if (!Number.isInteger(v) || v <= 0) problems.push(`${flag}: ${v} is not a positive integer`);
    return v;
  };
  const rate = (flag: string, v: number): number => {
    if (!(v > 0) || !Number.isFinite(v)) problems.push(`${flag}: ${v} is not a positive number of tokens per second`);
    return v;
  };
  const blockSizeTokens = positive('--block-size', o.blockSizeTokens ?? simDefaults.blockSizeTokens);
  const kvCapacityBlocks = positive('--kv-capacity-blocks', o.kvCapacityBlocks ?? simDefaults.kvCapacityBlocks);
  const capacityTokens = blockSizeTokens * kvCapacityBlocks;
  // A request longer than the whole cache could never be scheduled and would block its queue.
  const maxModelLen = positive('--max-model-len', o.maxModelLen ?? Math.min(capacityTokens, 32_768));
  if (maxModelLen > capacityTokens) {
    problems.push(`--max-model-len: ${maxModelLen} tokens do not fit in ${kvCapacityBlocks} blocks of ${blockSizeTokens}; raise --kv-capacity-blocks or lower --max-model-len`);
  }
  const faults: SimFaults = {
    loadTimeMs: o.faults?.loadTimeMs ?? 0,
    failHealthAfterMs: o.faults?.failHealthAfterMs,
    crashAfterRequests: o.faults?.crashAfterRequests,
    dropEventBatches: o.faults?.dropEventBatches ?? [],
    restartEventsAfterBatches: o.faults?.restartEventsAfterBatches,
    hang: o.faults?.hang ?? false,
    crashMidStreamAfterTokens: o.faults?.crashMidStreamAfterTokens,
    failLoraLoads: o.faults?.failLoraLoads ?? [],
  };
  const resolved: SimOptions = {
    model: o.model,
    servedModelNames: o.servedModelNames !== undefined && o.servedModelNames.length > 0 ? o.servedModelNames : [o.model],
    host: o.host ?? simDefaults.host,
    port: o.port ?? simDefaults.port,
    blockSizeTokens,
    enablePrefixCaching: o.enablePrefixCaching ?? simDefaults.enablePrefixCaching,
    hashAlgo: o.hashAlgo ?? simDefaults.hashAlgo,
    hashSeed: o.hashSeed,
    kvEvents: o.kvEvents,
    kvTransfer: o.kvTransfer,
    kvBytesPerToken: positive('--kv-bytes-per-token', o.kvBytesPerToken ?? simDefaults.kvBytesPerToken),
    kvTransferBytesPerS: o.kvTransferBytesPerS ?? simDefaults.kvTransferBytesPerS,
    kvEventsFormat: o.kvEventsFormat ?? simDefaults.kvEventsFormat,
    kvReplayFraming: o.kvReplayFraming ?? simDefaults.kvReplayFraming,
    intBlockHashes: o.intBlockHashes ?? simDefaults.intBlockHashes,
    dataParallelSize: positive('--data-parallel-size', o.dataParallelSize ?? simDefaults.dataParallelSize),
    loraModules: o.loraModules ?? [],
    allowRuntimeLoraUpdating: o.allowRuntimeLoraUpdating ?? false,
    loraLoadTimeMs: o.loraLoadTimeMs ?? simDefaults.loraLoadTimeMs,
    maxNumSeqs: positive('--max-num-seqs', o.maxNumSeqs ?? simDefaults.maxNumSeqs),
    maxNumBatchedTokens: positive('--max-num-batched-tokens', o.maxNumBatchedTokens ?? simDefaults.maxNumBatchedTokens),
    schedulingPolicy: o.schedulingPolicy ?? simDefaults.schedulingPolicy,
    maxModelLen,
    kvCapacityBlocks,
    prefillTokensPerS: rate('--prefill-tokens-per-s', o.prefillTokensPerS ?? simDefaults.prefillTokensPerS),
    decodeTokensPerS: rate('--decode-tokens-per-s', o.decodeTokensPerS ?? simDefaults.decodeTokensPerS),
    answerTokens: positive('--answer-tokens', o.answerTokens ?? simDefaults.answerTokens),
    thinkTokens: o.thinkTokens ?? simDefaults.thinkTokens,
    reasoningParser: o.reasoningParser,
    runner: o.runner ?? simDefaults.runner,
    embeddingDimensions: positive('--embedding-dimensions', o.embeddingDimensions ?? simDefaults.embeddingDimensions),
    matryoshka: o.matryoshka ?? false,
    tokenizer: o.tokenizer ?? simDefaults.tokenizer,
    apiKey: o.apiKey === '' ? undefined : o.apiKey,
    enablePromptTokensDetails: o.enablePromptTokensDetails ?? simDefaults.enablePromptTokensDetails,
    trustRequestChatTemplate: o.trustRequestChatTemplate ?? false,
    faults,
    log: o.log,
    onCrash: o.onCrash,
  };
  if (!(resolved.kvTransferBytesPerS > 0) || !Number.isFinite(resolved.kvTransferBytesPerS)) problems.push(`--kv-transfer-bytes-per-s: ${resolved.kvTransferBytesPerS} is not a positive number of bytes per second`);
  if (!Number.isInteger(resolved.thinkTokens) || resolved.thinkTokens < 0) problems.push(`--think-tokens: ${resolved.thinkTokens} is not a whole number of tokens (0 or more)`);
  if (!(resolved.loraLoadTimeMs >= 0) || !Number.isFinite(resolved.loraLoadTimeMs)) problems.push(`--lora-load-time-ms: ${resolved.loraLoadTimeMs} is not a duration of 0 or more`);
  if (resolved.port < 0 || resolved.port > 65535 || !Number.isInteger(resolved.port)) problems.push(`--port: ${resolved.port} is not a TCP port (0 picks a free one)`);
  const names = new Set(resolved.servedModelNames);
  for (const l of resolved.loraModules) {
    if (names.has(l.name)) problems.push(`--lora-modules: ${JSON.stringify(l.name)} is already a model name; give the adapter its own name`);
    names.add(l.name);
  }
  if (problems.length > 0) {
    throw new LlmgwError('LLMGW_SIM_OPTIONS', `llmgw sim has ${problems.length} problem${problems.length === 1 ? '' : 's'}:\n  ${problems.join('\n  ')}`);
  }
  return Object.freeze(resolved);
}

const kvKeys: Readonly<Record<string, keyof KvEventsConfig>> = {
  enable_kv_cache_events: 'enableKvCacheEvents',
  publisher: 'publisher',
  endpoint: 'endpoint',
  replay_endpoint: 'replayEndpoint',
  buffer_steps: 'bufferSteps',
  hwm: 'hwm',
  max_queue_size: 'maxQueueSize',
  topic: 'topic',
};

/** Parses `--kv-events-config` JSON with vLLM's field names and defaults (publisher "zmq" once enabled, as since v0.11.1). */
export function parseKvEventsConfig(json: string): KvEventsConfig {
  let raw: unknown;
  try {
    raw = JSON.parse(json);
  } catch (e) {
    throw new LlmgwError('LLMGW_SIM_OPTIONS', `--kv-events-config: ${JSON.stringify(json)} is not JSON; pass e.g. '{"enable_kv_cache_events":true,"endpoint":"tcp://*:5557"}'`, { cause: e });
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new LlmgwError('LLMGW_SIM_OPTIONS', `--kv-events-config: ${json} is not a JSON object`);
  }
  const r = raw as Record<string, unknown>;
  const problems: string[] = [];
  for (const k of Object.keys(r)) if (!(k in kvKeys)) problems.push(`${k}: unknown field (have ${Object.keys(kvKeys).join(', ')})`);
  const bool = (k: string, d: boolean): boolean => {
    const v = r[k];
    if (v === undefined) return d;
    if (typeof v !== 'boolean') problems.push(`${k}: ${JSON.stringify(v)} is not true or false`);
    return v === true;
  };
  const str = (k: string, d: string): string => {
    const v = r[k];
    if (v === undefined) return d;
    if (typeof v !== 'string') problems.push(`${k}: ${JSON.stringify(v)} is not a string`);
    return String(v);
  };
  const int = (k: string, d: number): number => {
    const v = r[k];
    if (v === undefined) return d;
    if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0) problems.push(`${k}: ${JSON.stringify(v)} is not a positive integer`);
    return Number(v);
  };
  const enable = bool('enable_kv_cache_events', false);
  const publisher = str('publisher', enable ? 'zmq' : 'null');
  if (publisher !== 'zmq' && publisher !== 'null') problems.push(`publisher: ${JSON.stringify(publisher)} is not "zmq" or "null"`);
  const replay = r.replay_endpoint;
  if (replay !== undefined && replay !== null && typeof replay !== 'string') problems.push(`replay_endpoint: ${JSON.stringify(replay)} is not a string`);
  const cfg: KvEventsConfig = {
    enableKvCacheEvents: enable,
    publisher: publisher === 'zmq' ? 'zmq' : 'null',
    endpoint: str('endpoint', 'tcp://*:5557'),
    replayEndpoint: typeof replay === 'string' ? replay : null,
    bufferSteps: int('buffer_steps', 10_000),
    hwm: int('hwm', 100_000),
    maxQueueSize: int('max_queue_size', 100_000),
    topic: str('topic', ''),
  };
  if (problems.length > 0) {
    throw new LlmgwError('LLMGW_SIM_OPTIONS', `--kv-events-config has ${problems.length} problem${problems.length === 1 ? '' : 's'}:\n  ${problems.join('\n  ')}`);
  }
  return Object.freeze(cfg);
}
