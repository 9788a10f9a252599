// The facts routing works from, as types: what the gateway knows of a replica, the interfaces that
// supply tokens and scores, and what the pure tiers read (RouteFacts, Candidate) and return (Choice).
// The router declares these and depends on nothing else; the agent's replica records, the worker
// pool and the index writer satisfy them structurally.
import type { BlockKeyArray, ReplicaSlots } from '../kv/index.js';
import type { GenerationRequest } from '../limits/index.js';
import type { AdapterAccess } from '../upstream/index.js';

/** What the gateway knows of a replica; the agent's replica records satisfy it structurally. */
export interface ReplicaView {
  readonly id: string;
  /** The node that runs it: only that node's index deltas are accepted for it. */
  readonly node: string;
  /** The served model name. */
  readonly model: string;
  /** LoRA adapters it serves; a request naming one hashes with it as vLLM's extra key. */
  readonly adapters: readonly string[];
  /** Base URL of its OpenAI server, e.g. http://127.0.0.1:8100/. */
  readonly url: URL;
  /** The key the engine demands (VLLM_API_KEY); sent upstream, never shown to clients. */
  readonly apiKey: string | undefined;
  /** Changes whenever the replica (re)starts, so the approximate tree forgets what it held. */
  readonly generation: number;
  /** It publishes KV events, so the shared index knows its blocks. */
  readonly kvEvents: boolean;
  readonly blockSizeTokens: number;
  /** PYTHONHASHSEED of the engine, the root of every block hash. */
  readonly hashSeed: string;
  readonly dataParallelSize: number;
  /** Its prefill speed when known (else gateway.router.prefill_tokens_per_s). */
  readonly prefillTokensPerS?: number | undefined;
  /** How its engine serves its adapters (loads them, names them in a request); absent: by name, always held. */
  readonly adapterAccess?: AdapterAccess | undefined;
  /** Its tokenizer for routing without /tokenize: 'bytes', 'qwen3', a model directory or a llama.cpp .gguf; absent: /tokenize only. */
  readonly tokenizer?: string | undefined;
  /** Whose /tokenize its engine serves; absent: vLLM's. */
  readonly tokenizeApi?: TokenizeApi | undefined;
  /** Its engine schedules by a request's `priority` (vLLM --scheduling-policy priority, the sim); absent: it does not. */
  readonly schedulesByPriority?: boolean | undefined;
  /** Its part in prefill/decode disaggregation (engines' Disagg satisfies it); absent: whole requests only. */
  readonly disagg?: DisaggView | undefined;
  /** It serves /v1/embeddings (an embedding model in its engine's pooling mode); absent: it generates. */
  readonly embeds?: boolean | undefined;
}

/** A replica's part in prefill/decode disaggregation, and how its KV cache moves (NIXL, or SGLang's bootstrap on `bootstrapPort`). */
export interface DisaggView {
  readonly role: 'prefill' | 'decode' | 'both';
  readonly protocol: 'nixl' | 'sglang';
  readonly bootstrapPort: number;
}

/** The replicas the gateway may route to, as the agent sees them. */
export interface ReplicaDirectory {
  /** Ready replicas serving `model` (a served model name or one of their adapters). */
  ready(model: string): readonly ReplicaView[];
  /** Every model name the cluster is configured to serve, ready or not (for 404 versus 503). */
  models(): readonly string[];
  /** Calls `listener` when replicas become ready or leave; returns the unsubscribe. */
  onChange?(listener: () => void): () => void;
}

/** vLLM's hash parameters for one scoring task (kv's HashOptions satisfies it). */
export interface ScoreHashOptions {
  blockSizeTokens: number;
  seed: string;
  algo?: 'sha256_cbor';
  loraName?: string;
  cacheSalt?: string;
}

/** Hashes token blocks in a worker and counts each slot's leading blocks (workers' HashPool satisfies it). */
export interface Scorer {
  score(task: { tokens: Uint32Array; hash: ScoreHashOptions; slots: readonly number[] }): Promise<({ ok: true } & GroupScore) | { ok: false; reason: string }>;
}

