// The `gateway:` section of llmgw.yaml: parsed once at startup into a frozen object, every problem
// reported at once with its YAML path, unknown keys rejected so a typo never becomes a default.
import { admissionDefaults, admissionKeys, defaultPriority, isPriorityClass, parseAdmissionSection, priorityClasses } from '../admission/index.js';
import type { AdmissionConfig, PriorityClass } from '../admission/index.js';
import { batchDefaults, batchKeys, parseBatchSection, type BatchConfig } from '../batch/index.js';
import { deepFreeze, readMap, type Issues, type MapReader } from '../config/index.js';
import { ConfigError } from '../errors/index.js';
import { routePolicies, type RoutePolicy, type RouterConfig } from '../routing/index.js';
import type { TracingConfig } from './tracing.js';

/** One client API key: stored as the sha256 of the secret, so the config file leaks nothing usable. */
export interface ApiKeyConfig {
  readonly name: string;
  readonly sha256: string;
  /** Requests admitted per minute; 0 is unlimited. */
  readonly requestsPerMinute: number;
  /** Prompt plus completion tokens per minute, counted from the engines' `usage`; 0 is unlimited. */
  readonly tokensPerMinute: number;
  /** May read the debug endpoints (`/debug/actors`): the state of every engine, and their log lines. */
  readonly admin: boolean;
  /** The team admission shares capacity between; absent or '': the key's own name. */
  readonly tenant?: string | undefined;
  /** The highest priority class its requests may ask for (absent: standard). */
  readonly priority?: PriorityClass | undefined;
  /** Its tenant's fair-share weight (absent: 1). */
  readonly weight?: number | undefined;
}

/** How the gateway talks to the engines. */
export interface UpstreamConfig {
  /** No response headers from the engine within this: 504 (or the next replica, if one is left). */
  readonly headersTimeoutMs: number;
  /** Silence between two chunks of a response longer than this ends it as failed. */
  readonly idleTimeoutMs: number;
  /** Keep-alive connections per engine. */
  readonly connections: number;
  /** Times one streamed answer may move to another replica after its engine broke off; 0: never. */
  readonly maxMigrations: number;
  /** Largest response head (status line and headers, or trailers) an engine may send. */
  readonly maxHeadBytes: number;
  /** Largest answer body an engine may send, streamed or whole. */
  readonly maxAnswerBytes: number;
  /** Largest single SSE event of a streamed answer (counted in characters, never more than its bytes). */
  readonly maxEventBytes: number;
}

/** LoRA adapters loaded on demand (profiles with runtime_lora). */
export interface AdaptersConfig {
  /** Adapters one replica holds loaded when its engine states no bound (--max-cpu-loras, --max-loaded-loras). */
  readonly maxPerReplica: number;
  /** Bound on one load or unload call to an engine. */
  readonly loadTimeoutMs: number;
}

/** Stored Responses (`previous_response_id`, GET /v1/responses/{id}). */
export interface ResponsesConfig {
  /** A stored response is forgotten this long after it was made. */
  readonly retentionS: number;
  /** Bounds of the in-memory store, used when no database keeps them. */
  readonly memoryMaxEntries: number;
  readonly memoryMaxBytes: number;
}

/** The whole `gateway:` section. */
export interface GatewayConfig {
  readonly host: string;
  readonly port: number;
  readonly maxBodyBytes: number;
  /** Arrays and objects nested deeper than this in a client's JSON body: 400. */
  readonly maxJsonDepth: number;
  /** A request whose body has not fully arrived this long after it began is cut with a 408. */
  readonly bodyTimeoutMs: number;
  /** After SIGTERM, how long new requests are still served (a load balancer takes a few health checks to notice /ready's 503). */
  readonly drainGraceMs: number;
  /** After SIGTERM, how long streams in flight may take to finish before they are cut. */
  readonly drainTimeoutMs: number;
  /** Models whose engines run with --trust-request-chat-template; for the rest a request's chat template is a 400. */
  readonly trustRequestChatTemplate: readonly string[];
  /** Empty: no authentication (bind to loopback only). */
  readonly apiKeys: readonly ApiKeyConfig[];
  readonly upstream: UpstreamConfig;
  readonly router: RouterConfig;
  readonly adapters: AdaptersConfig;
  readonly tracing: TracingConfig;
  readonly responses: ResponsesConfig;
  readonly admission: AdmissionConfig;
  readonly batch: BatchConfig;
}

