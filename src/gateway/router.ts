// Routing: which ready replica gets a request. Facts are gathered first (token ids from /tokenize,
// leading blocks held per replica from the shared index through a worker, prefix chunks from the
// approximate tree), then tiers, each `(facts, candidates) => Choice | undefined`, are tried in
// order. Nothing here fails a request: a fact that cannot be had in time is simply absent, and the
// load tier always answers.
import { LlmgwError } from '../errors/index.js';
import type { AdapterAccess, AdapterLease, AdapterReplica } from './adapters.js';
import type { RouterConfig } from './config.js';
import { anyRank } from './index-writer.js';
import type { IndexWriter, ReplicaSlots } from './index-writer.js';
import type { PrefixTree } from './prefix-tree.js';
import type { GenerationRequest } from './request.js';
import type { Tokenizer } from './tokens.js';

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
}

/** The replicas the gateway may route to, as the agent sees them. */
export interface ReplicaDirectory {
  /** Ready replicas serving `model` (a served model name or one of their adapters). */
  ready(model: string): readonly ReplicaView[];
  /** Every model name the cluster is configured to serve, ready or not (for 404 versus 503). */
  models(): readonly string[];
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
  score(
    task: { tokens: Uint32Array; hash: ScoreHashOptions; slots: number[] },
    o: { timeoutMs: number },
  ): Promise<{ ok: true; keys: readonly bigint[]; leading: readonly number[] } | { ok: false; reason: string }>;
}

/** The tier that decided a request, as shown in x-llmgw-route and llmgw_prefix_decisions_total. */
export type Tier = 'precise' | 'approximate' | 'load';

/** A replica as the tiers see it: the view plus the load the gateway measures. */
export interface Candidate {
  readonly view: ReplicaView;
  readonly inFlight: number;
  /** Prompt tokens routed to it that it has not started answering and did not hold cached. */
  readonly queuedPrefillTokens: number;
  /** Requests waiting in the engine's own queue, from its /metrics. */
  readonly engineWaiting: number;
  readonly prefillTokensPerS: number;
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
}

/** A routing decision. */
export interface Choice {
  readonly replica: ReplicaView;
  readonly tier: Tier;
  /** The cached tokens the decision expected on that replica (compared later with the engine's usage). */
  readonly predictedCachedTokens: number;
}

/** One routing policy step. */
export type RouteTier = (facts: RouteFacts, candidates: readonly Candidate[]) => Choice | undefined;

const minAffinityCap = 2;

// Estimated time to first token on a candidate if it also took this request, in ms.
const estimateMs = (c: Candidate, uncachedTokens: number): number =>
  ((c.queuedPrefillTokens + uncachedTokens) * 1000) / c.prefillTokensPerS;

// The affinity rule both cache tiers share. Each replica is scored by its estimated time to first
// token for this request, less the prefill its cache saves the cluster (the hit would otherwise be
// computed again somewhere); the best score wins if it is a replica holding part of the prompt. So
// a sibling sent while its prefix is still being computed joins it (burst co-location), and a
// holder whose queue outweighs its hit loses to an idle replica. Stickiness breaks at saturation:
// a replica whose queued uncached prefill takes longer than the TTFT budget to clear is not chosen
// for its cache, so one hot system prompt cannot pile every request on one replica.
function affinity(tier: Tier, cached: ReadonlyMap<string, number>, f: RouteFacts, cs: readonly Candidate[]): Choice | undefined {
  let best: { c: Candidate; score: number; hit: number } | undefined;
  const total = cs.reduce((n, c) => n + c.inFlight, 0);
  // Consistent hashing with bounded loads: a replica already carrying well over its share of the
  // requests in flight takes no more for its cache, however cheap their prefill, because its batch
  // (and so every stream on it) slows while the others idle. The floor of 2 keeps one request in
  // flight from breaking a conversation's affinity on a quiet cluster.
  const cap = f.boundedLoadFactor > 0 ? Math.max(minAffinityCap, Math.ceil((f.boundedLoadFactor * (total + 1)) / cs.length)) : Infinity;
  for (const c of cs) {
    const hit = Math.min(cached.get(c.view.id) ?? 0, f.promptTokens);
    const est = estimateMs(c, f.promptTokens - hit);
    // The queue already there, not this request: a long prompt alone still goes where its prefix is.
    const saturated = estimateMs(c, 0) > f.ttftBudgetMs || c.inFlight >= cap;
    const score = est - (saturated ? 0 : (hit * 1000) / c.prefillTokensPerS);
    const better = best === undefined || score < best.score || (score === best.score && hit > best.hit);
    if (better) best = { c, score, hit: saturated ? 0 : hit };
  }
  if (best === undefined || best.hit <= 0) return undefined;
  return { replica: best.c.view, tier, predictedCachedTokens: best.hit };
}

