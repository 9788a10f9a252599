// The gateway's HTTP server: OpenAI API in front of the ready replicas. It authenticates, admits by
// quota, reads a bounded body, routes, forwards (retrying once on another replica when the first
// could not start the request), and accounts the engine's usage. Every response carries
// x-llmgw-replica and x-llmgw-route, errors included, so a client can always say where it went.
import { randomUUID } from 'node:crypto';
import { createServer, STATUS_CODES } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Span, Tracer } from '@opentelemetry/api';
import type { Duplex } from 'node:stream';
import type { Registry } from 'prom-client';
import { Agent, Pool } from 'undici';
import { Admission, admissionMetrics, enginePriorityOf, maxWaitOf, requestPriority } from '../admission/index.js';
import type { Permit, PriorityClass } from '../admission/index.js';
import { deleteStoredResponse, MemoryResponseStore, messagesApi, messagesChat, messagesTurn, responsesApi, responsesTurn, storedResponse } from '../apis/index.js';
import type { ApiTurn, ClientApi, ResponseStore } from '../apis/index.js';
import { LlmgwError, UpstreamError } from '../errors/index.js';
import { IndexWriter, type SharedIndex } from '../kv/index.js';
import { parseGenerationRequest, parseRequestJson } from '../limits/index.js';
import type { ChatBodyParser, Endpoint, GenerationRequest, RequestPolicy } from '../limits/index.js';
import type { Logger } from '../log/index.js';
import { silentLogger } from '../log/index.js';
import {
  boundedCount,
  compactReceipt,
  CostModel,
  EngineTokenizer,
  LoadBook,
  PoolTokenizer,
  PrefixTree,
  QueuePoller,
  ReceiptRing,
  Router,
  tiersOf,
  VerifiedTokens,
} from '../routing/index.js';
import type {
  Answer,
  HopReceipt,
  LocalState,
  ReplicaDirectory,
  ReplicaView,
  Routed,
  RouteTier,
  Scorer,
  Seam,
  TokenizeApi,
  TokenizePool,
  TokenSource,
  TokenTarget,
} from '../routing/index.js';
import {
  adapterMetrics,
  adapterRoute,
  AdapterResidency,
  answerText,
  breakReasonOf,
  isRetryable,
  listsAdapters,
  migrationMetrics,
  pipeEvents,
  requestRefusal,
  responseOf,
  sendUpstream,
  streamErrorEvent,
  StreamSplice,
  UpstreamPool,
  usageOf,
} from '../upstream/index.js';
import type { EventTranslator, MigrationMetrics, Refusal, ResponseFacts, UpstreamClients, UpstreamResponse, Usage } from '../upstream/index.js';
import { Accounting } from './accounting.js';
import type { AccountStore, Admitted, StoreDownPolicy } from './accounting.js';
import { adminPrefix, handleAdmin } from './admin.js';
import type { KeyAdmin } from './admin.js';
import type { Caller, TokenHold } from './auth.js';
import type { GatewayConfig } from './config.js';
import { debugRoutes } from './debug.js';
import type { ActorSource, DebugRoutes } from './debug.js';
import { errorReply } from './errors.js';
import { gatewayMetrics } from './metrics.js';
import type { GatewayMetrics } from './metrics.js';
import { concatBody, forwardedBody, keptBodies, readBody, readRequest, type RequestParsePool } from './request.js';
import { endRequest, failed, RequestTracing, spanAttr, tracerFromConfig } from './tracing.js';

/** What starting a gateway takes; cli/serve.ts builds these from the config and the agent. */
export interface GatewayOptions {
  readonly config: GatewayConfig;
  readonly directory: ReplicaDirectory;
  readonly registry: Registry;
  /** The shared cluster index and its slot count; without it there is no precise tier. */
  readonly index?: { readonly index: SharedIndex; readonly slotCount: number } | undefined;
  /** The worker pool that hashes and scores; without it there is no precise tier. */
  readonly scorer?: Scorer | undefined;
  /** The worker pool that tokenizes with each model's own tokenizer; without it, /tokenize only. */
  readonly tokenizePool?: TokenizePool | undefined;
  /** The worker pool that parses request bodies in shared memory (16 KiB and up); without it, the event loop parses them. */
  readonly parsePool?: RequestParsePool | undefined;
  /** The tokenizer of a replica ('bytes', 'qwen3', its model directory or its .gguf), for local tokenizing. */
  readonly tokenizerOf?: ((replicaId: string) => string | undefined) | undefined;
  /** Whose /tokenize a replica serves ('llamacpp' for llama-server; absent: vLLM's). */
  readonly tokenizeApiOf?: ((replicaId: string) => TokenizeApi | undefined) | undefined;
  /** The node that runs a replica (deltas from any other node are rejected). */
  readonly ownerOf?: ((replicaId: string) => string | undefined) | undefined;
  readonly log?: Logger | undefined;
  /** How long close() lets in-flight requests finish before cutting them. */
  readonly closeGraceMs?: number | undefined;
  /** The routing tiers in order (default: defaultTiers); a bench compares policies with it. */
  readonly tiers?: readonly RouteTier[] | undefined;
  /** Operator views served as JSON under /llmgw/<name> to admin callers (`ctl nodes --gateway` reads them). */
  readonly views?: Readonly<Record<string, () => unknown>> | undefined;
  /** Where request spans go; without it, gateway.tracing decides (no endpoint: no tracing). */
  readonly tracer?: Tracer | undefined;
  /** The environment the traces' resource is read from (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES). */
  readonly env?: Readonly<Record<string, string | undefined>> | undefined;
  /** Every actor's state, for /debug/actors; without it there are no debug routes. */
  readonly actors?: ActorSource | undefined;
  /** Where stored Responses live (the keys-and-usage database); without it, this process's memory. */
  readonly responseStore?: ResponseStore | undefined;
  /** Keys, budgets and the usage ledger in a database (store:); without it, gateway.api_keys and in-memory quotas. */
  readonly store?: (AccountStore & KeyAdmin) | undefined;
  /** What a limited key's request does while the store is down (store.when_down). */
  readonly whenStoreDown?: StoreDownPolicy | undefined;
  /** The CA (PEM) an https replica's certificate is checked against, by origin; others use the system's. */
  readonly caOf?: ((origin: string) => string | undefined) | undefined;
}

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