/** Defaults for every key of the section; `parseGatewayConfig(undefined)` returns these. */
export const gatewayDefaults: GatewayConfig = deepFreeze({
  host: '127.0.0.1',
  port: 8080,
  maxBodyBytes: 16 * 1024 * 1024,
  maxJsonDepth: 64,
  // A whole 16 MiB body arrives in well under this on any link a gateway should serve; a client
  // trickling bytes held a connection (and its buffers) for Node's default of 300 s.
  bodyTimeoutMs: 20_000,
  // haproxy's default checks (every 2 s, 3 failures) take 6 s to mark a server down; a drain that is
  // idle ends at once, so the grace costs only a gateway that still has streams running. 30 s lets
  // an answer of some 1,500 tokens at 50 tokens/s finish; Kubernetes' default termination grace is 30 s too.
  drainGraceMs: 6_000,
  drainTimeoutMs: 30_000,
  trustRequestChatTemplate: [],
  apiKeys: [],
  // Two migrations: under bench/migration's 10 kills among three engines, one left 3-16 of 100
  // streams broken twice and lost, two lost none; a request whose answer kills every engine it runs
  // on (a query of death) still takes down three at most. An answer of 200k tokens streamed is some
  // 40 MiB of SSE; one event carries one token and its logprobs, a few KiB.
  upstream: {
    headersTimeoutMs: 120_000,
    idleTimeoutMs: 300_000,
    connections: 64,
    maxMigrations: 2,
    maxHeadBytes: 64 * 1024,
    maxAnswerBytes: 64 * 1024 * 1024,
    maxEventBytes: 1024 * 1024,
  },
  router: {
    policy: 'precise',
    tokenizeTimeoutMs: 250,
    tokenizerLoadWaitMs: 5_000,
    tokenizeCacheEntries: 4096,
    localTokenize: true,
    tokenizeVerifyFirst: 16,
    tokenizeVerifyEvery: 100,
    tokenizeSegmentCacheBytes: 64 * 1024 * 1024,
    inlineTokenizeMaxBytes: 1024,
    prepareMinPromptTokens: 2048,
    scoreTimeoutMs: 100,
    ttftBudgetMs: 2_000,
    boundedLoadFactor: 1.5,
    waitOrSpill: true,
    prefillTokensPerS: 8_000,
    predictionTtlMs: 3_000,
    approxMaxChunks: 200_000,
    approxChunkChars: 256,
    loadPollIntervalMs: 1_000,
    offloadTierWeight: 0.5,
    // vllm-project/router PR #130's threshold: below it the prefill hop and transfer cost more than they save.
    pdSkipPrefillTokens: 256,
    sessionSecret: '',
  },
  // A handful of adapters per replica: enough that a few hot ones do not thrash, few enough that a
  // 7B model's adapters (tens to hundreds of MB each) stay a small share of host memory.
  adapters: { maxPerReplica: 4, loadTimeoutMs: 60_000 },
  tracing: { otlpEndpoint: '' },
  // OpenAI keeps stored responses 30 days; in memory, 256 MiB holds some 2,500 conversations of 100 KB.
  responses: { retentionS: 30 * 24 * 3600, memoryMaxEntries: 100_000, memoryMaxBytes: 256 * 1024 * 1024 },
  admission: admissionDefaults,
  batch: batchDefaults,
});

const isHttpUrl = (v: unknown): v is string => typeof v === 'string' && (v === '' || /^https?:\/\/[^\s/]+/.test(v));
const isSha256Hex = (v: unknown): v is string => typeof v === 'string' && /^[0-9a-f]{64}$/.test(v);
const isFraction = (v: unknown): v is number => typeof v === 'number' && v >= 0 && v <= 1;
const isPolicy = (v: unknown): v is RoutePolicy => routePolicies.some((p) => p === v);
const isWeight = (v: unknown): v is number => typeof v === 'number' && v > 0 && v <= 1_000_000;
const isSessionSecret = (v: unknown): v is string => typeof v === 'string' && (v === '' || v.length >= 16);
const isLoadFactor = (v: unknown): v is number => typeof v === 'number' && (v === 0 || (v >= 1 && v <= 100));