/**
 * Tier 1, for a request naming an adapter loaded on demand: a replica holding it (or already loading
 * it, so a burst joins one load), by its cached prefix (the adapter's name is in every block key),
 * else by load. Unless every holder's queued prefill is over the TTFT budget: then the later tiers
 * choose among all replicas and the adapter is loaded on one more, so a hot adapter spreads. Requests
 * in flight alone do not spread it, as the bounded-load rule spreads a prefix: a load costs the first
 * request on a new replica hundreds of milliseconds or more, far more than sharing a batch.
 */
export const residentTier: RouteTier = (f, cs) => {
  const resident = f.resident;
  if (resident === undefined) return undefined;
  const holders = cs.filter((c) => resident.has(c.view.id) && estimateMs(c, 0) <= f.ttftBudgetMs);
  if (holders.length === 0) return undefined;
  return (f.precise === undefined ? undefined : affinity('precise', f.precise, f, holders)) ?? loadTier(f, holders);
};

/** Tier 2: the replica holding the longest useful prefix, by the engines' own KV events. */
export const preciseTier: RouteTier = (f, cs) => (f.precise === undefined ? undefined : affinity('precise', f.precise, f, cs));

/** Tier 3: the same rule over what was recently routed where. */
export const approximateTier: RouteTier = (f, cs) =>
  f.approximate === undefined ? undefined : affinity('approximate', f.approximate, f, cs);

/** Tier 4: fewest in flight, then the engine's own queue, then the least queued prefill; ties take turns. */
export const loadTier: RouteTier = (f, cs) => {
  const order = (a: Candidate, b: Candidate): number =>
    a.inFlight - b.inFlight || a.engineWaiting - b.engineWaiting || a.queuedPrefillTokens - b.queuedPrefillTokens;
  const sorted = [...cs].sort(order);
  const first = sorted[0];
  if (first === undefined) return undefined;
  const tied = sorted.filter((c) => order(c, first) === 0);
  const pick = tied[f.turn % tied.length] ?? first;
  return { replica: pick.view, tier: 'load', predictedCachedTokens: f.precise?.get(pick.view.id) ?? 0 };
};

/** The default order of the tiers. */
export const defaultTiers: readonly RouteTier[] = [residentTier, preciseTier, approximateTier, loadTier];

interface Load {
  inFlight: number;
  queuedPrefillTokens: number;
  engineWaiting: number;
}

/** In-flight requests and queued prefill per replica, as this gateway sent them. */
export class LoadBook {
  readonly #byId = new Map<string, Load>();

  #of(id: string): Load {
    let l = this.#byId.get(id);
    if (l === undefined) {
      l = { inFlight: 0, queuedPrefillTokens: 0, engineWaiting: 0 };
      this.#byId.set(id, l);
    }
    return l;
  }

  /** Snapshot of a replica's load. */
  get(id: string): Readonly<Load> {
    return this.#byId.get(id) ?? { inFlight: 0, queuedPrefillTokens: 0, engineWaiting: 0 };
  }

  /** Ids with a load entry. */
  ids(): IterableIterator<string> {
    return this.#byId.keys();
  }

  /** What the engine's /metrics said of its queue. */
  setEngineWaiting(id: string, waiting: number): void {
    this.#of(id).engineWaiting = waiting;
  }

  /** A request starts on `id`; `firstByte` takes its prefill off the queue, `done` ends it. Both are idempotent. */
  start(id: string, uncachedTokens: number): { firstByte(): void; done(): void } {
    const l = this.#of(id);
    l.inFlight++;
    l.queuedPrefillTokens += uncachedTokens;
    let queued = true;
    let running = true;
    const firstByte = (): void => {
      if (!queued) return;
      queued = false;
      l.queuedPrefillTokens -= uncachedTokens;
    };
    return {
      firstByte,
      done: () => {
        firstByte();
        if (!running) return;
        running = false;
        l.inFlight--;
      },
    };
  }
}

