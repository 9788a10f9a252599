// The gateway's HTTP server: builds what the routes share (router, accounting, admission, upstream
// clients, tracing) from the options, listens, hands each request to the route table (routes.ts),
// answers protocol errors Node would answer with an empty body, and closes in reverse order of start.
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { Agent, Pool } from 'undici';
import { Admission, admissionMetrics } from '../admission/index.js';
import { MemoryResponseStore } from '../apis/index.js';
import { LlmgwError } from '../errors/index.js';
import { IndexWriter } from '../kv/index.js';
import type { RequestPolicy } from '../limits/index.js';
import type { Logger } from '../log/index.js';
import { silentLogger } from '../log/index.js';
import { boundedCount, CostModel, EngineTokenizer, LoadBook, PoolTokenizer, PrefixTree, QueuePoller, ReceiptRing, Router, tiersOf, VerifiedTokens } from '../routing/index.js';
import type { LocalState, ReplicaDirectory, TokenSource } from '../routing/index.js';
import { adapterMetrics, AdapterResidency, migrationMetrics, UpstreamPool } from '../upstream/index.js';
import type { UpstreamClients } from '../upstream/index.js';
import { Accounting } from './accounting.js';
import type { Caller } from './auth.js';
import { receiptsKept } from './context.js';
import type { GatewayContext, GatewayOptions } from './context.js';
import { debugRoutes } from './debug.js';
import { gatewayMetrics } from './metrics.js';
import type { GatewayMetrics } from './metrics.js';
import { sendError, writeRawError } from './reply.js';
import { keptBodies } from './request.js';
import { dispatch } from './routes.js';
import { residentNow } from './served-models.js';
import { RequestTracing, tracerFromConfig } from './tracing.js';

/** A running gateway. */
export interface Gateway {
  readonly url: URL;
  /** Where the agent's per-replica deltas go; undefined without a shared index. */
  readonly writer: IndexWriter | undefined;
  readonly router: Router;
  readonly load: LoadBook;
  /**
   * Resolves once no model's tokenizer is still loading: until then /ready says warming, and a
   * model's requests are tokenized by its engine and may be routed by load alone.
   */
  whenWarm(): Promise<void>;
  /** Stops accepting, lets requests finish (bounded), then releases everything; idempotent. */
  close(): Promise<void>;
}

