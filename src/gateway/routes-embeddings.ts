// POST /v1/embeddings: checked as OpenAI checks it, admitted and accounted as a chat is (the key's
// models, limits and budget, a place in the admission queue by class, one ledger row), and sent to
// the least loaded ready replica that serves the model as an embedding model. There is no prefix to
// route by: an embedding's prompt is read once and its cache is of no use to the next request.
import { randomUUID } from 'node:crypto';
import type { Permit } from '../admission/index.js';
import { maxWaitOf, requestPriority } from '../admission/index.js';
import { LlmgwError, RequestError, UpstreamError } from '../errors/index.js';
import { parseEmbeddingRequest, parseRequestJson, type EmbeddingRequest } from '../limits/index.js';
import { boundedCount } from '../routing/index.js';
import type { ReplicaView } from '../routing/index.js';
import { answerText, isRetryable, usageOf } from '../upstream/index.js';
import type { Usage } from '../upstream/index.js';
import type { Admitted } from './accounting.js';
import type { Caller } from './auth.js';
import type { GatewayContext } from './context.js';
import { none, sendError } from './reply.js';
import { bodyFor, safeJson, sendToReplica, upstreamFailure } from './replica-send.js';
import type { Call, Route } from './route.js';
import { checkServed } from './served-models.js';

/** POST /v1/embeddings. */
export const embeddingsRoutes: readonly Route[] = [{ method: 'POST', path: '/v1/embeddings', auth: 'handler', body: 'request', admission: true, run: embed }];

// The routing tier an embedding is sent by, in the headers, the ledger and the metrics.
const tier = 'load';

// What one embeddings request filled in, for its ledger row and log line whichever step it reached.
interface Embedding {
  readonly reqId: string;
  readonly t0: number;
  status: number;
  caller?: Caller;
  model?: string;
  admitted?: Admitted;
  sent: boolean;
  permit?: Permit;
  replica?: string;
  usage?: Usage;
  ledgered?: Promise<void>;
}

async function embed(ctx: GatewayContext, call: Call): Promise<void> {
  const e: Embedding = { reqId: randomUUID(), t0: performance.now(), status: 0, sent: false };
  const gone = new AbortController();
  const onClose = (): void => {
    if (!call.res.writableFinished) gone.abort();
  };
  call.res.on('close', onClose);
  try {
    await run(ctx, call, e, gone.signal);
  } catch (err) {
    if (gone.signal.aborted) e.status = 499;
    else if (!call.res.headersSent) e.status = sendError(call.res, err, { 'x-request-id': e.reqId, 'x-llmgw-replica': e.replica ?? none, 'x-llmgw-route': e.replica === undefined ? none : tier });
    else call.res.destroy();
    if (e.status >= 500 || e.status === 0) ctx.log.warn({ reqId: e.reqId, err }, 'gateway.request_failed');
  } finally {
    call.res.off('close', onClose);
    await finish(ctx, e);
  }
}

async function run(ctx: GatewayContext, call: Call, e: Embedding, signal: AbortSignal): Promise<void> {
  const { req, res } = call;
  const cfg = ctx.o.config;
  const caller = ctx.authenticate(req.headers.authorization);
  e.caller = caller;
  const raw = await call.body();
  const r = parseEmbeddingRequest(parseRequestJson(raw, cfg.maxJsonDepth));
  e.model = r.model;
  checkServed(ctx.o.directory, r.model);
  const ready = ctx.o.directory.ready(r.model);
  let replicas = ready.filter((v) => v.embeds === true);
  if (ready.length > 0 && replicas.length === 0) {
    throw new RequestError('LLMGW_BAD_REQUEST', `model "${r.model}" is not an embedding model; send embeddings to a model whose profile says task: embed`, 'model');
  }
  const bound = promptBound(r);
  const admitted = await ctx.accounting.admit(caller, r.model, { promptTokens: bound, completionTokens: 0 });
  e.admitted = admitted;
  const priority = requestPriority(caller.priority, req.headers['x-llmgw-priority'], undefined);
  const permit = await ctx.admission.admit({
    model: r.model,
    tenant: caller.tenant,
    weight: caller.weight,
    priority,
    costTokens: bound,
    sizeBytes: raw.length,
    maxWaitMs: maxWaitOf(req.headers, cfg.admission.maxWaitMs),
    signal,
  });
  e.permit = permit;
  for (let attempt = 0; ; attempt++) {
    const target = leastLoaded(ctx, permit.among(replicas));
    if (target === undefined) throw new LlmgwError('LLMGW_NO_REPLICA', `model "${r.model}" has no ready embedding replica; see the agent's log or GET /health`);
    e.replica = target.id;
    const ticket = permit.watch(ctx.load.start(target.id, bound), target.id);
    try {
      e.sent = true;
      const up = await sendToReplica(ctx, target, '/v1/embeddings', bodyFor(target, r.model, r.body, {}, raw, priority), signal);
      if (up.status >= 500 || up.status === 401 || up.status === 403) {
        await up.body.dump();
        throw upstreamFailure(target.id, up.status);
      }
      const text = await answerText(up, target.id);
      ticket.firstByte();
      e.status = up.status;
      if (up.status === 200) e.usage = usageOf(safeJson(text));
      // As for a chat: the row is committed before the answer's last byte.
      await ledger(ctx, e);
      res.writeHead(up.status, { 'content-type': up.contentType, 'content-length': Buffer.byteLength(text), 'x-llmgw-replica': target.id, 'x-llmgw-route': tier, 'x-request-id': e.reqId });
      res.end(text);
      return;
    } catch (err) {
      // An engine that could not take it did no work: another replica may, once.
      const again = attempt === 0 && !signal.aborted && (isRetryable(err) || (err instanceof UpstreamError && err.status !== undefined));
      if (!again) throw err;
      e.sent = false;
      ctx.metrics.retries.inc({ reason: isRetryable(err) ? 'connect' : 'status' });
      const others = replicas.filter((v) => v.id !== target.id);
      if (others.length > 0) replicas = others;
    } finally {
      ticket.done();
    }
  }
}