/** Timing and outcome of gathering facts, for metrics. */
export interface RouteTrace {
  tokenizeMs?: number;
  tokenize?: 'ok' | 'cached' | string;
  score?: 'ok' | string;
}

/** Where on-demand adapters are held, and the hold a routed request takes (AdapterResidency satisfies it). */
export interface AdapterHolders {
  holders(adapter: string, replicas: readonly AdapterReplica[]): ReadonlySet<string> | undefined;
  acquire(replica: AdapterReplica, adapter: string): AdapterLease;
}

/** Everything routing needs, wired by the gateway. */
export interface RouterParts {
  readonly config: RouterConfig;
  readonly tokenizer: Pick<Tokenizer, 'tokens'>;
  readonly scorer: Scorer | undefined;
  readonly writer: IndexWriter | undefined;
  readonly tree: PrefixTree;
  readonly load: LoadBook;
  readonly tiers?: readonly RouteTier[];
  readonly adapters?: AdapterHolders | undefined;
}

/** A decision and what committing it needs. */
export interface Routed extends Choice {
  readonly promptTokens: number;
  readonly trace: RouteTrace;
  /** The chosen replica's ticket; `done` also ends the request's hold on its adapter. */
  readonly ticket: { firstByte(): void; done(): void };
  /** The request's hold on its on-demand adapter; send once `ready` settles. */
  readonly adapter: AdapterLease | undefined;
}

// vLLM always computes at least the last prompt token, so a prompt whose every full block is cached
// still prefills its last block: the usable hit is capped at the last block boundary before the end.
const usableBlocks = (blocks: number, promptTokens: number, blockSize: number): number =>
  Math.min(blocks, Math.floor(Math.max(0, promptTokens - 1) / blockSize));

/** The routing policy with its facts: one instance per gateway. */
export class Router {
  readonly #p: RouterParts;
  readonly #tiers: readonly RouteTier[];
  #turn = 0;

  constructor(p: RouterParts) {
    this.#p = p;
    this.#tiers = p.tiers ?? defaultTiers;
  }

  #candidates(replicas: readonly ReplicaView[]): Candidate[] {
    return replicas.map((view) => {
      const l = this.#p.load.get(view.id);
      return { view, ...l, prefillTokensPerS: view.prefillTokensPerS ?? this.#p.config.prefillTokensPerS };
    });
  }