/** Starts the gateway's HTTP server on config.host:config.port (port 0: any free port). */
export async function startGateway(o: GatewayOptions): Promise<Gateway> {
  const cfg = o.config;
  const log = o.log ?? silentLogger;
  const u = cfg.upstream;
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
  const load = new LoadBook();
  const writer =
    o.index === undefined
      ? undefined
      : new IndexWriter({
          index: o.index.index,
          slotCount: o.index.slotCount,
          ownerOf: o.ownerOf ?? (() => undefined),
          predictionTtlMs: cfg.router.predictionTtlMs,
        });
  const metrics = gatewayMetrics(o.registry, { writer, load, pool: o.tokenizePool });
  const { tokens, verified } = tokenSource(o, dispatcher, metrics, log);
  const tree = new PrefixTree({ chunkChars: cfg.router.approxChunkChars, maxChunks: cfg.router.approxMaxChunks });
  const configuredTracer = o.tracer === undefined ? tracerFromConfig(cfg.tracing, { env: o.env ?? {}, registry: o.registry }) : undefined;
  const tracing = new RequestTracing(o.tracer ?? configuredTracer?.tracer);
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
    scorer: tracing.scorer(o.scorer),
    slots: writer,
    tree,
    load,
    adapters,
    tokenizerOf: o.tokenizerOf,
    tokenizeApiOf: o.tokenizeApiOf,
    tiers: o.tiers ?? tiersOf(cfg.router.policy),
    costs,
  });
  const poller = new QueuePoller({
    directory: o.directory,
    load,
    costs,
    dispatcher,
    intervalMs: cfg.router.loadPollIntervalMs,
    timeoutMs: Math.max(200, cfg.router.loadPollIntervalMs),
  });
  const accounting = new Accounting({ keys: cfg.apiKeys, store: o.store, whenDown: o.whenStoreDown, log });
  const authenticate = (authorization: string | undefined): Caller => accounting.authenticate(authorization);
  // The queue's gauges read the queue itself at each scrape, after it is made; its waiting count is
  // the one bounded load counts.
  const admission: Admission = new Admission({
    config: cfg.admission,
    facts: { replicas: (model) => router.loadFacts(o.directory.ready(model)).map((c) => ({ ...c, id: c.view.id, waiting: boundedCount(c) })) },
    observer: admissionMetrics(o.registry, () => admission.view()),
  });
  const debug = o.actors === undefined ? undefined : debugRoutes(o.actors, authenticate);
  const policy: RequestPolicy = { maxJsonDepth: cfg.maxJsonDepth, trustChatTemplate: cfg.trustRequestChatTemplate };
  const ctx: GatewayContext = {
    o,
    log,
    upstream,
    metrics,
    router,
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
    responses: o.responseStore ?? new MemoryResponseStore({ maxEntries: cfg.responses.memoryMaxEntries, maxBytes: cfg.responses.memoryMaxBytes }),
    migrations: migrationMetrics(o.registry),
    tokenizerState: (model) => verified?.stateOf(model),
    seam: async (model, target, s) => (verified === undefined ? 'unknown' : verified.seam(model, target, s)),
  };
  // The response in progress on each connection, so a protocol error arriving after it started
  // is not answered with a second status line in the middle of it.
  const responses = new WeakMap<Duplex, ServerResponse>();

  const onRequest = (req: IncomingMessage, res: ServerResponse): void => {
    responses.set(req.socket, res);
    // A keep-alive connection's next request may be malformed: it gets its answer once this one is done.
    res.once('finish', () => {
      if (responses.get(req.socket) === res) responses.delete(req.socket);
    });
    // The handler settles every failure into a response itself; this catch is for its own bugs.
    dispatch(ctx, req, res).catch((e: unknown) => {
      log.error({ err: e }, 'gateway.handler_failed');
      if (!res.headersSent) sendError(res, e);
      else res.destroy();
    });
  };
  const server = createServer(
    {
      // Our own body timer (readBody) answers first with an OpenAI 408; Node's request timeout is the
      // backstop for a client that never finishes its headers, checked every second instead of 30.
      headersTimeout: cfg.bodyTimeoutMs,
      requestTimeout: cfg.bodyTimeoutMs + 1_000,
      connectionsCheckingInterval: Math.min(1_000, cfg.bodyTimeoutMs),
    },
    onRequest,
  );
  // Node answers protocol errors (431 headers too large, 400 bad framing, 408) with an empty body;
  // an OpenAI client then reports "unknown error". Each gets the OpenAI error object instead.
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    const res = responses.get(socket);
    if (err.code === 'ECONNRESET' || !socket.writable || res?.headersSent === true) {
      socket.destroy();
      return;
    }
    const e =
      err.code === 'HPE_HEADER_OVERFLOW'
        ? new LlmgwError('LLMGW_HEADERS_TOO_LARGE', 'request headers are over the gateway\'s limit of 16 KiB; send fewer or shorter headers')
        : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' || err.code === 'ERR_HTTP_HEADERS_TIMEOUT'
          ? new LlmgwError('LLMGW_BODY_TIMEOUT', `request did not arrive within ${cfg.bodyTimeoutMs} ms; send it at once, or raise gateway.body_timeout_ms`)
          : new LlmgwError('LLMGW_BAD_HTTP', `the request is not valid HTTP/1.1 (${err.code ?? err.message}); check the client's framing (Content-Length, Transfer-Encoding, header syntax)`);
    writeRawError(socket, e);
  });
  // An Expect other than 100-continue: Node's own 417 has no body.
  server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
    const want = String(req.headers.expect ?? '');
    sendError(res, new LlmgwError('LLMGW_EXPECTATION', `Expect: ${JSON.stringify(want).slice(0, 80)} is not supported; send no Expect header or "100-continue"`), {
      connection: 'close',
    });
  });
  // A client that asks first (Expect: 100-continue) is not invited to send a body it declared over
  // the limit: it gets the 413 at once instead of racing its upload against the closing connection.
  server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    if (!(Number(req.headers['content-length'] ?? NaN) > cfg.maxBodyBytes)) res.writeContinue();
    onRequest(req, res);
  });
  const release = async (): Promise<void> => {
    admission.close();
    await poller.close();
    await adapters.close();
    writer?.close();
    await upstream.pool.close();
    await dispatcher.close();
    await configuredTracer?.shutdown();
  };
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(cfg.port, cfg.host, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (e) {
    // A port in use must not leave the poller's loop keeping the process alive.
    await release();
    const why = e instanceof Error ? e.message : String(e);
    throw new LlmgwError('LLMGW_LISTEN', `gateway cannot listen on ${cfg.host}:${cfg.port} (${why}); stop what holds it or change gateway.port`, { cause: e });
  }
  const addr: AddressInfo | string | null = server.address();
  if (addr === null || typeof addr === 'string') throw new LlmgwError('LLMGW_LISTEN', `gateway on ${cfg.host}:${cfg.port} has no TCP address`);
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  const url = new URL(`http://${host}:${addr.port}/`);
  log.info({ url: url.href, keys: cfg.apiKeys.length, precise: writer !== undefined && o.scorer !== undefined }, 'gateway.listening');
  let unsubscribe: (() => void) | undefined;
  if (verified !== undefined) {
    // A model's tokenizer loads once a replica of it is ready, while nothing waits for it; loading
    // Qwen3's takes the pool seconds and the event loop about 0.7 s, which a model's first requests
    // would otherwise sit through (routed by load meanwhile, and every request on the loop delayed).
    const loadReady = (): void => loadTokenizers(o.directory, router, verified);
    loadReady();
    unsubscribe = o.directory.onChange?.(loadReady);
  }

  let closing: Promise<void> | undefined;
  const shutdown = async (): Promise<void> => {
    unsubscribe?.();
    debug?.close();
    await closeServer(server, o.closeGraceMs ?? 10_000);
    await release();
    log.info({}, 'gateway.closed');
  };
  return { url, writer, router, load, whenWarm: async () => verified?.whenLoaded(), close: () => (closing ??= shutdown()) };
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
function loadTokenizers(directory: ReplicaDirectory, router: Router, verified: VerifiedTokens): void {
  for (const model of directory.models()) {
    const ready = directory.ready(model);
    const r = ready.find((v) => v.kvEvents) ?? ready.find((v) => router.tokenTarget(v).tokenizer !== undefined);
    const tokenizer = r === undefined ? undefined : router.tokenTarget(r).tokenizer;
    if (tokenizer !== undefined) verified.load(model, tokenizer);
  }
}

async function closeServer(server: Server, graceMs: number): Promise<void> {
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeIdleConnections();
  const timer = setTimeout(() => server.closeAllConnections(), graceMs);
  try {
    await closed;
  } finally {
    clearTimeout(timer);
  }
}