function parseApiKey(raw: unknown, path: string, issues: Issues): ApiKeyConfig | undefined {
  const m = readMap(raw, path, issues, ['name', 'sha256', 'requests_per_minute', 'tokens_per_minute', 'admin', 'tenant', 'priority', 'weight']);
  if (m === undefined) return undefined;
  const k = {
    name: m.text('name', ''),
    sha256: m.value('sha256', '', isSha256Hex, 'a sha256 in lower-case hex; write the output of `printf %s "$KEY" | sha256sum`'),
    requestsPerMinute: m.int('requests_per_minute', 0, 0),
    tokensPerMinute: m.int('tokens_per_minute', 0, 0),
    admin: m.bool('admin', false),
    tenant: m.has('tenant') ? m.text('tenant', '') : '',
    priority: m.value('priority', defaultPriority, isPriorityClass, `a priority class (${priorityClasses.join(', ')})`),
    weight: m.value('weight', 1, isWeight, 'a fair-share weight above 0 (1 is the default; 2 gets twice the share)'),
  };
  if (k.name === '' || k.sha256 === '') issues.push({ path, message: 'needs both name and sha256' });
  return k;
}

/**
 * The worker pool's options the gateway's knobs decide (workers' HashPool options): each worker's
 * piece cache, the bodies tokenized on the event loop (none when local tokenizing is off), the
 * depth bound of the bodies it parses, and the texts it remembers for a next turn. Those are the
 * chats whose next turn is prepared: a prompt of n tokens is seldom shorter than n characters, so
 * a chat long enough to prepare is long enough to remember, and a shorter one is neither.
 */
export function poolOptionsOf(g: GatewayConfig): { segmentCacheBytes: number; inlineMaxBytes: number; maxJsonDepth: number; rememberMinChars: number } {
  const r = g.router;
  return {
    segmentCacheBytes: r.tokenizeSegmentCacheBytes,
    inlineMaxBytes: r.localTokenize ? r.inlineTokenizeMaxBytes : 0,
    maxJsonDepth: g.maxJsonDepth,
    rememberMinChars: r.prepareMinPromptTokens,
  };
}

// The keys gateway.router may hold; routerSection reads each.
const routerKeys = [
  'policy',
  'tokenize_timeout_ms',
  'tokenizer_load_wait_ms',
  'tokenize_cache_entries',
  'local_tokenize',
  'tokenize_verify_first',
  'tokenize_verify_every',
  'tokenize_segment_cache_bytes',
  'inline_tokenize_max_bytes',
  'prepare_min_prompt_tokens',
  'score_timeout_ms',
  'ttft_budget_ms',
  'bounded_load_factor',
  'wait_or_spill',
  'prefill_tokens_per_s',
  'prediction_ttl_ms',
  'approx_max_chunks',
  'approx_chunk_chars',
  'load_poll_interval_ms',
  'offload_tier_weight',
  'pd_skip_prefill_tokens',
  'session_secret',
];

/** gateway.upstream: the engine connections' timeouts, pool size and size bounds. */
function upstreamSection(u: MapReader | undefined, du: UpstreamConfig): UpstreamConfig {
  return {
    headersTimeoutMs: u?.int('headers_timeout_ms', du.headersTimeoutMs, 1) ?? du.headersTimeoutMs,
    idleTimeoutMs: u?.int('idle_timeout_ms', du.idleTimeoutMs, 1) ?? du.idleTimeoutMs,
    connections: u?.int('connections', du.connections, 1, 10_000) ?? du.connections,
    maxMigrations: u?.int('max_migrations', du.maxMigrations, 0, 8) ?? du.maxMigrations,
    maxHeadBytes: u?.int('max_head_bytes', du.maxHeadBytes, 1024, 16 * 1024 * 1024) ?? du.maxHeadBytes,
    maxAnswerBytes: u?.int('max_answer_bytes', du.maxAnswerBytes, 1024) ?? du.maxAnswerBytes,
    maxEventBytes: u?.int('max_event_bytes', du.maxEventBytes, 1024) ?? du.maxEventBytes,
  };
}

