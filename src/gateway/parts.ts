// What startGateway builds from its options before it listens: the upstream clients, the routing
// parts (index writer, load book, prefix tree, cost model, adapters, router, queue poller),
// accounting, admission, and the context every route is handed; and how to release them all.
import { Agent, Pool } from 'undici';
import { Admission, admissionMetrics, AdmissionPeers, priorityClasses } from '../admission/index.js';
import { MemoryResponseStore } from '../apis/index.js';
import { IndexWriter } from '../kv/index.js';
import type { RequestPolicy } from '../limits/index.js';
import type { Logger } from '../log/index.js';
import { silentLogger } from '../log/index.js';
import { boundedCount, cachedBlocksOf, CostModel, EngineTokenizer, LoadBook, PoolTokenizer, PrefixTree, QueuePoller, ReceiptRing, Router, SlotCounts, tiersOf, VerifiedTokens } from '../routing/index.js';
import type { LocalState, ReplicaDirectory, TokenSource } from '../routing/index.js';
import { adapterMetrics, AdapterResidency, migrationMetrics, UpstreamPool } from '../upstream/index.js';
import type { UpstreamClients } from '../upstream/index.js';
import { Accounting } from './accounting.js';
import type { Caller } from './auth.js';
import { receiptsKept } from './context.js';
import type { GatewayContext, GatewayOptions } from './context.js';
import { debugRoutes } from './debug.js';
import { Drain } from './drain.js';
import { gatewayMetrics } from './metrics.js';
import type { GatewayMetrics } from './metrics.js';
import { keptBodies } from './request.js';
import { residentNow } from './served-models.js';
import { RequestTracing, tracerFromConfig } from './tracing.js';

/** What a gateway is made of; release() closes it in reverse order of start. */
export interface GatewayParts {
  readonly ctx: GatewayContext;
  readonly writer: IndexWriter | undefined;
  readonly load: LoadBook;
  readonly verified: VerifiedTokens | undefined;
  release(): Promise<void>;
}

/** Builds every part of a gateway from its options; nothing listens yet. */
export function buildParts(o: GatewayOptions): GatewayParts {
  const cfg = o.config;
  const log = o.log ?? silentLogger;
  const { upstream, dispatcher } = upstreamClients(o);
  const configuredTracer = o.tracer === undefined ? tracerFromConfig(cfg.tracing, { env: o.env ?? {}, registry: o.registry }) : undefined;
  const tracing = new RequestTracing(o.tracer ?? configuredTracer?.tracer);
  const { writer, load, metrics, verified, tree, costs, adapters, router, poller } = routingParts(o, dispatcher, tracing, log);
  const accounting = new Accounting({ keys: cfg.apiKeys, store: o.store, whenDown: o.whenStoreDown, log });
  const authenticate = (authorization: string | undefined): Caller => {
    const inner = o.innerKeyOf?.(authorization);
    return inner === undefined ? accounting.authenticate(authorization) : accounting.authenticateSha256(inner);
  };
  // The queue's gauges read the queue itself at each scrape, after it is made; its waiting count is
  // the one bounded load counts.
  // Several gateways: each one's tenants count in the others' share rule (one gateway: none of it).
  const peers =
    o.peerBoard === undefined || cfg.admission.peerIntervalMs === 0
      ? undefined
      : new AdmissionPeers({
          board: o.peerBoard,
          holdings: () => admission.holdings(),
          intervalMs: cfg.admission.peerIntervalMs,
          classes: priorityClasses.length,
          onError: (e) => log.warn({ err: e }, 'admission.peers_failed'),
        });
  const admission: Admission = new Admission({
    config: cfg.admission,
    facts: { replicas: (model) => router.loadFacts(o.directory.ready(model)).map((c) => ({ ...c, id: c.view.id, waiting: boundedCount(c) })) },
    observer: admissionMetrics(o.registry, () => admission.view()),
    peers: peers === undefined ? undefined : (model) => peers.holdsOf(model),
  });
  peers?.start();
  const debug = o.actors === undefined ? undefined : debugRoutes(o.actors, authenticate);
  const policy: RequestPolicy = { maxJsonDepth: cfg.maxJsonDepth, trustChatTemplate: cfg.trustRequestChatTemplate };
  const ctx: GatewayContext = {
    o,
    log,
    upstream,
    metrics,
    router,
    load,
    tree,
    costs,
    receipts: new ReceiptRing(receiptsKept),
    tracing,
    policy,
    bodies: keptBodies(cfg),
    parsePool: o.parsePool,
    authenticate,
    accounting,
    admission,
    generations: new Map(),
    debug,
    drain: new Drain({ graceMs: cfg.drainGraceMs }),
    responses: o.responseStore ?? new MemoryResponseStore({ maxEntries: cfg.responses.memoryMaxEntries, maxBytes: cfg.responses.memoryMaxBytes }),
    migrations: migrationMetrics(o.registry),
    tokenizerState: (model) => verified?.stateOf(model),
    seam: async (model, target, s) => (verified === undefined ? 'unknown' : verified.seam(model, target, s)),
    render: async (model, target, body) => (verified === undefined ? undefined : verified.render(model, target, body)),
  };
  const release = async (): Promise<void> => {
    await peers?.close();
    admission.close();
    await poller.close();
    await adapters.close();
    writer?.close();
    await upstream.pool.close();
    await dispatcher.close();
    await configuredTracer?.shutdown();
  };
  return { ctx, writer, load, verified, release };
}