const none = 'none';
// Receipts kept for /debug/receipts: a few minutes of a busy gateway, a few MB at most.
const receiptsKept = 2048;

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
  const ctx: Ctx = {
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
    handle(ctx, req, res).catch((e: unknown) => {
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

/** A status line, headers and an OpenAI error body written straight to a socket Node's parser gave up on. */
function writeRawError(socket: Duplex, e: LlmgwError): void {
  const r = errorReply(e);
  const text = JSON.stringify(r.body);
  const head = [
    `HTTP/1.1 ${r.status} ${STATUS_CODES[r.status] ?? ''}`,
    'content-type: application/json',
    `content-length: ${Buffer.byteLength(text)}`,
    'connection: close',
    `x-llmgw-replica: ${none}`,
    `x-llmgw-route: ${none}`,
  ];
  socket.end(`${head.join('\r\n')}\r\n\r\n${text}`);
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

interface Ctx {
  readonly o: GatewayOptions;
  readonly log: Logger;
  readonly upstream: UpstreamClients;
  readonly metrics: GatewayMetrics;
  readonly router: Router;
  readonly tree: PrefixTree;
  readonly costs: CostModel;
  readonly receipts: ReceiptRing;
  readonly tracing: RequestTracing;
  readonly policy: RequestPolicy;
  /** Request bodies kept so that a chat's next turn parses only what it added, where the event loop parses it. */
  readonly bodies: ChatBodyParser;
  readonly parsePool: RequestParsePool | undefined;
  readonly authenticate: (authorization: string | undefined) => Caller;
  readonly accounting: Accounting;
  readonly admission: Admission;
  // Last generation seen per replica: a new one means it restarted and the tree forgets it.
  readonly generations: Map<string, number>;
  readonly debug: DebugRoutes | undefined;
  readonly responses: ResponseStore;
  readonly migrations: MigrationMetrics;
  /** Where local tokenizing of a model stands; undefined when it is off or not yet asked for. */
  readonly tokenizerState: (model: string) => LocalState | undefined;
  /** Whether a chat's continuation renders as its original prompt plus the answer so far, where the model's template is rendered here. */
  readonly seam: (model: string, target: TokenTarget, s: { original: Uint8Array; continuation: Uint8Array; text: string }) => Promise<Seam>;
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    'x-llmgw-replica': none,
    'x-llmgw-route': none,
    ...headers,
  });
  res.end(text);
}

function sendError(res: ServerResponse, e: unknown, headers: Record<string, string> = {}, api?: ClientApi): number {
  const r = errorReply(e);
  const extra: Record<string, string> = { ...r.headers, ...headers };
  // A body the client is still sending is not read: close the connection so it cannot be mistaken
  // for the next request.
  if (r.status === 413 || r.status === 408) extra.connection = 'close';
  sendJson(res, r.status, api === undefined ? r.body : api.errorBody({ status: r.status, ...r.body.error }), extra);
  return r.status;
}

// The gateway's routes, built once: a table of closures made for every request cost it microseconds.
const routes: Readonly<Record<string, Route>> = {
  '/health': { method: 'GET', run: (ctx, _req, res) => health(ctx, res) },
  '/ready': { method: 'GET', run: (ctx, _req, res) => ready(ctx, res) },
  '/metrics': { method: 'GET', run: (ctx, _req, res) => scrape(ctx, res) },
  '/debug/receipts': { method: 'GET', run: receipts },
  '/debug/queues': { method: 'GET', run: queues },
  '/v1/models': { method: 'GET', run: models },
  '/v1/chat/completions': { method: 'POST', run: (ctx, req, res) => generate(ctx, 'chat', req, res) },
  '/v1/completions': { method: 'POST', run: (ctx, req, res) => generate(ctx, 'completions', req, res) },
  '/v1/responses': { method: 'POST', run: (ctx, req, res) => generate(ctx, 'chat', req, res, responsesRoute), api: responsesApi },
  '/v1/messages': { method: 'POST', run: (ctx, req, res) => generate(ctx, 'chat', req, res, messagesRoute), api: messagesApi },
  '/v1/messages/count_tokens': { method: 'POST', run: countTokens, api: messagesApi },
};

interface Route {
  readonly method: string;
  readonly run: (ctx: Ctx, req: IncomingMessage, res: ServerResponse) => Promise<void> | void;
  /** The client protocol whose error shape this route answers in (default: OpenAI's). */
  readonly api?: ClientApi;
}

// GET and DELETE /v1/responses/{id}, the one route with a parameter in its path.
const storedPrefix = '/v1/responses/';
function storedRoute(path: string, method: string): Route {
  const id = decodeURIComponent(path.slice(storedPrefix.length));
  return {
    method: method === 'DELETE' ? 'DELETE' : 'GET',
    run: async (ctx, req, res) => {
      const caller = ctx.authenticate(req.headers.authorization);
      sendJson(res, 200, method === 'DELETE' ? await deleteStoredResponse(ctx.responses, caller.name, id) : await storedResponse(ctx.responses, caller.name, id));
    },
  };
}

async function handle(ctx: Ctx, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = req.url ?? '/';
  const q = url.indexOf('?');
  const path = q < 0 ? url : url.slice(0, q);
  const method = req.method ?? 'GET';
  if (path.startsWith('/debug/') && ctx.debug?.handle(req, res, path) === true) return;
  if (path.startsWith(adminPrefix)) {
    try {
      await handleAdmin({ admin: ctx.o.store, authenticate: ctx.authenticate, bodyTimeoutMs: ctx.o.config.bodyTimeoutMs }, req, res);
    } catch (e) {
      if (!res.headersSent) sendError(res, e);
      else res.destroy();
    }
    return;
  }
  const view = path.startsWith('/llmgw/') ? ctx.o.views?.[path.slice('/llmgw/'.length)] : undefined;
  const r: Route | undefined =
    view !== undefined
      ? { method: 'GET', run: (c: Ctx, q: IncomingMessage, s: ServerResponse) => showView(c, q, s, view) }
      : Object.hasOwn(routes, path)
        ? routes[path]
        : path.startsWith(storedPrefix)
          ? storedRoute(path, method)
          : undefined;
  try {
    if (r === undefined) {
      throw new LlmgwError(
        'LLMGW_NOT_FOUND',
        `no route ${method} ${path}; the gateway serves /v1/chat/completions, /v1/completions, /v1/responses, /v1/messages, /v1/models, /health, /ready, /metrics, /debug/receipts, /debug/queues`,
      );
    }
    if (r.method !== method) throw new LlmgwError('LLMGW_METHOD', `${path} takes ${r.method}, not ${method}`);
    await r.run(ctx, req, res);
  } catch (e) {
    if (!res.headersSent) sendError(res, e, {}, r?.api);
    else res.destroy();
  }
}

function readyCounts(ctx: Ctx): Record<string, number> {
  const ready: Record<string, number> = {};
  for (const m of ctx.o.directory.models()) ready[m] = ctx.o.directory.ready(m).length;
  return ready;
}

// Liveness: the gateway process answers. Whether it can serve is /ready's question.
function health(ctx: Ctx, res: ServerResponse): void {
  sendJson(res, 200, { status: 'ok', ready: readyCounts(ctx) });
}

// For a load balancer: 200 only when every model has a replica to send a request to, so a
// gateway that just started (engines still loading) or lost a model gets no traffic.
// A model whose tokenizer is still loading is not ready either: its requests would be routed by load
// alone until it is (6-11 s after a restart, while /ready already said ready).
function ready(ctx: Ctx, res: ServerResponse): void {
  const counts = readyCounts(ctx);
  const waiting = Object.keys(counts).filter((m) => counts[m] === 0);
  const warming = Object.keys(counts).filter((m) => ctx.tokenizerState(m) === 'loading');
  const status = Object.keys(counts).length === 0 ? 'no models' : waiting.length > 0 ? 'waiting' : warming.length > 0 ? 'warming' : 'ready';
  sendJson(res, status === 'ready' ? 200 : 503, { status, ready: counts, waiting, warming });
}

async function scrape(ctx: Ctx, res: ServerResponse): Promise<void> {
  const text = await ctx.o.registry.metrics();
  res.writeHead(200, { 'content-type': ctx.o.registry.contentType, 'x-llmgw-replica': none, 'x-llmgw-route': none });
  res.end(text);
}

// Why a request went where it went, by the x-request-id it was answered with; without an id, the newest.
function receipts(ctx: Ctx, req: IncomingMessage, res: ServerResponse): void {
  // The other replicas' loads and caches are the operator's business, as the rest of /debug/ is.
  const caller = ctx.authenticate(req.headers.authorization);
  if (!caller.admin) throw new LlmgwError('LLMGW_FORBIDDEN', `key "${caller.name}" may not read /debug/receipts; use a key with admin: true in gateway.api_keys`);
  const id = new URL(req.url ?? '/', 'http://gateway').searchParams.get('id');
  if (id === null) {
    sendJson(res, 200, { object: 'list', data: ctx.receipts.recent(100) });
    return;
  }
  const r = ctx.receipts.get(id);
  if (r === undefined) throw new LlmgwError('LLMGW_NOT_FOUND', `no receipt for request ${JSON.stringify(id)}; the gateway keeps the last ${receiptsKept} (see x-request-id on a response)`);
  sendJson(res, 200, r);
}

// Each model's admission queue: depth by class, bytes, who waits; the operator's business, as /debug/ is.
function queues(ctx: Ctx, req: IncomingMessage, res: ServerResponse): void {
  const caller = ctx.authenticate(req.headers.authorization);
  if (!caller.admin) throw new LlmgwError('LLMGW_FORBIDDEN', `key "${caller.name}" may not read /debug/queues; use a key with admin: true in gateway.api_keys`);
  sendJson(res, 200, { object: 'list', enabled: ctx.o.config.admission.enabled, data: ctx.admission.view() });
}

// What each ready replica holds; a replica that left the directory is no longer reported.
function residentNow(d: ReplicaDirectory, adapters: AdapterResidency | undefined): ReadonlyMap<string, readonly string[]> {
  const ready = new Set([...d.models(), ...adaptersOf(d).map((a) => a.name)].flatMap((m) => d.ready(m).map((r) => r.id)));
  return new Map([...(adapters?.resident() ?? [])].filter(([id]) => ready.has(id)));
}

function adaptersOf(d: ReplicaDirectory): readonly { readonly name: string; readonly base: string }[] {
  return listsAdapters(d) ? d.adapters() : [];
}

// The cluster's nodes, addresses and placement are an operator's business: an admin key, as /debug/.
function showView(ctx: Ctx, req: IncomingMessage, res: ServerResponse, view: () => unknown): void {
  const caller = ctx.authenticate(req.headers.authorization);
  if (!caller.admin) throw new LlmgwError('LLMGW_FORBIDDEN', `key "${caller.name}" may not read ${req.url ?? '/llmgw/'}; use a key with admin: true in gateway.api_keys`);
  sendJson(res, 200, view());
}

function models(ctx: Ctx, req: IncomingMessage, res: ServerResponse): void {
  ctx.authenticate(req.headers.authorization);
  const created = Math.floor(Date.now() / 1000);
  // As vLLM lists them: a base model is its own root, an adapter names its base as parent.
  const data = [
    ...ctx.o.directory.models().map((id) => ({ id, object: 'model', created, owned_by: 'llmgw', root: id, parent: null })),
    ...adaptersOf(ctx.o.directory).map((a) => ({ id: a.name, object: 'model', created, owned_by: 'llmgw', root: a.base, parent: a.base })),
  ];
  sendJson(res, 200, { object: 'list', data });
}

// Unknown models and adapters get one 404 that lists what is served, so the client can correct itself.
function unknownModel(model: string, known: readonly string[], adapters: readonly { readonly name: string; readonly base: string }[]): LlmgwError {
  const quoted = (xs: readonly string[]): string => xs.map((m) => `"${m}"`).join(', ');
  const adapterList = adapters.length === 0 ? '' : `; adapters ${adapters.map((a) => `"${a.name}" (of "${a.base}")`).join(', ')}`;
  return new LlmgwError('LLMGW_UNKNOWN_MODEL', `model "${model}" is not served here (have models ${quoted(known)}${adapterList}); see GET /v1/models`);
}

// Waits for an adapter load the request joined; a client that leaves stops waiting, not the load,
// which other requests may share.
async function adapterReady(ready: Promise<void>, signal: AbortSignal): Promise<void> {
  signal.throwIfAborted();
  let onAbort: (() => void) | undefined;
  try {
    await new Promise<void>((resolve, reject) => {
      onAbort = () => reject(signal.reason);
      signal.addEventListener('abort', onAbort, { once: true });
      ready.then(resolve, reject);
    });
  } finally {
    if (onAbort !== undefined) signal.removeEventListener('abort', onAbort);
  }
}

// The body for one replica: an adapter some engines name differently (SGLang's lora_path, llama.cpp's
// lora list) gets its engine's fields over the client's and the gateway's (`added`); an engine that
// schedules by priority gets the request's class as its integer, and one that does not never sees a
// `priority` (vLLM without --scheduling-policy priority refuses any but 0); everything else goes as
// forwardedBody wrote it.
function bodyFor(
  target: ReplicaView,
  model: string,
  body: Readonly<Record<string, unknown>>,
  added: Readonly<Record<string, unknown>>,
  plain: Buffer | string,
  priority: PriorityClass,
): Buffer | string {
  const fields = {
    ...adapterRoute(target, model)?.requestFields,
    ...(target.schedulesByPriority === true ? { priority: enginePriorityOf(priority) } : Object.hasOwn(body, 'priority') ? { priority: undefined } : {}),
  };
  return Object.keys(fields).length === 0 ? plain : JSON.stringify({ ...body, ...added, ...fields });
}

// A routed request whose ticket gives its room back to admission, and whose receipt says how long it
// waited in the admission queue and why.
function withAdmission(r: Routed, permit: Permit | undefined, priority: PriorityClass): Routed {
  if (permit === undefined) return r;
  const admission = { priority, queuedMs: Math.round(permit.waitedMs), ...(permit.why === undefined ? {} : { why: permit.why }) };
  return { ...r, ticket: permit.watch(r.ticket, r.replica.id), receipt: { ...r.receipt, admission } };
}

// Upstream answers that mean the gateway's own setup is wrong, not the client's request.
function upstreamFailure(replica: string, status: number): UpstreamError {
  const why =
    status === 401 || status === 403
      ? `refused the gateway's engine key (status ${status}); the agent and the engine disagree on VLLM_API_KEY`
      : `answered status ${status}`;
  return new UpstreamError('LLMGW_UPSTREAM', replica, `replica ${replica} ${why}`, { status });
}

// An answer longer than this is not kept to prepare the next turn from: an engine's SSE event
// carries one token in about 200 characters, so this is an answer of some 20k tokens.
const maxAnswerChars = 4 * 1024 * 1024;

// Whether this chat's answer is kept to prepare its next turn; a chat too short to be worth it is
// counted as such, once, when its answer is on its way.
function answersKept(ctx: Ctx, g: GenerationRequest, routed: Routed): boolean {
  if (g.endpoint !== 'chat') return false;
  const how = ctx.router.turnPreparation(routed.promptTokens);
  if (how === 'short') ctx.metrics.turnsPrepared.inc({ model: g.model, outcome: 'short' });
  return how === 'prepare';
}

// The conversation's next turn, made ready in the pool while its user reads this answer. In the
// background: the client's answer is already on its way, and a failure costs only that head start.
function prepareNextTurn(ctx: Ctx, g: GenerationRequest, replica: ReplicaView, body: Uint8Array, answer: Answer): void {
  void ctx.router.answered(g, replica, { body, answer }).catch((e: unknown) => ctx.log.warn({ err: e }, 'gateway.prepare_failed'));
}

// A client protocol served as a chat: how its request becomes one (apis/), for its caller.
interface ApiRoute {
  readonly api: ClientApi;
  begin(ctx: Ctx, body: unknown, caller: Caller): Promise<ApiTurn> | ApiTurn;
}

const responsesRoute: ApiRoute = {
  api: responsesApi,
  begin: (ctx, body, caller) => responsesTurn(body, { store: ctx.responses, owner: caller.name, retentionMs: ctx.o.config.responses.retentionS * 1000 }),
};
const messagesRoute: ApiRoute = { api: messagesApi, begin: (_ctx, body) => messagesTurn(body) };

async function generate(ctx: Ctx, endpoint: Endpoint, req: IncomingMessage, res: ServerResponse, route?: ApiRoute): Promise<void> {
  const t0 = performance.now();
  const reqId = randomUUID();
  const cfg = ctx.o.config;
  let routed: Routed | undefined;
  let status = 0;
  let caller: Caller | undefined;
  let usage: Usage | undefined;
  let response: ResponseFacts | undefined;
  let g: GenerationRequest | undefined;
  let sentAt = 0;
  let firstByteMs: number | undefined;
  let hold: TokenHold | undefined;
  let sent: TokenHold | undefined;
  let admitted: Admitted | undefined;
  let ttftMs: number | undefined;
  // The request's one ledger row: written before the answer's last byte, or at its end when it failed.
  let ledgered: Promise<void> | undefined;
  const ledger = (): Promise<void> =>
    (ledgered ??= ctx.accounting
      .finish(caller, g?.model ?? '', sent === undefined ? undefined : admitted, {
        requestId: reqId,
        endpoint: route?.api.name ?? endpoint,
        replica: routed?.replica.id ?? none,
        tier: routed?.tier ?? none,
        status,
        promptTokens: usage?.promptTokens ?? 0,
        cachedTokens: usage?.cachedTokens ?? 0,
        completionTokens: usage?.completionTokens ?? 0,
        // An engine that refused (4xx) did no work; one cut off mid-answer did some, and its hold stays charged.
        usageReported: usage !== undefined || (status >= 400 && status < 500 && status !== 499),
        ttftMs,
        totalMs: performance.now() - t0,
      })
      .catch((e: unknown) => ctx.log.error({ reqId, err: e }, 'gateway.ledger_failed')));
  let permit: Permit | undefined;
  // The client leaving aborts whatever the engine is doing for it.
  const gone = new AbortController();
  const onClose = (): void => {
    if (!res.writableFinished) gone.abort();
  };
  res.on('close', onClose);
  const span = ctx.tracing.request(route?.api.name ?? (endpoint === 'chat' ? 'chat' : 'text_completion'));
  let turn: ApiTurn | undefined;
  try {
    const authorization = route === undefined ? req.headers.authorization : route.api.authorization(req.headers);
    caller = await ctx.tracing.phase('auth', span, () => ctx.authenticate(authorization));
    let body = await readBody(req, cfg.maxBodyBytes, cfg.bodyTimeoutMs);
    if (route !== undefined) {
      turn = await route.begin(ctx, parseRequestJson(body, cfg.maxJsonDepth), caller);
      // From here it is a chat like any other; a long one goes to shared memory as a client's would.
      const chat = Buffer.from(JSON.stringify(turn.chat));
      body = concatBody([chat], chat.length);
    }
    g = await readRequest(endpoint, body, ctx.policy, { pool: ctx.parsePool, bodies: ctx.bodies, parsed: (w) => ctx.metrics.bodyParses.inc(w) });
    const model = g.model;
    const known = ctx.o.directory.models();
    const adapters = adaptersOf(ctx.o.directory);
    if (!known.includes(model) && !adapters.some((a) => a.name === model)) throw unknownModel(model, known, adapters);
    admitted = await ctx.accounting.admit(caller, model, boundOf(g, body.length));
    hold = admitted.hold;
    const priority = requestPriority(caller.priority, req.headers['x-llmgw-priority'], g.body.priority);
    const maxWaitMs = maxWaitOf(req.headers, cfg.admission.maxWaitMs);
    permit = await ctx.admission.admit({
      model,
      tenant: caller.tenant,
      weight: caller.weight,
      priority,
      // Bytes over 4 is close enough to a prompt's tokens to share capacity by, and costs nothing.
      costTokens: g.promptTokenIds?.length ?? Math.ceil(body.length / 4),
      sizeBytes: body.length,
      maxWaitMs,
      signal: gone.signal,
    });
    if (permit.queued) ctx.log.info({ reqId, model, priority, waitedMs: Math.round(permit.waitedMs) }, 'gateway.admitted');
    let replicas = ctx.o.directory.ready(model);
    forgetRestarted(ctx, replicas);
    // The deadline admission bounded its wait by also bounds a wait for a busy cache holder.
    const deadlineMs = Math.max(0, maxWaitMs - permit.waitedMs);
    const hideUsage = g.stream && !g.streamUsage;
    const added = {
      ...(hideUsage ? { stream_options: { ...streamOptionsOf(g.body), include_usage: true } } : {}),
      // A quota key's request without a limit of its own may write only what the key has left.
      ...(admitted.impose === undefined ? {} : { max_tokens: admitted.impose }),
    };
    const upstreamBody = forwardedBody(body, g.body, added);
    const path = endpoint === 'chat' ? '/v1/chat/completions' : '/v1/completions';
    let up: UpstreamResponse | undefined;
    for (let attempt = 0; up === undefined; attempt++) {
      if (replicas.length === 0) {
        throw new LlmgwError('LLMGW_NO_REPLICA', `model "${model}" has no ready replica; see the agent's log or GET /health`);
      }
      const r0 = performance.now();
      const request = g;
      // Routing chooses by cache among the replicas admission let this request's class onto.
      const candidates = permit.among(replicas);
      routed = await ctx.tracing.phase('route', span, async (s) => {
        const r = await ctx.router.route(request, candidates, { signal: gone.signal, body, deadlineMs });
        s?.setAttributes({ [spanAttr.tier]: r.tier, [spanAttr.replica]: r.replica.id });
        return withAdmission(r, permit, priority);
      });
      observeRouting(ctx, routed, r0);
      ctx.receipts.add(reqId, routed.receipt);
      const target = routed.replica;
      sentAt = performance.now();
      try {
        if (routed.adapter !== undefined) await adapterReady(routed.adapter.ready, gone.signal);
        const body = bodyFor(target, model, g.body, added, upstreamBody, priority);
        const sent = await ctx.tracing.phase('upstream', span, (s) => {
          s?.setAttributes({ [spanAttr.replica]: target.id, [spanAttr.serverAddress]: target.url.hostname, [spanAttr.serverPort]: portOf(target.url) });
          return sendUpstream({ replica: target.id, url: target.url, apiKey: target.apiKey }, path, body, {
            clients: ctx.upstream,
            signal: gone.signal,
            headersTimeoutMs: cfg.upstream.headersTimeoutMs,
            idleTimeoutMs: cfg.upstream.idleTimeoutMs,
          });
        });
        // A 5xx, or a refusal of the engine key (a replica restarted with a key we have not seen
        // yet): the engine did not run the request, so another replica may.
        if (sent.status >= 500 || sent.status === 401 || sent.status === 403) {
          await sent.body.dump();
          throw upstreamFailure(target.id, sent.status);
        }
        up = sent;
      } catch (e) {
        routed.ticket.done();
        const again = attempt === 0 && !gone.signal.aborted && (isRetryable(e) || (e instanceof UpstreamError && e.status !== undefined));
        if (!again) throw e;
        ctx.metrics.retries.inc({ reason: isRetryable(e) ? 'connect' : 'status' });
        ctx.log.warn({ reqId, replica: target.id, err: e }, 'gateway.retry');
        // Another replica if there is one; a lone replica gets its one retry too (a keep-alive
        // connection the engine had just closed fails the same way as a dead engine).
        const others = replicas.filter((r) => r.id !== target.id);
        if (others.length > 0) replicas = others;
      }
    }
    if (routed === undefined) throw new LlmgwError('LLMGW_NO_REPLICA', `model "${model}": routing chose nothing`);
    // From here the engine runs the request: its hold is settled with the usage, or kept whole when none comes.
    sent = hold;
    hold = undefined;
    const where = { 'x-llmgw-replica': routed.replica.id, 'x-llmgw-route': routed.tier, 'x-request-id': reqId, 'x-llmgw-receipt': compactReceipt(routed.receipt) };
    const ticket = routed.ticket;
    const streaming = ctx.tracing.start('stream', span);
    try {
      if (up.status !== 200 || !g.stream) {
        const engineText = await answerText(up, routed.replica.id);
        ticket.firstByte();
        ttftMs = performance.now() - t0;
        ctx.metrics.ttftSeconds.observe({ route: routed.tier }, ttftMs / 1000);
        if (up.status === 200) {
          const answer = safeJson(engineText);
          usage = usageOf(answer);
          response = responseOf(answer);
        }
        if (up.status === 200 && answersKept(ctx, g, routed)) prepareNextTurn(ctx, g, routed.replica, body, { format: 'json', text: engineText });
        const text = turn === undefined || route === undefined ? engineText : JSON.stringify(await apiAnswer(route.api, turn, up.status, engineText));
        status = up.status;
        await ledger();
        res.writeHead(up.status, { 'content-type': turn === undefined ? up.contentType : 'application/json', 'content-length': Buffer.byteLength(text), ...where });
        res.end(text);
        return;
      }
      status = 200;
      res.writeHead(200, { 'content-type': turn === undefined ? up.contentType : 'text/event-stream', 'cache-control': 'no-cache', ...where });
      res.flushHeaders();
      const tier = routed.tier;
      const splice = spliceFor(ctx, endpoint, { ...g.body, ...added });
      let tail = '';
      const outcome = await pipeEvents(up, res, {
        replica: routed.replica.id,
        maxEventChars: cfg.upstream.maxEventBytes,
        hideUsage,
        translate: turn,
        keepAnswerChars: answersKept(ctx, g, routed) ? maxAnswerChars : 0,
        splice,
        holdDone: true,
        onFirstByte: () => {
          firstByteMs = performance.now() - sentAt;
          ticket.firstByte();
          ttftMs = performance.now() - t0;
          ctx.metrics.ttftSeconds.observe({ route: tier }, ttftMs / 1000);
        },
      });
      usage = outcome.usage;
      response = outcome.response;
      learn(ctx, routed, usage, firstByteMs);
      // A client that left mid-stream is a 499 like one that left before the headers.
      if (gone.signal.aborted) status = 499;
      else if (outcome.failed !== undefined) {
        failed(streaming, outcome.failed);
        ctx.log.warn({ reqId, replica: routed.replica.id, err: outcome.failed }, 'gateway.stream_failed');
        const m = await migrateStream(ctx, { reqId, endpoint, g, req, res, span, gone: gone.signal, t0, hideUsage, path, splice, translate: turn, routed, broke: outcome, priority });
        status = m.status;
        if (m.usage !== undefined) usage = m.usage;
        tail = m.tail;
      } else {
        if (outcome.answer !== undefined) prepareNextTurn(ctx, g, routed.replica, body, { format: 'sse', text: outcome.answer });
        tail = outcome.tail;
      }
      // The client's closing events (a translated protocol's) are part of the answer's last bytes.
      if (status === 200 && turn !== undefined) tail += await turn.end();
      await ledger();
      res.end(tail);
    } finally {
      streaming?.end();
      ticket.done();
    }
  } catch (e) {
    routed?.ticket.done();
    const headers: Record<string, string> = routed === undefined ? {} : { 'x-llmgw-replica': routed.replica.id, 'x-llmgw-route': routed.tier };
    if (gone.signal.aborted) status = 499;
    else if (!res.headersSent) status = sendError(res, e, { ...headers, 'x-request-id': reqId }, route?.api);
    else res.destroy();
    if (status >= 500 || status === 0) ctx.log.warn({ reqId, err: e }, 'gateway.request_failed');
  } finally {
    sent?.settle(usage === undefined ? sent.tokens : usage.promptTokens + usage.completionTokens);
    // Not sent to an engine (a refusal, no replica, an engine that did not start it): nothing was spent.
    if (hold !== undefined && admitted !== undefined) ctx.accounting.release(admitted);
    permit?.done();
    res.off('close', onClose);
    if (gone.signal.aborted && status === 0) status = 499;
    // A failed request's row does not hold its answer back: there is no answer to hold.
    void ledger();
    account(ctx, { reqId, endpoint: route?.api.name ?? endpoint, status, routed, caller, usage, t0, model: g?.model });
    endRequest(span, {
      [spanAttr.model]: g?.model,
      [spanAttr.status]: status,
      [spanAttr.tier]: routed?.tier,
      [spanAttr.replica]: routed?.replica.id,
      [spanAttr.predictedCachedTokens]: routed?.predictedCachedTokens,
      [spanAttr.inputTokens]: usage?.promptTokens,
      [spanAttr.outputTokens]: usage?.completionTokens,
      [spanAttr.cachedTokens]: usage?.cachedTokens,
      [spanAttr.maxTokens]: maxTokensOf(g),
      [spanAttr.responseId]: response?.id,
      [spanAttr.responseModel]: response?.model,
      [spanAttr.finishReasons]: response?.finishReasons,
      ...hostOf(req),
    });
  }
}

// An engine's answer in a client protocol's shape: a chat completion translated, a failure as
// that protocol's error carrying the engine's message.
async function apiAnswer(api: ClientApi, turn: ApiTurn, status: number, text: string): Promise<unknown> {
  const parsed = safeJson(text);
  if (status === 200) return turn.answer(parsed);
  const err: unknown = typeof parsed === 'object' && parsed !== null && 'error' in parsed ? parsed.error : undefined;
  const message = typeof err === 'object' && err !== null && 'message' in err && typeof err.message === 'string' ? err.message : text.slice(0, 500);
  return api.errorBody({ status, type: status < 500 ? 'invalid_request_error' : 'server_error', message, param: null, code: `upstream_${status}` });
}

// POST /v1/messages/count_tokens: the engine's own count of the chat the request becomes, from
// its /tokenize (what it would prefill, special tokens and tool schemas included).
async function countTokens(ctx: Ctx, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const cfg = ctx.o.config;
  ctx.authenticate(messagesApi.authorization(req.headers));
  const body = await readBody(req, cfg.maxBodyBytes, cfg.bodyTimeoutMs);
  const chat = messagesChat(parseRequestJson(body, cfg.maxJsonDepth), { counting: true });
  const model = String(chat.model);
  const known = ctx.o.directory.models();
  const adapters = adaptersOf(ctx.o.directory);
  if (!known.includes(model) && !adapters.some((a) => a.name === model)) throw unknownModel(model, known, adapters);
  const target = ctx.o.directory.ready(model)[0];
  if (target === undefined) throw new LlmgwError('LLMGW_NO_REPLICA', `model "${model}" has no ready replica to count tokens with; see the agent's log or GET /health`);
  const signal = AbortSignal.timeout(cfg.upstream.headersTimeoutMs);
  const up = await sendUpstream({ replica: target.id, url: target.url, apiKey: target.apiKey }, '/tokenize', JSON.stringify({ ...chat, add_generation_prompt: true }), {
    clients: ctx.upstream,
    signal,
    headersTimeoutMs: cfg.upstream.headersTimeoutMs,
    idleTimeoutMs: cfg.upstream.idleTimeoutMs,
  });
  const answer = safeJson(await up.body.text());
  if (up.status !== 200) throw upstreamFailure(target.id, up.status);
  const count = typeof answer === 'object' && answer !== null && 'count' in answer ? answer.count : undefined;
  if (typeof count !== 'number') throw new UpstreamError('LLMGW_UPSTREAM', target.id, `replica ${target.id} answered /tokenize without a token count`);
  sendJson(res, 200, { input_tokens: count }, { 'x-llmgw-replica': target.id });
}

// What records a stream for a migration: none when migrations are off or the request's answer could
// not be continued exactly (then nothing is kept while it streams).
function spliceFor(ctx: Ctx, endpoint: Endpoint, forwarded: Readonly<Record<string, unknown>>): StreamSplice | undefined {
  const max = ctx.o.config.upstream.maxMigrations;
  return max > 0 && requestRefusal(endpoint, forwarded) === undefined ? new StreamSplice(endpoint, forwarded, max) : undefined;
}

// The client's own deadline, when its SDK states it (OpenAI's send X-Stainless-Timeout, in seconds):
// past it the client has given up, and a continuation would only spend an engine's time.
function clientDeadlineAt(req: IncomingMessage, t0: number): number {
  const s = Number(req.headers['x-stainless-timeout']);
  return s > 0 ? t0 + s * 1000 : Number.POSITIVE_INFINITY;
}

interface Broken {
  readonly failed: Error | undefined;
  readonly errorEvent: string | undefined;
}

/**
 * A stream whose engine broke off mid-answer: continued on the ready replica that best holds prompt
 * plus answer so far, for as many hops as gateway.upstream.max_migrations allows, or ended with the
 * error event. Returns the request's status, the usage the client is charged and the stream's last
 * bytes, which wait for the ledger's row.
 */
async function migrateStream(
  ctx: Ctx,
  a: {
    reqId: string;
    endpoint: Endpoint;
    g: GenerationRequest;
    req: IncomingMessage;
    res: ServerResponse;
    span: Span | undefined;
    gone: AbortSignal;
    t0: number;
    hideUsage: boolean;
    path: string;
    splice: StreamSplice | undefined;
    /** The client's protocol, when it is not the engine's chat (Responses, Messages). */
    translate: EventTranslator | undefined;
    routed: Routed;
    broke: Broken;
    /** The class the request was admitted as; its continuation is scheduled as the same. */
    priority: PriorityClass;
  },
): Promise<{ status: number; usage: Usage | undefined; tail: string }> {
  const deadlineAt = clientDeadlineAt(a.req, a.t0);
  const broken = new Set<string>();
  const hops: HopReceipt[] = [];
  let last = a.routed;
  let broke = a.broke;
  let fromToken = 0;
  for (;;) {
    const reason = broke.errorEvent !== undefined ? 'error-event' : breakReasonOf(broke.failed);
    broken.add(incarnation(last.replica));
    hops.push({ replica: last.replica.id, tier: last.tier, fromToken, broke: reason });
    const next =
      reason === 'bound'
        ? { refused: 'bound' as const }
        : a.splice === undefined
          ? { refused: requestRefusal(a.endpoint, a.g.body) ?? ('limit' as const) }
          : await continueOn(ctx, a, broken, deadlineAt);
    if (next === 'finished') {
      // The client already had the end of the answer: only the stream's end was lost.
      ctx.migrations.broke(reason, 'finished');
      return { status: 200, usage: undefined, tail: a.translate === undefined ? 'data: [DONE]\n\n' : '' };
    }
    if ('refused' in next) {
      ctx.migrations.broke(reason, next.refused);
      ctx.log.warn({ reqId: a.reqId, replica: last.replica.id, reason, refused: next.refused }, 'gateway.stream_not_migrated');
      if (hops.length > 1) ctx.receipts.add(a.reqId, { ...last.receipt, hops });
      // Our own account of the failure names the bound or the break; an engine's words stay in the log.
      const ours = broke.failed instanceof UpstreamError ? broke.failed : undefined;
      const message = `the engine failed while answering and the answer could not be continued (${next.refused}); the answer is incomplete${ours === undefined ? '' : ` (${ours.message})`}`;
      return { status: 502, usage: undefined, tail: a.translate?.failure(message) ?? broke.errorEvent ?? streamErrorEvent(message, ours?.code) };
    }
    ctx.migrations.broke(reason, 'resumed');
    last = next.routed;
    fromToken = next.fromToken;
    ctx.receipts.add(a.reqId, { ...last.receipt, hops: [...hops, { replica: last.replica.id, tier: last.tier, fromToken: next.fromToken }] });
    ctx.log.info({ reqId: a.reqId, from: hops.at(-1)?.replica, to: last.replica.id, tier: last.tier, reason, hop: hops.length, fromToken: next.fromToken }, 'gateway.stream_migrated');
    const streaming = ctx.tracing.start('stream', a.span);
    streaming?.setAttributes({ [spanAttr.replica]: last.replica.id, [spanAttr.hop]: hops.length });
    const sentAt = performance.now();
    let firstByteMs: number | undefined;
    const ticket = last.ticket;
    try {
      const outcome = await pipeEvents(next.up, a.res, {
        replica: last.replica.id,
        maxEventChars: ctx.o.config.upstream.maxEventBytes,
        hideUsage: a.hideUsage,
        splice: a.splice,
        translate: a.translate,
        holdDone: true,
        onFirstByte: () => {
          firstByteMs = performance.now() - sentAt;
          ticket.firstByte();
        },
      });
      learn(ctx, last, outcome.usage, firstByteMs);
      if (outcome.usage !== undefined) ctx.migrations.reprefilled(outcome.usage.promptTokens - (outcome.usage.cachedTokens ?? 0));
      const usage = outcome.usage === undefined ? undefined : a.splice?.usage(outcome.usage);
      if (a.gone.aborted) return { status: 499, usage, tail: '' };
      if (outcome.failed === undefined) return { status: 200, usage, tail: outcome.tail };
      failed(streaming, outcome.failed);
      ctx.log.warn({ reqId: a.reqId, replica: last.replica.id, err: outcome.failed, hop: hops.length }, 'gateway.stream_failed');
      broke = outcome;
    } finally {
      streaming?.end();
      ticket.done();
    }
  }
}

// A replica as it runs now: one that broke a stream and has since restarted may take it again.
const incarnation = (r: ReplicaView): string => `${r.id}#${r.generation}`;

// The next replica of a broken stream: the continuation routed like any request (its prompt is the
// original plus the answer so far, so the precise tier finds who caches most of it) among the ready
// replicas that have not broken this stream (in their present run), each tried once.
async function continueOn(
  ctx: Ctx,
  a: {
    reqId: string;
    endpoint: Endpoint;
    g: GenerationRequest;
    span: Span | undefined;
    gone: AbortSignal;
    path: string;
    splice: StreamSplice | undefined;
    priority: PriorityClass;
  },
  broken: Set<string>,
  deadlineAt: number,
): Promise<'finished' | { refused: Refusal } | { routed: Routed; up: UpstreamResponse; fromToken: number }> {
  const splice = a.splice;
  if (splice === undefined) return { refused: 'limit' };
  if (splice.finished) return 'finished';
  if (performance.now() >= deadlineAt) return { refused: 'deadline' };
  const c = splice.continuation();
  if ('refused' in c) return c;
  const text = JSON.stringify(c.body);
  const raw = Buffer.from(text);
  const model = ctx.o.directory.ready(a.g.model)[0];
  if (c.seam !== undefined && model !== undefined) {
    const seam = await ctx.seam(a.g.model, ctx.router.tokenTarget(model), { original: Buffer.from(JSON.stringify(c.seam.original)), continuation: raw, text: c.seam.text });
    if (seam === 'inexact') return { refused: 'template' };
  }
  const request = parseGenerationRequest(a.endpoint, raw, ctx.policy);
  const cfg = ctx.o.config;
  for (;;) {
    const replicas = ctx.o.directory.ready(a.g.model).filter((r) => !broken.has(incarnation(r)));
    if (replicas.length === 0) return { refused: 'no-replica' };
    const r0 = performance.now();
    const routed = await ctx.tracing.phase('route', a.span, async (s) => {
      const r = await ctx.router.route(request, replicas, { signal: a.gone, body: raw });
      s?.setAttributes({ [spanAttr.tier]: r.tier, [spanAttr.replica]: r.replica.id, [spanAttr.hop]: c.hop });
      return r;
    });
    observeRouting(ctx, routed, r0);
    const target = routed.replica;
    try {
      if (routed.adapter !== undefined) await adapterReady(routed.adapter.ready, a.gone);
      const sent = await ctx.tracing.phase('upstream', a.span, (s) => {
        s?.setAttributes({ [spanAttr.replica]: target.id, [spanAttr.hop]: c.hop });
        return sendUpstream({ replica: target.id, url: target.url, apiKey: target.apiKey }, a.path, bodyFor(target, a.g.model, c.body, {}, text, a.priority), {
          clients: ctx.upstream,
          signal: a.gone,
          headersTimeoutMs: cfg.upstream.headersTimeoutMs,
          idleTimeoutMs: cfg.upstream.idleTimeoutMs,
        });
      });
      if (sent.status === 200) return { routed, up: sent, fromToken: c.sentTokens };
      await sent.body.dump();
      // A refusal of the continuation itself (an engine without continue_final_message) would be
      // the same on every replica.
      if (sent.status >= 400 && sent.status < 500 && sent.status !== 401 && sent.status !== 403) {
        routed.ticket.done();
        return { refused: 'rejected' };
      }
      throw upstreamFailure(target.id, sent.status);
    } catch (e) {
      routed.ticket.done();
      if (a.gone.aborted) throw e;
      ctx.log.warn({ reqId: a.reqId, replica: target.id, err: e }, 'gateway.migration_send_failed');
      broken.add(incarnation(target));
    }
  }
}

// A streamed answer's first byte against the prefill it waited for teaches the cost model that
// replica's speed; a whole answer's time (not streamed) includes its decode and says nothing of it.
function learn(ctx: Ctx, routed: Routed, usage: Usage | undefined, firstByteMs: number | undefined): void {
  if (usage === undefined || firstByteMs === undefined) return;
  const chosen = routed.receipt.candidates.find((c) => c.replica === routed.replica.id);
  ctx.costs.observeFirstByte(
    routed.replica.id,
    { uncachedTokens: usage.promptTokens - (usage.cachedTokens ?? 0), aheadTokens: chosen?.queuedPrefillTokens ?? 0, ttfbMs: firstByteMs },
    routed.replica.prefillTokensPerS,
  );
}

// What a request may cost before it is sent. The prompt's bound is the body's size in bytes: a
// byte-level tokenizer never makes more tokens than bytes, and the JSON around each message is longer
// than the template's markers for it; 256 more covers a template's own system text.
function boundOf(g: GenerationRequest, bodyBytes: number): { promptTokens: number; completionTokens: number | undefined } {
  const promptTokens = g.promptTokenIds?.length ?? bodyBytes + 256;
  const b = g.body;
  const limit = [b.max_completion_tokens, b.max_tokens].find((v): v is number => typeof v === 'number');
  const n = Math.max(typeof b.n === 'number' ? b.n : 1, typeof b.best_of === 'number' ? b.best_of : 1);
  return { promptTokens, completionTokens: limit === undefined ? undefined : limit * n };
}

function maxTokensOf(g: GenerationRequest | undefined): number | undefined {
  const limit = g?.body.max_completion_tokens ?? g?.body.max_tokens;
  return typeof limit === 'number' ? limit : undefined;
}

const portOf = (u: URL): number => (u.port === '' ? (u.protocol === 'https:' ? 443 : 80) : Number(u.port));

// The address the client called, as the HTTP server conventions put it on the request's span.
function hostOf(req: IncomingMessage): Record<string, string | number> {
  const host = req.headers.host;
  if (host === undefined) return {};
  const u = URL.parse(`http://${host}/`);
  return u === null ? {} : { [spanAttr.serverAddress]: u.hostname, [spanAttr.serverPort]: portOf(u) };
}

function streamOptionsOf(body: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const so = body.stream_options;
  return typeof so === 'object' && so !== null && !Array.isArray(so) ? { ...so } : {};
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    // A non-JSON answer goes to the client as it is; it just has no usage to count.
    return undefined;
  }
}

function forgetRestarted(ctx: Ctx, replicas: readonly ReplicaView[]): void {
  for (const r of replicas) {
    const seen = ctx.generations.get(r.id);
    if (seen !== undefined && seen !== r.generation) {
      ctx.tree.forget(r.id);
      ctx.costs.forget(r.id);
    }
    ctx.generations.set(r.id, r.generation);
  }
}

function observeRouting(ctx: Ctx, routed: Routed, r0: number): void {
  const m = ctx.metrics;
  m.decisions.inc({ tier: routed.tier });
  m.routingSeconds.observe({ tier: routed.tier }, (performance.now() - r0) / 1000);
  const t = routed.trace;
  if (t.tokenizeMs !== undefined && t.tokenize !== undefined) {
    const outcome = t.tokenize === 'local' || t.tokenize === 'engine' || t.tokenize === 'cached' ? t.tokenize : 'failed';
    m.tokenizeSeconds.observe({ outcome }, t.tokenizeMs / 1000);
    if (outcome === 'failed') m.routingFallbacks.inc({ stage: 'tokenize', reason: t.tokenize });
  }
  if (t.score !== undefined && t.score !== 'ok') m.routingFallbacks.inc({ stage: 'score', reason: t.score });
  if (t.indexLookups !== undefined) m.indexLookups.observe(t.indexLookups);
}

function account(
  ctx: Ctx,
  a: { reqId: string; endpoint: Endpoint | ClientApi['name']; status: number; routed: Routed | undefined; caller: Caller | undefined; usage: Usage | undefined; t0: number; model: string | undefined },
): void {
  const tier = a.routed?.tier ?? none;
  const m = ctx.metrics;
  const tookMs = performance.now() - a.t0;
  m.requests.inc({ endpoint: a.endpoint, status: String(a.status), route: tier });
  m.requestSeconds.observe({ route: tier }, tookMs / 1000);
  const u = a.usage;
  if (u !== undefined && a.caller !== undefined) {
    m.keyTokens.inc({ key: a.caller.name, kind: 'prompt' }, u.promptTokens);
    m.keyTokens.inc({ key: a.caller.name, kind: 'completion' }, u.completionTokens);
  }
  if (u?.cachedTokens !== undefined && a.routed !== undefined) {
    const predicted = Math.min(a.routed.predictedCachedTokens, u.promptTokens);
    m.predictedCachedTokens.inc({ tier }, predicted);
    m.reportedCachedTokens.inc({ tier }, u.cachedTokens);
    m.predictionErrorTokens.observe({ tier }, u.cachedTokens - predicted);
  }
  ctx.log.info(
    {
      reqId: a.reqId,
      key: a.caller?.name,
      model: a.model,
      endpoint: a.endpoint,
      status: a.status,
      replica: a.routed?.replica.id,
      tier,
      cached: u?.cachedTokens,
      promptTokens: u?.promptTokens,
      tookMs: Math.round(tookMs),
      receipt: a.routed?.receipt,
    },
    'gateway.request',
  );
}