/** gateway.router: how replicas are chosen and how prompts are tokenized and scored for it. */
function routerSection(r: MapReader | undefined, dr: RouterConfig): RouterConfig {
  return {
    policy: r?.value('policy', dr.policy, isPolicy, `one of ${routePolicies.join(', ')}`) ?? dr.policy,
    tokenizeTimeoutMs: r?.int('tokenize_timeout_ms', dr.tokenizeTimeoutMs, 1) ?? dr.tokenizeTimeoutMs,
    tokenizerLoadWaitMs: r?.int('tokenizer_load_wait_ms', dr.tokenizerLoadWaitMs, 0) ?? dr.tokenizerLoadWaitMs,
    tokenizeCacheEntries: r?.int('tokenize_cache_entries', dr.tokenizeCacheEntries, 0) ?? dr.tokenizeCacheEntries,
    localTokenize: r?.bool('local_tokenize', dr.localTokenize) ?? dr.localTokenize,
    tokenizeVerifyFirst: r?.int('tokenize_verify_first', dr.tokenizeVerifyFirst, 0) ?? dr.tokenizeVerifyFirst,
    tokenizeVerifyEvery: r?.int('tokenize_verify_every', dr.tokenizeVerifyEvery, 0) ?? dr.tokenizeVerifyEvery,
    tokenizeSegmentCacheBytes: r?.int('tokenize_segment_cache_bytes', dr.tokenizeSegmentCacheBytes, 0) ?? dr.tokenizeSegmentCacheBytes,
    inlineTokenizeMaxBytes: r?.int('inline_tokenize_max_bytes', dr.inlineTokenizeMaxBytes, 0, 1024 * 1024) ?? dr.inlineTokenizeMaxBytes,
    prepareMinPromptTokens: r?.int('prepare_min_prompt_tokens', dr.prepareMinPromptTokens, 0) ?? dr.prepareMinPromptTokens,
    scoreTimeoutMs: r?.int('score_timeout_ms', dr.scoreTimeoutMs, 1) ?? dr.scoreTimeoutMs,
    ttftBudgetMs: r?.int('ttft_budget_ms', dr.ttftBudgetMs, 1) ?? dr.ttftBudgetMs,
    boundedLoadFactor:
      r?.value('bounded_load_factor', dr.boundedLoadFactor, isLoadFactor, '0 (no bound) or a factor from 1 to 100 (1.5 is usual)') ??
      dr.boundedLoadFactor,
    waitOrSpill: r?.bool('wait_or_spill', dr.waitOrSpill) ?? dr.waitOrSpill,
    prefillTokensPerS: r?.int('prefill_tokens_per_s', dr.prefillTokensPerS, 1) ?? dr.prefillTokensPerS,
    predictionTtlMs: r?.int('prediction_ttl_ms', dr.predictionTtlMs, 0) ?? dr.predictionTtlMs,
    approxMaxChunks: r?.int('approx_max_chunks', dr.approxMaxChunks, 0) ?? dr.approxMaxChunks,
    approxChunkChars: r?.int('approx_chunk_chars', dr.approxChunkChars, 16) ?? dr.approxChunkChars,
    loadPollIntervalMs: r?.int('load_poll_interval_ms', dr.loadPollIntervalMs, 0) ?? dr.loadPollIntervalMs,
    offloadTierWeight: r?.value('offload_tier_weight', dr.offloadTierWeight, isFraction, 'a number from 0 to 1') ?? dr.offloadTierWeight,
    pdSkipPrefillTokens: r?.int('pd_skip_prefill_tokens', dr.pdSkipPrefillTokens, 0) ?? dr.pdSkipPrefillTokens,
    sessionSecret: r?.value('session_secret', dr.sessionSecret, isSessionSecret, '"" (unsigned tokens) or a secret of at least 16 characters, the same on every gateway') ?? dr.sessionSecret,
  };
}