  /** Chooses a replica among `replicas` (non-empty) and books the request on it. Never throws for routing reasons. */
  async route(req: GenerationRequest, replicas: readonly ReplicaView[], signal?: AbortSignal): Promise<Routed> {
    const trace: RouteTrace = {};
    const turn = this.#turn++;
    const withEvents = replicas.filter((r) => r.kvEvents);
    // Token ids the client sent need no tokenizer: the engine hashes exactly these.
    let tokens: Uint32Array | undefined = req.promptTokenIds === undefined ? undefined : Uint32Array.from(req.promptTokenIds);
    if (tokens === undefined && withEvents.length > 0 && this.#p.scorer !== undefined && this.#p.writer !== undefined) {
      const target = this.#candidates(withEvents).sort((a, b) => a.inFlight - b.inFlight)[0]?.view ?? withEvents[0];
      if (target !== undefined) {
        const t0 = performance.now();
        const t = await this.#p.tokenizer.tokens(req, target, signal);
        trace.tokenizeMs = performance.now() - t0;
        trace.tokenize = t.ok ? (t.cached ? 'cached' : 'ok') : t.reason;
        if (t.ok) tokens = t.tokens;
      }
    }
    const promptTokens = tokens?.length ?? estimateTokens(req);
    let precise: Map<string, number> | undefined;
    let keysByReplica = new Map<string, readonly bigint[]>();
    if (tokens !== undefined) {
      const scored = await this.#score(req, tokens, withEvents, trace);
      if (scored !== undefined) ({ cached: precise, keys: keysByReplica } = scored);
    }
    // The tree serves replicas the index cannot speak for; with tokens for all, it is not consulted.
    const needTree = precise === undefined || precise.size < replicas.length;
    const adapter = adapterOf(req, replicas);
    // An adapter's blocks are not the base model's: the tree keeps them apart as the block keys do.
    const text = needTree ? withAdapter(adapter, promptText(req)) : undefined;
    const chunks = text === undefined ? [] : this.#p.tree.chunkNames(text);
    let approximate: Map<string, number> | undefined;
    if (chunks.length > 0) {
      const blind = replicas.filter((r) => precise?.has(r.id) !== true);
      const perChunk = this.#p.config.approxChunkChars / 4;
      const lead = this.#p.tree.leading(chunks, blind);
      approximate = new Map([...lead].map(([id, n]) => [id, Math.floor(n * perChunk)]));
    }
    const facts: RouteFacts = {
      promptTokens,
      precise,
      approximate,
      ttftBudgetMs: this.#p.config.ttftBudgetMs,
      boundedLoadFactor: this.#p.config.boundedLoadFactor,
      turn,
      // Read here, after the awaits above and in the same turn as the commit below, so a request
      // routed while another's load starts sees that load.
      resident: adapter === undefined ? undefined : this.#p.adapters?.holders(adapter, replicas),
    };
    const candidates = this.#candidates(replicas);
    let choice: Choice | undefined;
    for (const tier of this.#tiers) {
      choice = tier(facts, candidates);
      if (choice !== undefined) break;
    }
    // A custom tier list without the load tier still gets an answer.
    choice ??= loadTier(facts, candidates);
    if (choice === undefined) {
      throw new LlmgwError('LLMGW_NO_REPLICA', `model "${req.model}": no ready replica to route to; see the agent's log for why`);
    }
    const chosen = choice.replica;
    const keys = keysByReplica.get(chosen.id);
    if (keys !== undefined && this.#p.writer !== undefined) this.#p.writer.predict(chosen.id, keys);
    if (chunks.length > 0) this.#p.tree.insert(chunks, chosen);
    const booked = this.#p.load.start(chosen.id, Math.max(0, promptTokens - choice.predictedCachedTokens));
    const lease = adapter === undefined ? undefined : this.#p.adapters?.acquire(chosen, adapter);
    const ticket =
      lease === undefined
        ? booked
        : {
            firstByte: booked.firstByte,
            done: () => {
              booked.done();
              lease.release();
            },
          };
    return { ...choice, promptTokens, trace, ticket, adapter: lease };
  }

  // Scores each group of replicas sharing hash parameters in the worker pool; undefined when the pool
  // could not answer in time (the approximate tier takes over).
  async #score(
    req: GenerationRequest,
    tokens: Uint32Array,
    replicas: readonly ReplicaView[],
    trace: RouteTrace,
  ): Promise<{ cached: Map<string, number>; keys: Map<string, readonly bigint[]> } | undefined> {
    const scorer = this.#p.scorer;
    const writer = this.#p.writer;
    if (scorer === undefined || writer === undefined) return undefined;
    const groups = new Map<string, ReplicaView[]>();
    for (const r of replicas) {
      const lora = req.model !== r.model && r.adapters.includes(req.model) ? req.model : '';
      const g = `${r.blockSizeTokens}\0${r.hashSeed}\0${lora}`;
      groups.set(g, [...(groups.get(g) ?? []), r]);
    }
    const cached = new Map<string, number>();
    const keys = new Map<string, readonly bigint[]>();
    for (const group of groups.values()) {
      const first = group[0];
      if (first === undefined) continue;
      const layout: { r: ReplicaView; s: ReplicaSlots | undefined }[] = group.map((r) => ({ r, s: writer.slotsOf(r.id) }));
      const slots = layout.flatMap(({ s }) => (s === undefined ? [] : [s.predicted, ...s.held.map((h) => h.slot)]));
      const hash: ScoreHashOptions = { blockSizeTokens: first.blockSizeTokens, seed: first.hashSeed, algo: 'sha256_cbor' };
      if (req.model !== first.model && first.adapters.includes(req.model)) hash.loraName = req.model;
      if (req.cacheSalt !== undefined) hash.cacheSalt = req.cacheSalt;
      // A copy: the cached ids stay usable after the worker takes this buffer.
      const res = await boundedScore(scorer, { tokens: tokens.slice(), hash, slots }, this.#p.config.scoreTimeoutMs);
      if (!res.ok) {
        trace.score = res.reason;
        return undefined;
      }
      trace.score = 'ok';
      const leadOf = new Map(slots.map((slot, i) => [slot, res.leading[i] ?? 0]));
      for (const { r, s } of layout) {
        const blocks = s === undefined ? 0 : effectiveBlocks(s, leadOf, r.dataParallelSize, this.#p.config.offloadTierWeight);
        cached.set(r.id, usableBlocks(blocks, tokens.length, r.blockSizeTokens) * r.blockSizeTokens);
        keys.set(r.id, res.keys);
      }
    }
    return { cached, keys };
  }
}

// Blocks a replica holds for this prompt, scored as what they are: a data-parallel replica's ranks
// each have their own cache and the engine's own balancer picks the rank, so a prefix known to be on
// one rank of N is worth 1/N of itself and one on every rank counts whole (the agent's stream
// reports each rank's blocks apart); one reported merged over the ranks (no rank) is counted at the
// 1/N lower bound; blocks only in an offload tier (CPU, storage) must be loaded
// back, so they count at `offloadWeight`; a prediction (routed here, not yet reported) counts whole.
export function effectiveBlocks(
  s: ReplicaSlots,
  leadOf: ReadonlyMap<number, number>,
  dataParallelSize: number,
  offloadWeight: number,
): number {
  const ranks = Math.max(1, dataParallelSize);
  const tierValue = (rank: number): number => {
    let device = 0;
    let offload = 0;
    for (const h of s.held) {
      if (h.rank !== rank) continue;
      const n = leadOf.get(h.slot) ?? 0;
      if (h.offload) offload = Math.max(offload, n);
      else device = Math.max(device, n);
    }
    return device + offloadWeight * Math.max(0, offload - device);
  };
  let perRank = 0;
  for (let rank = 0; rank < ranks; rank++) perRank += tierValue(rank);
  const merged = tierValue(anyRank);
  return Math.max(perRank / ranks, merged / ranks, leadOf.get(s.predicted) ?? 0);
}

async function boundedScore(
  scorer: Scorer,
  task: Parameters<Scorer['score']>[0],
  timeoutMs: number,
): ReturnType<Scorer['score']> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<{ ok: false; reason: string }>((resolve) => {
    timer = setTimeout(() => resolve({ ok: false, reason: 'timeout' }), timeoutMs);
  });
  try {
    // A result that arrives after the deadline is ignored, not aborted: aborting a running Piscina
    // task stops its thread.
    return await Promise.race([
      scorer.score(task, { timeoutMs }).catch((e: unknown) => ({ ok: false as const, reason: e instanceof Error ? e.message : 'error' })),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

// The adapter a request names, when it is one of the replicas' and not their base model.
function adapterOf(req: GenerationRequest, replicas: readonly ReplicaView[]): string | undefined {
  return replicas.some((r) => req.model !== r.model && r.adapters.includes(req.model)) ? req.model : undefined;
}

function withAdapter(adapter: string | undefined, text: string | undefined): string | undefined {
  return adapter === undefined || text === undefined ? text : `${adapter}\u0002${text}`;
}

/** The text the approximate tree chunks: roles and contents in order, as the template would see them. */
export function promptText(req: GenerationRequest): string | undefined {
  if (req.prompt !== undefined) return req.prompt;
  if (req.messages === undefined) return undefined;
  let s = '';
  for (const m of req.messages) {
    const { role, content } = m as { role?: unknown; content?: unknown };
    s += `${String(role)}\u0000${typeof content === 'string' ? content : JSON.stringify(content ?? null)}\u0001`;
  }
  return s;
}

// About four characters a token in English text: only used when the engine's count is unknown.
function estimateTokens(req: GenerationRequest): number {
  return Math.ceil((promptText(req)?.length ?? 0) / 4);
}