/**
 * The /tokenize request formats: vLLM's renders a chat itself (the sim and SGLang speak it too);
 * llama-server's takes only text, so a chat is rendered by its /apply-template first.
 */
export type TokenizeApi = 'vllm' | 'llamacpp';

/** The replica a prompt is tokenized for: where its /tokenize is, in which format, and its tokenizer for local encoding. */
export interface TokenTarget {
  readonly url: URL;
  readonly apiKey?: string | undefined;
  /** Whose /tokenize it serves; absent: vLLM's. */
  readonly tokenizeApi?: TokenizeApi | undefined;
  /** Its tokenizer: 'bytes', 'qwen3', a model directory or a .gguf; absent: only its /tokenize knows. */
  readonly tokenizer?: string | undefined;
}

/** One group of replicas sharing hash parameters: what to hash the prompt with, and which index slots to count. */
export interface ScoreRequest {
  readonly hash: ScoreHashOptions;
  readonly slots: readonly number[];
}

/** A group's score: the prompt's block keys and, per slot, how many leading blocks it holds. */
export interface GroupScore {
  readonly keys: BlockKeyArray;
  readonly leading: readonly number[];
  /** Keys looked up in the index to count them, when the scorer says. */
  readonly lookups?: number | undefined;
}

/**
 * A prompt's token ids, or why there are none. `owned`: the caller may move the buffer. `scored`:
 * the score groups asked for, answered in the same trip (a source that tokenizes in the pool hashes
 * there too), in the order asked. A source asked for no ids (`ids: false`) that scored every group
 * may answer their count alone.
 */
export type TokenFact =
  | { ok: true; tokens: Uint32Array; via: 'client' | 'local' | 'engine' | 'cached'; owned: boolean; scored?: readonly GroupScore[] | undefined }
  | { ok: true; tokens: undefined; count: number; via: 'local'; owned: false; scored: readonly GroupScore[] }
  | { ok: false; reason: string };

/**
 * How a token source is asked: the router's signal ends the wait; `score` may be answered with the
 * ids; `ids: false`, the caller needs only how many there are once the groups are scored (moving a
 * 100k-token prompt's ids to the event loop for their length cost it memory to collect each turn).
 */
export interface TokenAsk {
  readonly signal: AbortSignal;
  readonly body?: Uint8Array | undefined;
  readonly score?: readonly ScoreRequest[] | undefined;
  readonly ids?: boolean | undefined;
  /** The ids only count the prompt (no replica hashes them): not worth an engine's round trip. */
  readonly countOnly?: boolean | undefined;
}

/** A prompt's ids as routing holds them: how many, and the ids themselves unless only scores were needed. */
export interface PromptIds {
  readonly count: number;
  readonly tokens: Uint32Array | undefined;
  readonly owned: boolean;
  readonly scored?: readonly GroupScore[] | undefined;
}

/** Where token ids come from (gateway/tokens.ts's sources satisfy it). */
export interface TokenSource {
  tokens(req: GenerationRequest, target: TokenTarget, o: TokenAsk): Promise<TokenFact>;
}

/** Where a model's local tokenizer stands in its load (tokens.ts's VerifiedTokens satisfies it). */
export interface TokenizerLoads {
  /** Settles when the model's tokenizer has loaded or failed to; undefined when it is not loading. */
  loading(model: string): Promise<void> | undefined;
}

/** An engine's answer to a chat request: its SSE events as streamed, or its JSON body. */
export interface Answer {
  readonly format: 'sse' | 'json';
  readonly text: string;
}

/** Gets a chat's next turn ready from its answer (gateway/tokens.ts's VerifiedTokens satisfies it). */
export interface TurnPreparer {
  prepare(req: GenerationRequest, target: TokenTarget, o: { body: Uint8Array; answer: Answer; hashes: readonly ScoreHashOptions[] }): Promise<void>;
}