/** Parses the `gateway:` section (undefined: all defaults); throws ConfigError naming every problem. */
export function parseGatewayConfig(raw: unknown, source = 'llmgw.yaml'): GatewayConfig {
  const issues: Issues = [];
  const out = parseGatewaySection(raw, 'gateway', issues);
  if (issues.length > 0) throw new ConfigError(source, issues);
  return out;
}

/** The same parse, adding its problems to `issues` (for a loader that reports all sections at once). */
export function parseGatewaySection(raw: unknown, path: string, issues: Issues): GatewayConfig {
  const d = gatewayDefaults;
  const m = readMap(raw, path, issues, [
    'host',
    'port',
    'max_body_bytes',
    'max_json_depth',
    'body_timeout_ms',
    'drain_grace_ms',
    'drain_timeout_ms',
    'trust_request_chat_template',
    'api_keys',
    'upstream',
    'router',
    'adapters',
    'tracing',
    'responses',
    'admission',
    'batch',
  ]);
  if (m === undefined) return d;
  const apiKeys = m.list('api_keys', (k, at) => parseApiKey(k, at, issues));
  const seen = new Set<string>();
  apiKeys.forEach((k, i) => {
    if (k.sha256 !== '' && seen.has(k.sha256)) issues.push({ path: `${m.at('api_keys')}[${i}].sha256`, message: 'the same key is listed twice' });
    seen.add(k.sha256);
  });
  const u = m.map('upstream', ['headers_timeout_ms', 'idle_timeout_ms', 'connections', 'max_migrations', 'max_head_bytes', 'max_answer_bytes', 'max_event_bytes']);
  const r = m.map('router', routerKeys);
  const a = m.map('adapters', ['max_per_replica', 'load_timeout_ms']);
  const da = d.adapters;
  const tr = m.map('tracing', ['otlp_endpoint']);
  const rs = m.map('responses', ['retention_s', 'memory_max_entries', 'memory_max_bytes']);
  const drs = d.responses;
  return deepFreeze({
    host: m.text('host', d.host),
    port: m.int('port', d.port, 0, 65_535),
    maxBodyBytes: m.int('max_body_bytes', d.maxBodyBytes, 1024),
    maxJsonDepth: m.int('max_json_depth', d.maxJsonDepth, 8, 1_000),
    bodyTimeoutMs: m.int('body_timeout_ms', d.bodyTimeoutMs, 100, 600_000),
    drainGraceMs: m.int('drain_grace_ms', d.drainGraceMs, 0, 600_000),
    drainTimeoutMs: m.int('drain_timeout_ms', d.drainTimeoutMs, 0, 3_600_000),
    trustRequestChatTemplate: m.list('trust_request_chat_template', (v, at) => {
      if (typeof v === 'string' && v !== '') return v;
      issues.push({ path: at, message: `${JSON.stringify(v)} is not a model name; list the served model names whose request chat templates are trusted` });
      return undefined;
    }),
    apiKeys,
    upstream: upstreamSection(u, d.upstream),
    router: routerSection(r, d.router),
    adapters: {
      maxPerReplica: a?.int('max_per_replica', da.maxPerReplica, 1, 1000) ?? da.maxPerReplica,
      loadTimeoutMs: a?.int('load_timeout_ms', da.loadTimeoutMs, 1) ?? da.loadTimeoutMs,
    },
    admission: parseAdmissionSection(m.map('admission', admissionKeys), issues),
    batch: parseBatchSection(m.map('batch', batchKeys), issues),
    tracing: {
      otlpEndpoint:
        tr?.value('otlp_endpoint', d.tracing.otlpEndpoint, isHttpUrl, 'an OTLP/HTTP traces URL such as http://127.0.0.1:4318/v1/traces') ??
        d.tracing.otlpEndpoint,
    },
    responses: {
      retentionS: rs?.int('retention_s', drs.retentionS, 1) ?? drs.retentionS,
      memoryMaxEntries: rs?.int('memory_max_entries', drs.memoryMaxEntries, 1) ?? drs.memoryMaxEntries,
      memoryMaxBytes: rs?.int('memory_max_bytes', drs.memoryMaxBytes, 1024) ?? drs.memoryMaxBytes,
    },
  });
}