// What the prompt may cost before the engine counts it: its token ids, and each text's bytes (a
// byte-level tokenizer makes no more tokens than bytes) plus a few special tokens.
function promptBound(r: EmbeddingRequest): number {
  return r.inputs.reduce((n, x) => n + ('ids' in x ? x.ids.length : Buffer.byteLength(x.text) + 4), 0);
}

// The replica with the fewest requests waiting for their answer (this gateway's count or the engine's
// own queue), then the fewest in flight; a tie is broken at random, so idle replicas share the work.
function leastLoaded(ctx: GatewayContext, replicas: readonly ReplicaView[]): ReplicaView | undefined {
  const cs = ctx.router.loadFacts(replicas);
  const ahead = (c: (typeof cs)[number]): number => Math.max(boundedCount(c), c.engineWaiting);
  const order = (a: (typeof cs)[number], b: (typeof cs)[number]): number => ahead(a) - ahead(b) || a.inFlight - b.inFlight;
  const sorted = [...cs].sort(order);
  const first = sorted[0];
  if (first === undefined) return undefined;
  const tied = sorted.filter((c) => order(c, first) === 0);
  return (tied[Math.floor(Math.random() * tied.length)] ?? first).view;
}

// The request's one ledger row, written once whichever step it reached.
function ledger(ctx: GatewayContext, e: Embedding): Promise<void> {
  const u = e.usage;
  return (e.ledgered ??= ctx.accounting
    .finish(e.caller, e.model ?? '', e.sent ? e.admitted : undefined, {
      requestId: e.reqId,
      endpoint: 'embeddings',
      replica: e.replica ?? none,
      tier: e.replica === undefined ? none : tier,
      status: e.status,
      promptTokens: u?.promptTokens ?? 0,
      cachedTokens: 0,
      completionTokens: 0,
      usageReported: u !== undefined || (e.status >= 400 && e.status < 500 && e.status !== 499),
      ttftMs: e.status === 200 ? performance.now() - e.t0 : undefined,
      totalMs: performance.now() - e.t0,
    })
    .catch((err: unknown) => ctx.log.error({ reqId: e.reqId, err }, 'gateway.ledger_failed')));
}

// Whatever step it reached: the quota settled with what the engine counted (or given back when no
// engine ran it), its place in admission given back, its row written, its counters and log line.
async function finish(ctx: GatewayContext, e: Embedding): Promise<void> {
  const a = e.admitted;
  if (a !== undefined && e.sent) a.hold.settle(e.usage === undefined ? a.hold.tokens : e.usage.promptTokens);
  else if (a !== undefined) ctx.accounting.release(a);
  e.permit?.done();
  await ledger(ctx, e);
  const m = ctx.metrics;
  const route = e.replica === undefined ? none : tier;
  const tookMs = performance.now() - e.t0;
  m.requests.inc({ endpoint: 'embeddings', status: String(e.status), route });
  m.requestSeconds.observe({ route }, tookMs / 1000);
  if (e.usage !== undefined && e.caller !== undefined) m.keyTokens.inc({ key: e.caller.name, kind: 'prompt' }, e.usage.promptTokens);
  ctx.log.info(
    { reqId: e.reqId, key: e.caller?.name, model: e.model, endpoint: 'embeddings', status: e.status, replica: e.replica, tier: route, promptTokens: e.usage?.promptTokens, tookMs: Math.round(tookMs) },
    'gateway.request',
  );
}
