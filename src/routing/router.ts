// Routing: which ready replica gets a request, as one pipeline of separate steps.
//   facts   tokens (TokenSource: local tokenizer in the pool, verified; or /tokenize), scores
//           (Scorer: the worker hashes the blocks and probes the shared index), the approximate
//           tree's estimate, and the load the gateway measures;
//   tiers   pure functions `(facts, candidates) => Choice | undefined`, tried in order;
//   commit  the prediction in the index, the tree, the load ticket.
// The router depends only on interfaces it declares here, and owns every wait in them: each fact
// gets one deadline (one timer, cleared on settle) and a fact that cannot be had in time is simply
// absent. Nothing here fails a request: the load tier always answers.
import { LlmgwError } from '../errors/index.js';
import { anyRank, type BlockKeyArray, type ReplicaSlots } from '../kv/index.js';
import type { GenerationRequest } from '../limits/index.js';
import type { AdapterLease, AdapterReplica } from '../upstream/index.js';
import type { RouterConfig } from './config.js';
import type { CostModel } from './cost-model.js';
import type { Answer, Candidate, Choice, PromptIds, ReplicaView, RouteFacts, RouteTier, Scorer, ScoreHashOptions, ScoreRequest } from './facts.js';
import type { SessionPoint, SlotView, TokenFact, TokenizeApi, TokenSource, TokenTarget, TokenizerLoads, TurnPreparer } from './facts.js';
import type { PrefixTree } from './prefix-tree.js';
import { receiptOf, type RouteReceipt } from './receipt.js';
import { defaultTiers } from './policy.js';
import { loadTier, preciseTier } from './tiers.js';

interface Load {
  inFlight: number;
  waiting: number;
  queuedPrefillTokens: number;
  engineWaiting: number;
  /** The most requests the engine was seen running while others waited in its queue: its slots (0: not seen full yet). */
  engineSlots: number;
}

/** In-flight requests and queued prefill per replica, as this gateway sent them. */
export class LoadBook {
  readonly #byId = new Map<string, Load>();