// undici's agent for the engines' JSON endpoints (one pool per origin, each with its replica's CA),
// and our own pool for the generate path's streams.
function upstreamClients(o: GatewayOptions): { upstream: UpstreamClients; dispatcher: Agent } {
  const u = o.config.upstream;
  const dispatcher = new Agent({
    connections: u.connections,
    keepAliveTimeout: 30_000,
    keepAliveMaxTimeout: 600_000,
    maxHeaderSize: u.maxHeadBytes,
    maxResponseSize: u.maxAnswerBytes,
    factory: (origin, opts) => {
      const ca = o.caOf?.(new URL(String(origin)).origin);
      // The agent's own options carry no connect options of their own to keep: only the CA is added.
      return new Pool(origin, ca === undefined ? opts : { ...opts, connect: { ca } });
    },
  });
  const pool = new UpstreamPool({ connections: u.connections, maxHeaderBytes: u.maxHeadBytes, maxBodyBytes: u.maxAnswerBytes });
  const upstream: UpstreamClients = { pool, dispatcher };
  return { upstream, dispatcher };
}

// What routing is made of: the index writer (with a shared index), the load book, the prefix tree,
// the cost model, the adapters' residency, the router over them, and the poller of engine queues.
/** The index writer, writing through the per-slot counts the load tier reads. */
function indexedParts(index: NonNullable<GatewayOptions['index']>, ownerOf: GatewayOptions['ownerOf'], predictionTtlMs: number): { writer: IndexWriter; counts: SlotCounts } {
  const counts = new SlotCounts(index.index);
  const writer = new IndexWriter({ index: counts, slotCount: index.slotCount, ownerOf: ownerOf ?? (() => undefined), predictionTtlMs });
  return { writer, counts };
}