/** What routing reads and writes of the index writer (IndexWriter satisfies it). */
export interface SlotView {
  slotsOf(replicaId: string): ReplicaSlots | undefined;
  /** Predicts `keys` from index `from` on (the index already has the ones before). */
  predict(replicaId: string, keys: BlockKeyArray, from?: number): void;
}

/**
 * The tier that decided a request (`session`: the replica the client's session token or X-Session-ID named), as shown in x-llmgw-route, the receipt and the metrics' labels;
 * `adapter`: the replicas holding the on-demand adapter the request names were the only choice.
 */
export type Tier = 'adapter' | 'precise' | 'session' | 'approximate' | 'load';

/** A replica as the tiers see it: the view plus the load the gateway measures. */
export interface Candidate {
  readonly view: ReplicaView;
  readonly inFlight: number;
  /** Of those, the requests that have not started answering: the queue bounded load counts (absent: all in flight). */
  readonly waiting?: number;
  /** Prompt tokens routed to it that it has not started answering and did not hold cached. */
  readonly queuedPrefillTokens: number;
  /** Requests waiting in the engine's own queue, from its /metrics. */
  readonly engineWaiting: number;
  /** The engine's sequence slots as seen when it was full (its /metrics); absent or 0: not known. */
  readonly engineSlots?: number;
  readonly prefillTokensPerS: number;
  /** Blocks its GPU cache holds by the index (cache-room.ts); absent: not known. */
  readonly cachedBlocks?: number | undefined;
}

/** What routing learned about one request before choosing. */
export interface RouteFacts {
  readonly promptTokens: number;
  /** Cached tokens per replica id, from the shared index; absent: not known precisely. */
  readonly precise: ReadonlyMap<string, number> | undefined;
  /** Estimated cached tokens per replica id, from the approximate tree. */
  readonly approximate: ReadonlyMap<string, number> | undefined;
  readonly ttftBudgetMs: number;
  /** Bounded load: no affinity above this factor times the average in flight (0: none). */
  readonly boundedLoadFactor: number;
  /** Rotates ties in the load tier, so equal replicas take turns. */
  readonly turn: number;
  /** Replica ids holding (or loading) the on-demand adapter the request names; absent: it names none. */
  readonly resident?: ReadonlySet<string> | undefined;
  /** A busy cache holder is waited for when that is faster than spilling (gateway.router.wait_or_spill); absent: never. */
  readonly waitOrSpill?: boolean | undefined;
  /** How much longer the request may wait for its first token (its deadline less its admission wait); absent: unbounded. */
  readonly deadlineMs?: number | undefined;
  /** The replica the request's session points at (routing/session.ts); absent: it names no session. */
  readonly session?: SessionPoint | undefined;
}

/** The replica a session points at, and what named it: a token a gateway issued, or the hashed X-Session-ID. */
export interface SessionPoint {
  readonly replicaId: string;
  readonly via: 'token' | 'session-id';
}

/** Wait for a busy cache holder, or spill to another replica: the two estimated times to first token and the one chosen. */
export interface WaitOrSpill {
  readonly chose: 'holder' | 'spill';
  /** The busy holder, and its queue plus prefilling the uncached remainder there. */
  readonly holder: string;
  readonly holderMs: number;
  /** The best other replica, and its queue plus prefilling what it does not hold (the whole prompt when cold). */
  readonly spillTo: string;
  readonly spillMs: number;
  /** The holder's wait was past the request's deadline, so it was not waited for however short the spill. */
  readonly pastDeadline: boolean;
}

/** A routing decision. */
export interface Choice {
  readonly replica: ReplicaView;
  readonly tier: Tier;
  /** The cached tokens the decision expected on that replica (compared later with the engine's usage). */
  readonly predictedCachedTokens: number;
  /** Present when a busy holder was weighed against a spill. */
  readonly waitOrSpill?: WaitOrSpill | undefined;
}

/** One routing policy step. */
export type RouteTier = (facts: RouteFacts, candidates: readonly Candidate[]) => Choice | undefined;