  #of(id: string): Load {
    let l = this.#byId.get(id);
    if (l === undefined) {
      l = { inFlight: 0, waiting: 0, queuedPrefillTokens: 0, engineWaiting: 0, engineSlots: 0 };
      this.#byId.set(id, l);
    }
    return l;
  }

  /** Snapshot of a replica's load. */
  get(id: string): Readonly<Load> {
    return this.#byId.get(id) ?? { inFlight: 0, waiting: 0, queuedPrefillTokens: 0, engineWaiting: 0, engineSlots: 0 };
  }

  /** Ids with a load entry. */
  ids(): IterableIterator<string> {
    return this.#byId.keys();
  }

  /**
   * What the engine's /metrics said of its queue and of the requests it runs. An engine that queues
   * requests while running `running` is full at that many: the gateway cannot read vLLM's
   * --max-num-seqs or llama.cpp's --parallel, but a full engine shows them. The largest seen is
   * kept: an engine short of KV blocks runs fewer for a while, and its slots are still there after.
   */
  setEngineQueue(id: string, waiting: number, running?: number): void {
    const l = this.#of(id);
    l.engineWaiting = waiting;
    if (waiting > 0 && running !== undefined && running > l.engineSlots) l.engineSlots = running;
  }

  /** A request starts on `id`; `firstByte` takes its prefill off the queue, `done` ends it. Both are idempotent. */
  start(id: string, uncachedTokens: number): { firstByte(): void; done(): void } {
    const l = this.#of(id);
    l.inFlight++;
    l.waiting++;
    l.queuedPrefillTokens += uncachedTokens;
    let queued = true;
    let running = true;
    const firstByte = (): void => {
      if (!queued) return;
      queued = false;
      l.waiting--;
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
  /** Where the ids came from ('local', 'engine', 'cached', 'client') or why there are none. */
  tokenize?: string;
  score?: 'ok' | string;
  /** Time scoring waited for the pool; none when the token source scored in the same trip (tokenizeMs holds it). */
  scoreMs?: number;
  /** Block keys looked up in the index for the scores, when the scorer said. */
  indexLookups?: number;
}

/** Where on-demand adapters are held, and the hold a routed request takes (AdapterResidency satisfies it). */
export interface AdapterHolders {
  holders(adapter: string, replicas: readonly AdapterReplica[]): ReadonlySet<string> | undefined;
  acquire(replica: AdapterReplica, adapter: string): AdapterLease;
}

/** Everything routing needs, wired by the gateway. */
export interface RouterParts {
  readonly config: RouterConfig;
  readonly tokens: TokenSource;
  /** Makes an answered chat's next turn ready; absent: each turn is tokenized from nothing. */
  readonly preparer?: TurnPreparer | undefined;
  /** Whose tokenizer is still loading; absent: routing never waits for one. */
  readonly loads?: TokenizerLoads | undefined;
  readonly scorer: Scorer | undefined;
  readonly slots: SlotView | undefined;
  readonly tree: PrefixTree;
  readonly load: LoadBook;
  readonly tiers?: readonly RouteTier[];
  /** Each replica's learned prefill rate; without it every replica runs at its stated or configured rate. */
  readonly costs?: CostModel | undefined;
  /** Blocks a replica with KV events holds by the index (cache-room.ts); absent: the load tier's ties only take turns. */
  readonly cachedBlocks?: ((replicaId: string) => number | undefined) | undefined;
  readonly adapters?: AdapterHolders | undefined;
  /** A replica's tokenizer when its view does not say (the agent's plan knows it). */
  readonly tokenizerOf?: ((replicaId: string) => string | undefined) | undefined;
  /** Whose /tokenize a replica serves when its view does not say (the agent's plan knows its engine). */
  readonly tokenizeApiOf?: ((replicaId: string) => TokenizeApi | undefined) | undefined;
}

/** A decision and what committing it needs. */
export interface Routed extends Choice {
  readonly promptTokens: number;
  readonly trace: RouteTrace;
  /** The chosen replica's ticket; `done` also ends the request's hold on its adapter. */
  readonly ticket: { firstByte(): void; done(): void };
  /** Why it went there: every candidate's numbers and the reason. */
  readonly receipt: RouteReceipt;
  /** The request's hold on its on-demand adapter; send once `ready` settles. */
  readonly adapter: AdapterLease | undefined;
}

/** What routing waited for: the prompt's length and, when known, its scores and block keys per replica. */
export interface WaitedFacts {
  readonly promptTokens: number;
  readonly scored: { readonly cached: ReadonlyMap<string, number>; readonly keys: ReadonlyMap<string, { readonly keys: BlockKeyArray; readonly known: number }> } | undefined;
  readonly trace: RouteTrace;
}

/** Everything the tiers decide on, and what committing the decision needs. */
export interface Facts {
  readonly route: RouteFacts;
  readonly candidates: readonly Candidate[];
  /** Block keys per replica id, for the prediction, and how many leading ones the index already has for it. */
  readonly keys: ReadonlyMap<string, { readonly keys: BlockKeyArray; readonly known: number }>;
  /** The prompt's chunks in the approximate tree. */
  readonly chunks: readonly string[];
  readonly trace: RouteTrace;
}

/** The score groups of one request: each group's replicas with their index slots, and what the pool is asked. */
interface ScorePlan {
  readonly groups: readonly { readonly layout: readonly { r: ReplicaView; s: ReplicaSlots | undefined }[]; readonly ask: ScoreRequest }[];
}

/** How a request is routed: its body's bytes (for local tokenizing) and the client's signal. */
export interface RouteOptions {
  readonly signal?: AbortSignal | undefined;
  readonly body?: Uint8Array | undefined;
  /** How much longer the request may wait for its first token; a busy holder is not waited for past it. */
  readonly deadlineMs?: number | undefined;
  /** The replica the request's session points at (routing/session.ts's sessionTarget); absent: none. */
  readonly session?: SessionPoint | undefined;
}

// vLLM always computes at least the last prompt token, so a prompt whose every full block is cached
// still prefills its last block: the usable hit is capped at the last block boundary before the end.
const usableBlocks = (blocks: number, promptTokens: number, blockSize: number): number =>
  Math.min(blocks, Math.floor(Math.max(0, promptTokens - 1) / blockSize));

/** The tiers tried in order; the load tier answers when a custom list has none that does. Pure. */
export function decide(tiers: readonly RouteTier[], facts: RouteFacts, candidates: readonly Candidate[]): Choice | undefined {
  for (const tier of tiers) {
    const choice = tier(facts, candidates);
    if (choice !== undefined) return choice;
  }
  return loadTier(facts, candidates);
}

/** What a deadline gives the work it bounds: a signal that aborts when the deadline passes or the client leaves. */
export interface Deadline {
  readonly signal: AbortSignal;
}

/**
 * Runs `work` with a deadline of `ms`: when the deadline passes or the client leaves, `late` is
 * the answer (the work may finish later; its result is dropped) and the deadline's signal aborts.
 * The signal is made only when the work reads it, and only then is the client's signal listened
 * to: a pool task is never stopped and does not read it, and an AbortController, or a listener on
 * the client's (an EventTarget), cost a routing decision microseconds of the event loop each
 * (0.1 ms with its listeners, measured in bench/tokenize) while an HTTP call to /tokenize is the
 * only reader. Work that cannot be stopped is waited for up to the deadline, and its answer is
 * dropped for a client that left meanwhile. One timer, cleared on settle.
 */
export async function within<T>(ms: number, client: AbortSignal | undefined, late: (why: string) => T, work: (d: Deadline) => Promise<T>): Promise<T> {
  const clientGone = (): boolean => client?.aborted === true;
  if (clientGone()) return late('client-gone');
  let stop: AbortController | undefined;
  let passed = false;
  let settle: (why: string) => void = () => undefined;
  const stopped = new Promise<T>((resolve) => {
    settle = (why) => resolve(late(why));
  });
  const end = (why: string): void => {
    passed = true;
    stop?.abort();
    settle(why);
  };
  const onClient = (): void => end('client-gone');
  const timer = setTimeout(() => end(clientGone() ? 'client-gone' : 'timeout'), ms);
  const deadline: Deadline = {
    get signal(): AbortSignal {
      if (stop === undefined) {
        stop = new AbortController();
        if (passed) stop.abort();
        else client?.addEventListener('abort', onClient, { once: true });
      }
      return stop.signal;
    },
  };
  try {
    const answer = await Promise.race([work(deadline), stopped]);
    return !passed && clientGone() ? late('client-gone') : answer;
  } catch (e) {
    // A source that throws instead of answering {ok:false} costs this fact only.
    return late(e instanceof Error ? e.message : String(e));
  } finally {
    clearTimeout(timer);
    if (stop !== undefined) client?.removeEventListener('abort', onClient);
  }
}

/** The routing policy with its facts: one instance per gateway. */
export class Router {
  readonly #p: RouterParts;
  readonly #tiers: readonly RouteTier[];
  #turn = 0;

  constructor(p: RouterParts) {
    this.#p = p;
    this.#tiers = p.tiers ?? defaultTiers;
  }

  /** Chooses a replica among `replicas` (non-empty) and books the request on it. Never throws for routing reasons. */
  async route(req: GenerationRequest, replicas: readonly ReplicaView[], o: RouteOptions = {}): Promise<Routed> {
    const waited = await this.waitedFacts(req, replicas, o);
    // From here to the booking is one synchronous turn: the load, the tree and adapter residency are
    // read in the turn the decision is committed in. Read before an await (even the return of an
    // async step), a sibling sent at once could read them between this request's read and its
    // booking, see an idle holder of the shared prefix, and pile onto it with this one.
    const facts = this.facts(req, replicas, waited, o.deadlineMs, o.session);
    const choice = decide(this.#tiers, facts.route, facts.candidates);
    if (choice === undefined) {
      throw new LlmgwError('LLMGW_NO_REPLICA', `model "${req.model}": no ready replica to route to; see the agent's log for why`);
    }
    return this.commit(facts, choice, adapterOf(req, replicas));
  }

  /**
   * Whether a chat's answer is worth keeping for `answered`: 'prepare', or 'short' for a prompt
   * under router.prepareMinPromptTokens; undefined when no turn preparer is wired in.
   */
  turnPreparation(promptTokens: number): 'prepare' | 'short' | undefined {
    if (this.#p.preparer === undefined) return undefined;
    return promptTokens >= this.#p.config.prepareMinPromptTokens ? 'prepare' : 'short';
  }

  /**
   * After a chat's answer: its next turn made ready in the pool (the conversation with the answer
   * appended, encoded and hashed), so that turn encodes only what the user adds. For the server to
   * call once the answer is complete; resolves when done and never throws.
   */
  async answered(req: GenerationRequest, replica: ReplicaView, o: { body: Uint8Array; answer: Answer }): Promise<void> {
    const preparer = this.#p.preparer;
    // Not `req.messages`: a body parsed in the pool would parse its prompt here to answer that.
    if (req.endpoint !== 'chat' || preparer === undefined) return;
    const hashes = replica.kvEvents ? this.scorePlan(req, [replica]).groups.map((g) => g.ask.hash) : [];
    await preparer.prepare(req, this.tokenTarget(replica), { ...o, hashes });
  }

  /** Where a replica's prompts are tokenized: its /tokenize in its engine's format, and its tokenizer when the view or the plan names one. */
  tokenTarget(r: ReplicaView): TokenTarget {
    return { url: r.url, apiKey: r.apiKey, tokenizeApi: r.tokenizeApi ?? this.#p.tokenizeApiOf?.(r.id), tokenizer: r.tokenizer ?? this.#p.tokenizerOf?.(r.id) };
  }

  /** Step 1a: the facts that take waiting (token ids, their scores), each bounded by its own deadline. */
  async waitedFacts(req: GenerationRequest, replicas: readonly ReplicaView[], o: RouteOptions = {}): Promise<WaitedFacts> {
    const trace: RouteTrace = {};
    const withEvents = replicas.filter((r) => r.kvEvents);
    // A policy without the precise tier (a benchmark's baseline) neither pays for tokens nor sees the index.
    const precise = this.#tiers.includes(preciseTier) && this.#p.scorer !== undefined && this.#p.slots !== undefined && withEvents.length > 0;
    // The plan is made before tokenizing so a pool that tokenizes can score in the same trip.
    const plan = precise ? this.scorePlan(req, withEvents) : undefined;
    // Replicas without KV events (llama.cpp) cannot be scored, but under a policy that routes by
    // content their ids still count the prompt (cost model, receipts) where a local tokenizer gives
    // them: a llama.cpp model's, read from its GGUF. No /tokenize round trip is spent on a count
    // (the token source is told it is one); a baseline policy spends nothing, as before.
    const counted = !precise && this.#tiers.includes(preciseTier) && replicas.some((r) => !r.kvEvents && this.tokenTarget(r).tokenizer !== undefined);
    const tokens = precise || counted || req.promptTokenIds !== undefined ? await this.tokenFacts(req, replicas, trace, { ...o, score: plan?.groups.map((g) => g.ask) }) : undefined;
    const promptTokens = tokens?.count ?? estimateTokens(req);
    const s0 = performance.now();
    const scored = tokens !== undefined && plan !== undefined ? await this.scoreFacts(tokens, plan, trace, o.signal) : undefined;
    if (scored !== undefined) trace.scoreMs = performance.now() - s0;
    return { promptTokens, scored, trace };
  }

  /** Step 1b: with the waited facts, what is read at once (tree, load, residency); call it in the turn that commits. */
  facts(req: GenerationRequest, replicas: readonly ReplicaView[], waited: WaitedFacts, deadlineMs?: number, session?: SessionPoint): Facts {
    const { scored } = waited;
    const chunks = scored !== undefined && scored.cached.size >= replicas.length ? [] : this.#chunks(req, replicas);
    const adapter = adapterOf(req, replicas);
    return {
      route: {
        promptTokens: waited.promptTokens,
        precise: scored?.cached,
        approximate: this.treeFacts(chunks, replicas, scored?.cached),
        ttftBudgetMs: this.#p.config.ttftBudgetMs,
        boundedLoadFactor: this.#p.config.boundedLoadFactor,
        waitOrSpill: this.#p.config.waitOrSpill,
        deadlineMs,
        session,
        turn: this.#turn++,
        // A request routed while another's adapter load starts sees that load and joins it.
        ...(adapter === undefined ? {} : { resident: this.#p.adapters?.holders(adapter, replicas) }),
      },
      candidates: this.loadFacts(replicas),
      keys: scored?.keys ?? new Map(),
      chunks,
      trace: waited.trace,
    };
  }

  /** The load fact: each replica as the tiers see it. */
  loadFacts(replicas: readonly ReplicaView[]): Candidate[] {
    const rates = this.#p.costs?.ratesOf(replicas.map((v) => ({ id: v.id, stated: v.prefillTokensPerS })));
    return replicas.map((view, i) => {
      const l = this.#p.load.get(view.id);
      const prefillTokensPerS = rates?.[i] ?? view.prefillTokensPerS ?? this.#p.config.prefillTokensPerS;
      return { view, ...l, prefillTokensPerS, cachedBlocks: view.kvEvents ? this.#p.cachedBlocks?.(view.id) : undefined };
    });
  }

  /** The token fact: the client's ids, or the prompt tokenized for the least busy replica with KV events (else with a local tokenizer). */
  async tokenFacts(
    req: GenerationRequest,
    replicas: readonly ReplicaView[],
    trace: RouteTrace,
    o: RouteOptions & { score?: readonly ScoreRequest[] | undefined },
  ): Promise<PromptIds | undefined> {
    // Token ids the client sent need no tokenizer: the engine hashes exactly these.
    if (req.promptTokenIds !== undefined) {
      trace.tokenize = 'client';
      return { count: req.promptTokenIds.length, tokens: Uint32Array.from(req.promptTokenIds), owned: true };
    }
    const leastBusy = (ok: (r: ReplicaView) => boolean): ReplicaView | undefined => {
      let best: ReplicaView | undefined;
      let least = Infinity;
      for (const r of replicas) {
        const inFlight = ok(r) ? this.#p.load.get(r.id).inFlight : Infinity;
        if (inFlight < least) [best, least] = [r, inFlight];
      }
      return best;
    };
    // A replica with KV events first (its ids are hashed); else one with a local tokenizer (its ids count the prompt).
    const hashed = leastBusy((r) => r.kvEvents);
    const target = hashed ?? leastBusy((r) => this.tokenTarget(r).tokenizer !== undefined);
    if (target === undefined) return undefined;
    const t0 = performance.now();
    const loading = this.#p.config.tokenizerLoadWaitMs > 0 ? this.#p.loads?.loading(req.model) : undefined;
    if (loading !== undefined) await within(this.#p.config.tokenizerLoadWaitMs, o.signal, () => undefined, () => loading);
    const to = this.tokenTarget(target);
    const t = await within<TokenFact>(
      this.#p.config.tokenizeTimeoutMs,
      o.signal,
      (reason) => ({ ok: false, reason }),
      // With score groups asked, the scores are what routing needs: the ids stay in the pool. The
      // signal is passed on as read, so it is made only for a source that listens (an HTTP call).
      (d) =>
        this.#p.tokens.tokens(req, to, {
          get signal() {
            return d.signal;
          },
          body: o.body,
          score: o.score,
          ids: o.score === undefined,
          countOnly: hashed === undefined,
        }),
    );
    trace.tokenizeMs = performance.now() - t0;
    trace.tokenize = t.ok ? t.via : t.reason;
    if (!t.ok) return undefined;
    return t.tokens === undefined ? { count: t.count, tokens: undefined, owned: false, scored: t.scored } : { count: t.tokens.length, tokens: t.tokens, owned: t.owned, scored: t.scored };
  }

  /** The replicas with KV events grouped by hash parameters, each group's index slots, as read now. */
  scorePlan(req: GenerationRequest, replicas: readonly ReplicaView[]): ScorePlan {
    const slots = this.#p.slots;
    const byParams = new Map<string, ReplicaView[]>();
    for (const r of replicas) {
      const lora = req.model !== r.model && r.adapters.includes(req.model) ? req.model : '';
      const g = `${r.blockSizeTokens}\0${r.hashSeed}\0${lora}`;
      const list = byParams.get(g);
      if (list === undefined) byParams.set(g, [r]);
      else list.push(r);
    }
    const groups = [...byParams.values()].map((group) => {
      const first = group[0];
      const layout = group.map((r) => ({ r, s: slots?.slotsOf(r.id) }));
      const slotList = layout.flatMap(({ s }) => (s === undefined ? [] : [s.predicted, ...s.held.map((h) => h.slot)]));
      const hash: ScoreHashOptions = { blockSizeTokens: first?.blockSizeTokens ?? 16, seed: first?.hashSeed ?? '0', algo: 'sha256_cbor' };
      if (first !== undefined && req.model !== first.model && first.adapters.includes(req.model)) hash.loraName = req.model;
      if (req.cacheSalt !== undefined) hash.cacheSalt = req.cacheSalt;
      return { layout, ask: { hash, slots: slotList } };
    });
    return { groups };
  }

  /**
   * The score fact: cached tokens per replica by the shared index. Scores the token source already
   * gave (hashed in the same pool trip) are used as they are; otherwise each group is scored in the
   * pool at once. Undefined when the pool could not answer in time (the approximate tier takes over).
   */
  async scoreFacts(
    tokens: PromptIds,
    plan: ScorePlan,
    trace: RouteTrace,
    signal?: AbortSignal,
  ): Promise<{ cached: Map<string, number>; keys: Map<string, { keys: BlockKeyArray; known: number }> } | undefined> {
    const scorer = this.#p.scorer;
    if (scorer === undefined) return undefined;
    const promptTokens = tokens.count;
    type Scored = Awaited<ReturnType<Scorer['score']>>;
    const given = tokens.scored;
    const ids = tokens.tokens;
    const results: readonly Scored[] =
      given !== undefined && given.length === plan.groups.length
        ? given.map((g) => ({ ok: true as const, ...g }))
        : ids === undefined
          ? [{ ok: false, reason: 'no-ids' }]
          : await within<Scored[]>(
            this.#p.config.scoreTimeoutMs,
            signal,
            (reason) => [{ ok: false, reason }],
            () =>
              Promise.all(
                plan.groups.map((g, i, all) => {
                  // The last group may take the buffer when it is ours; a shared one (a cached answer) is copied.
                  const mine = tokens.owned && i === all.length - 1 ? ids : ids.slice();
                  return scorer.score({ tokens: mine, hash: g.ask.hash, slots: g.ask.slots });
                }),
              ),
          );
    const cached = new Map<string, number>();
    const keys = new Map<string, { keys: BlockKeyArray; known: number }>();
    for (const [i, t] of plan.groups.entries()) {
      const res = results[i] ?? results[0];
      if (res === undefined || !res.ok) {
        trace.score = res?.reason ?? 'no-answer';
        return undefined;
      }
      if (res.lookups !== undefined) trace.indexLookups = (trace.indexLookups ?? 0) + res.lookups;
      const leadOf = new Map(t.ask.slots.map((slot, j) => [slot, res.leading[j] ?? 0]));
      for (const { r, s } of t.layout) {
        const blocks = s === undefined ? 0 : effectiveBlocks(s, leadOf, r.dataParallelSize, this.#p.config.offloadTierWeight);
        cached.set(r.id, usableBlocks(blocks, promptTokens, r.blockSizeTokens) * r.blockSizeTokens);
        // Leading blocks the index already has for it, reported or predicted: a conversation's next
        // turn then predicts only what it added.
        let known = s === undefined ? 0 : (leadOf.get(s.predicted) ?? 0);
        for (const h of s?.held ?? []) known = Math.max(known, leadOf.get(h.slot) ?? 0);
        keys.set(r.id, { keys: res.keys, known });
      }
    }
    trace.score = 'ok';
    return { cached, keys };
  }

  // An adapter's blocks are not the base model's: the tree keeps them apart as the block keys do.
  #chunks(req: GenerationRequest, replicas: readonly ReplicaView[]): string[] {
    const text = withAdapter(adapterOf(req, replicas), promptText(req));
    return text === undefined ? [] : this.#p.tree.chunkNames(text);
  }

  /** The approximate fact: estimated cached tokens for the replicas the index cannot speak for. */
  treeFacts(chunks: readonly string[], replicas: readonly ReplicaView[], precise: ReadonlyMap<string, number> | undefined): Map<string, number> | undefined {
    if (chunks.length === 0) return undefined;
    const blind = replicas.filter((r) => precise?.has(r.id) !== true);
    const perChunk = this.#p.config.approxChunkChars / 4;
    const lead = this.#p.tree.leading(chunks, blind);
    return new Map([...lead].map(([id, n]) => [id, Math.floor(n * perChunk)]));
  }

  /** Step 3: what the decision leaves behind: the prediction, the tree, the load ticket, the adapter hold. */
  commit(facts: Facts, choice: Choice, adapter?: string): Routed {
    const chosen = choice.replica;
    const keys = facts.keys.get(chosen.id);
    if (keys !== undefined) this.#p.slots?.predict(chosen.id, keys.keys, keys.known);
    if (facts.chunks.length > 0) this.#p.tree.insert(facts.chunks, chosen);
    const promptTokens = facts.route.promptTokens;
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
    const receipt = receiptOf(this.#p.config.policy, facts.route, facts.candidates, choice, (id) => this.#p.costs?.estimate(id));
    return { ...choice, promptTokens, trace: facts.trace, ticket, adapter: lease, receipt };
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