function routingParts(o: GatewayOptions, dispatcher: Agent, tracing: RequestTracing, log: Logger) {
  const cfg = o.config;
  const load = new LoadBook();
  // The writer writes through the counts, so the load tier sees how full each cache is.
  const indexed = o.index === undefined ? undefined : indexedParts(o.index, o.ownerOf, cfg.router.predictionTtlMs);
  const writer = indexed?.writer;
  const metrics = gatewayMetrics(o.registry, { writer, load, pool: o.tokenizePool });
  const { tokens, verified } = tokenSource(o, dispatcher, metrics, log);
  const tree = new PrefixTree({ chunkChars: cfg.router.approxChunkChars, maxChunks: cfg.router.approxMaxChunks });
  const costs = new CostModel({ priorPrefillTokensPerS: cfg.router.prefillTokensPerS });
  const late: { adapters?: AdapterResidency } = {};
  const adapters = new AdapterResidency({
    dispatcher,
    maxPerReplica: cfg.adapters.maxPerReplica,
    loadTimeoutMs: cfg.adapters.loadTimeoutMs,
    log,
    observer: adapterMetrics(o.registry, () => residentNow(o.directory, late.adapters)),
  });
  late.adapters = adapters;
  const router = new Router({
    config: cfg.router,
    tokens: tracing.tokenizer(tokens),
    preparer: verified,
    loads: verified,
    scorer: tracing.scorer(o.scorer),
    slots: writer,
    tree,
    load,
    adapters,
    tokenizerOf: o.tokenizerOf,
    tokenizeApiOf: o.tokenizeApiOf,
    tiers: o.tiers ?? tiersOf(cfg.router.policy),
    costs,
    cachedBlocks: indexed === undefined ? undefined : (id) => cachedBlocksOf(indexed.writer.slotsOf(id), indexed.counts),
  });
  const poller = new QueuePoller({
    directory: o.directory,
    load,
    costs,
    dispatcher,
    intervalMs: cfg.router.loadPollIntervalMs,
    timeoutMs: Math.max(200, cfg.router.loadPollIntervalMs),
  });  return { writer, load, metrics, verified, tree, costs, adapters, router, poller };
}

const localStates: readonly LocalState[] = ['loading', 'verifying', 'trusted', 'off', 'failed'];

// Local tokenizing when there is a pool and the config allows it, verified against /tokenize; the
// checks and state changes reach the log and metrics here, outside the verifier's logic.
function tokenSource(o: GatewayOptions, dispatcher: Agent, metrics: GatewayMetrics, log: Logger): { tokens: TokenSource; verified?: VerifiedTokens } {
  const r = o.config.router;
  const engine = new EngineTokenizer({ dispatcher, maxEntries: r.tokenizeCacheEntries });
  const pool = o.tokenizePool;
  if (!r.localTokenize || pool === undefined || o.tokenizerOf === undefined) return { tokens: engine };
  const verified = new VerifiedTokens({
    // A thread that missed the load task says what it uses on its first answer; pieces handed to
    // tokenizers mid-run (our BPE's self-check found a difference) are worth a warning.
    local: new PoolTokenizer(pool, {
      onPieces: (tokenizer, pieces) => (pieces.startsWith('tokenizers') ? log.warn({ tokenizer, pieces }, 'tokenize.pieces') : log.info({ tokenizer, pieces }, 'tokenize.pieces')),
    }),
    engine,
    pool,
    verifyFirst: r.tokenizeVerifyFirst,
    verifyEvery: r.tokenizeVerifyEvery,
    checkTimeoutMs: Math.max(1_000, r.tokenizeTimeoutMs * 4),
    onCheck: (c) => {
      metrics.tokenizeChecks.inc({ model: c.model, outcome: c.outcome });
      if (c.outcome === 'mismatch') log.warn({ ...c }, 'tokenize.mismatch');
    },
    onState: (model, tokenizer, state, reason, pieces) => {
      for (const s of localStates) metrics.localTokenizeState.set({ model, state: s }, s === state ? 1 : 0);
      const fields = { model, tokenizer, state, reason, pieces };
      if (state === 'off' || state === 'failed') log.warn(fields, 'tokenize.local_off');
      else log.info(fields, 'tokenize.local_state');
    },
    onPrepared: (model, p) => metrics.turnsPrepared.inc({ model, outcome: p.ok ? 'prepared' : 'skipped' }),
  });
  return { tokens: verified, verified };
}

// Each model's tokenizer as its requests will ask for it: the router's token target for a ready
// replica with KV events, else for one with a local tokenizer (a llama.cpp model's GGUF), as it tokenizes.
export function loadTokenizers(directory: ReplicaDirectory, router: Router, verified: VerifiedTokens): void {
  for (const model of directory.models()) {
    const ready = directory.ready(model);
    const r = ready.find((v) => v.kvEvents) ?? ready.find((v) => router.tokenTarget(v).tokenizer !== undefined);
    const tokenizer = r === undefined ? undefined : router.tokenTarget(r).tokenizer;
    if (tokenizer !== undefined) verified.load(model, tokenizer);
  }
}
