// The generate path: POST /v1/chat/completions and /v1/completions, and the client protocols served
// as a chat (Responses, Messages). One request goes through its phases in order, each a function
// below: accept (authenticate, read, parse, admit by quota and by the admission queue), route and
// send (the router's facts, tiers and commit; in a prefill/decode pool the prefill hop first,
// disagg-hop.ts; once more elsewhere when the engine could not start it),
// answer (whole, or streamed; a stream that breaks is continued in stream-migration.ts), and finish
// (settle the quota, write the ledger row, count and log the request, end its trace).
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Span } from '@opentelemetry/api';
import type { Permit, PriorityClass } from '../admission/index.js';
import { maxWaitOf, requestPriority } from '../admission/index.js';
import type { ApiTurn, ClientApi } from '../apis/index.js';
import { LlmgwError, UpstreamError } from '../errors/index.js';
import { parseRequestJson } from '../limits/index.js';
import type { Endpoint, GenerationRequest } from '../limits/index.js';
import { compactReceipt, pdPools, sessionTarget, sessionTokenHeader, sessionTokenOf } from '../routing/index.js';
import type { Answer, ReplicaView, Routed } from '../routing/index.js';
import { answerText, isRetryable, pipeEvents, responseOf, usageOf } from '../upstream/index.js';
import type { ResponseFacts, UpstreamResponse, Usage } from '../upstream/index.js';
import type { Admitted } from './accounting.js';
import type { Caller, TokenHold } from './auth.js';
import type { GatewayContext } from './context.js';
import { none, sendError } from './reply.js';
import { adapterReady, bodyFor, safeJson, sendToReplica, upstreamFailure } from './replica-send.js';
import { decodeCandidates, sendDisaggregated } from './disagg-hop.js';
import type { HopRequest } from './disagg-hop.js';
import { account, forgetRestarted, learn, observeRouting } from './request-observations.js';
import { concatBody, forwardedBody, readRequest } from './request.js';
import type { RequestStage } from './metrics.js';
import type { Call } from './route.js';
import { checkServed } from './served-models.js';
import { migrateStream, spliceFor } from './stream-migration.js';
import { endRequest, failed, spanAttr } from './tracing.js';

// A client protocol served as a chat: how its request becomes one (apis/), for its caller.
export interface ApiRoute {
  readonly api: ClientApi;
  begin(ctx: GatewayContext, body: unknown, caller: Caller): Promise<ApiTurn> | ApiTurn;
}

// One request as its phases fill it in: what the ledger row, the request's log line and its trace
// are written from at the end, whichever phase it got to.
interface Generation {
  readonly reqId: string;
  readonly t0: number;
  readonly endpoint: Endpoint;
  readonly route: ApiRoute | undefined;
  readonly call: Call;
  // The client leaving aborts whatever the engine is doing for it.
  readonly gone: AbortController;
  readonly span: Span | undefined;
  // When the stage in progress began (llmgw_gateway_request_stage_seconds).
  stageAt: number;
  status: number;
  caller?: Caller;
  g?: GenerationRequest;
  turn?: ApiTurn;
  admitted?: Admitted;
  // The quota's hold while no engine runs the request; it moves to `sent` once one does.
  hold?: TokenHold;
  sent?: TokenHold;
  permit?: Permit;
  routed?: Routed;
  // When the last attempt was sent, for the first byte's wait.
  sentAt: number;
  usage?: Usage;
  response?: ResponseFacts;
  ttftMs?: number;
  ledgered?: Promise<void>;
}

// What accepting a request established: the request itself and its place in admission.
interface Accepted {
  readonly g: GenerationRequest;
  // The body as read, or the chat a client protocol's turn became.
  readonly body: Buffer;
  readonly priority: PriorityClass;
  readonly permit: Permit;
  // The deadline admission bounded its wait by, also bounding a wait for a busy cache holder.
  readonly deadlineMs: number;
}

// What goes to the engine: the client's body with the gateway's fields added, and where.
interface Forward {
  readonly hideUsage: boolean;
  readonly added: Readonly<Record<string, unknown>>;
  readonly body: Buffer | string;
  readonly path: string;
}

/** Serves one generation request of `endpoint` (a chat or a completion), in `route`'s protocol when it has one. */
export async function generate(ctx: GatewayContext, endpoint: Endpoint, call: Call, route?: ApiRoute): Promise<void> {
  const gen: Generation = {
    reqId: randomUUID(),
    t0: performance.now(),
    endpoint,
    route,
    call,
    gone: new AbortController(),
    span: ctx.tracing.request(route?.api.name ?? (endpoint === 'chat' ? 'chat' : 'text_completion')),
    status: 0,
    sentAt: 0,
    stageAt: 0,
  };
  gen.stageAt = gen.t0;
  const onClose = (): void => {
    if (!call.res.writableFinished) gen.gone.abort();
  };
  call.res.on('close', onClose);
  try {
    const a = await accept(ctx, gen);
    const f = forwardOf(gen, a, a.g);
    const { routed, up } = await routeAndSend(ctx, gen, a, f);
    // From here the engine runs the request: its hold is settled with the usage, or kept whole when none comes.
    gen.sent = gen.hold;
    gen.hold = undefined;
    await answer(ctx, gen, a, f, routed, up);
  } catch (e) {
    refuse(ctx, gen, e);
  } finally {
    call.res.off('close', onClose);
    finish(ctx, gen);
  }
}

async function accept(ctx: GatewayContext, gen: Generation): Promise<Accepted> {
  const { req } = gen.call;
  const cfg = ctx.o.config;
  const route = gen.route;
  const authorization = route === undefined ? req.headers.authorization : route.api.authorization(req.headers);
  const caller = await ctx.tracing.phase('auth', gen.span, () => ctx.authenticate(authorization));
  gen.caller = caller;
  stage(ctx, gen, 'auth');
  let body = await gen.call.body();
  stage(ctx, gen, 'body');
  if (route !== undefined) {
    const turn = await route.begin(ctx, parseRequestJson(body, cfg.maxJsonDepth), caller);
    gen.turn = turn;
    // From here it is a chat like any other; a long one goes to shared memory as a client's would.
    const chat = Buffer.from(JSON.stringify(turn.chat));
    body = concatBody([chat], chat.length);
  }
  const g = await readRequest(gen.endpoint, body, ctx.policy, { pool: ctx.parsePool, bodies: ctx.bodies, parsed: (w) => ctx.metrics.bodyParses.inc(w) });
  gen.g = g;
  checkServed(ctx.o.directory, g.model);
  stage(ctx, gen, 'parse');
  const admitted = await ctx.accounting.admit(caller, g.model, boundOf(g, body.length));
  gen.admitted = admitted;
  stage(ctx, gen, 'quota');
  gen.hold = admitted.hold;
  const priority = requestPriority(caller.priority, req.headers['x-llmgw-priority'], g.body.priority);
  const maxWaitMs = maxWaitOf(req.headers, cfg.admission.maxWaitMs);
  const permit = await ctx.admission.admit({
    model: g.model,
    tenant: caller.tenant,
    weight: caller.weight,
    priority,
    // Bytes over 4 is close enough to a prompt's tokens to share capacity by, and costs nothing.
    costTokens: g.promptTokenIds?.length ?? Math.ceil(body.length / 4),
    sizeBytes: body.length,
    maxWaitMs,
    signal: gen.gone.signal,
  });
  gen.permit = permit;
  stage(ctx, gen, 'admission');
  if (permit.queued) ctx.log.info({ reqId: gen.reqId, model: g.model, priority, waitedMs: Math.round(permit.waitedMs) }, 'gateway.admitted');
  return { g, body, priority, permit, deadlineMs: Math.max(0, maxWaitMs - permit.waitedMs) };
}

function forwardOf(gen: Generation, a: Accepted, g: GenerationRequest): Forward {
  const hideUsage = g.stream && !g.streamUsage;
  const impose = gen.admitted?.impose;
  const added = {
    ...(hideUsage ? { stream_options: { ...streamOptionsOf(g.body), include_usage: true } } : {}),
    // A quota key's request without a limit of its own may write only what the key has left.
    ...(impose === undefined ? {} : { max_tokens: impose }),
  };
  return { hideUsage, added, body: forwardedBody(a.body, g.body, added), path: gen.endpoint === 'chat' ? '/v1/chat/completions' : '/v1/completions' };
}

async function routeAndSend(ctx: GatewayContext, gen: Generation, a: Accepted, f: Forward): Promise<{ routed: Routed; up: UpstreamResponse }> {
  let replicas = ctx.o.directory.ready(a.g.model);
  forgetRestarted(ctx, replicas);
  // A pool with prefill replicas: routing chooses the decode replica, then the hop its prefill.
  const pools = pdPools(replicas);
  for (let attempt = 0; ; attempt++) {
    if (replicas.length === 0) {
      throw new LlmgwError('LLMGW_NO_REPLICA', `model "${a.g.model}" has no ready replica; see the agent's log or GET /health`);
    }
    let routed = await routeOnce(ctx, gen, a, decodeCandidates(replicas, pools));
    gen.routed = routed;
    const target = routed.replica;
    try {
      if (pools === undefined) return { routed, up: await sendOnce(ctx, gen, a, f, routed) };
      const sent = await sendDisaggregated(ctx, hopOf(ctx, gen, a, f), routed, pools, (body) => sendOnce(ctx, gen, a, f, routed, body));
      routed = { ...routed, receipt: { ...routed.receipt, pd: sent.pd } };
      gen.routed = routed;
      ctx.receipts.add(gen.reqId, routed.receipt);
      return { routed, up: sent.up };
    } catch (e) {
      routed.ticket.done();
      const again = attempt === 0 && !gen.gone.signal.aborted && (isRetryable(e) || (e instanceof UpstreamError && e.status !== undefined));
      if (!again) throw e;
      ctx.metrics.retries.inc({ reason: isRetryable(e) ? 'connect' : 'status' });
      ctx.log.warn({ reqId: gen.reqId, replica: target.id, err: e }, 'gateway.retry');
      // Another replica if there is one; a lone replica gets its one retry too (a keep-alive
      // connection the engine had just closed fails the same way as a dead engine).
      const others = replicas.filter((r) => r.id !== target.id);
      if (others.length > 0) replicas = others;
    }
  }
}

// The request as the prefill hop needs it: the client's fields with the gateway's, and each engine's body.
function hopOf(ctx: GatewayContext, gen: Generation, a: Accepted, f: Forward): HopRequest {
  const fields = { ...a.g.body, ...f.added };
  return {
    reqId: gen.reqId,
    g: a.g,
    fields,
    path: f.path,
    rawBody: a.body,
    deadlineMs: a.deadlineMs,
    signal: gen.gone.signal,
    span: gen.span,
    bodyFor: (target, body) => bodyFor(target, a.g.model, body, {}, JSON.stringify(body), a.priority),
  };
}

// Routing chooses by cache among the replicas admission let this request's class onto.
async function routeOnce(ctx: GatewayContext, gen: Generation, a: Accepted, replicas: readonly ReplicaView[]): Promise<Routed> {
  const r0 = performance.now();
  const candidates = a.permit.among(replicas);
  const routed = await ctx.tracing.phase('route', gen.span, async (s) => {
    const session = sessionTarget(gen.call.req.headers, candidates.map((c) => c.id), ctx.o.config.router.sessionSecret);
    const r = await ctx.router.route(a.g, candidates, { signal: gen.gone.signal, body: a.body, deadlineMs: a.deadlineMs, session });
    s?.setAttributes({ [spanAttr.tier]: r.tier, [spanAttr.replica]: r.replica.id });
    return withAdmission(r, a.permit, a.priority);
  });
  observeRouting(ctx, routed, r0);
  ctx.receipts.add(gen.reqId, routed.receipt);
  // Routing's facts apart from the rest of it: the tiers, the commit, the receipt (and, since the
  // admission stage ended, the forwarded body and the replicas' list).
  const { tokenizeMs = 0, scoreMs = 0 } = routed.trace;
  const now = performance.now();
  const m = ctx.metrics.stages;
  m.tokenize.observe(tokenizeMs / 1000);
  m.score.observe(scoreMs / 1000);
  m.decide.observe(Math.max(0, now - gen.stageAt - tokenizeMs - scoreMs) / 1000);
  gen.stageAt = now;
  return routed;
}

// `whole`: the body a disaggregated request's decode half is sent instead of the client's.
async function sendOnce(ctx: GatewayContext, gen: Generation, a: Accepted, f: Forward, routed: Routed, whole?: Readonly<Record<string, unknown>>): Promise<UpstreamResponse> {
  const target = routed.replica;
  gen.sentAt = performance.now();
  if (routed.adapter !== undefined) await adapterReady(routed.adapter.ready, gen.gone.signal);
  const body = whole === undefined ? bodyFor(target, a.g.model, a.g.body, f.added, f.body, a.priority) : bodyFor(target, a.g.model, whole, {}, JSON.stringify(whole), a.priority);
  const sent = await ctx.tracing.phase('upstream', gen.span, (s) => {
    s?.setAttributes({ [spanAttr.replica]: target.id, [spanAttr.serverAddress]: target.url.hostname, [spanAttr.serverPort]: portOf(target.url) });
    return sendToReplica(ctx, target, f.path, body, gen.gone.signal, whole === undefined ? undefined : gen.reqId);
  });
  stage(ctx, gen, 'upstream');
  // A 5xx, or a refusal of the engine key (a replica restarted with a key we have not seen
  // yet): the engine did not run the request, so another replica may.
  if (sent.status >= 500 || sent.status === 401 || sent.status === 403) {
    await sent.body.dump();
    throw upstreamFailure(target.id, sent.status);
  }
  return sent;
}

// A routed request whose ticket gives its room back to admission, and whose receipt says how long it
// waited in the admission queue and why.
function withAdmission(r: Routed, permit: Permit, priority: PriorityClass): Routed {
  const admission = { priority, queuedMs: Math.round(permit.waitedMs), ...(permit.why === undefined ? {} : { why: permit.why }) };
  return { ...r, ticket: permit.watch(r.ticket, r.replica.id), receipt: { ...r.receipt, admission } };
}

async function answer(ctx: GatewayContext, gen: Generation, a: Accepted, f: Forward, routed: Routed, up: UpstreamResponse): Promise<void> {
  const where = {
    'x-llmgw-replica': routed.replica.id,
    'x-llmgw-route': routed.tier,
    'x-request-id': gen.reqId,
    'x-llmgw-receipt': compactReceipt(routed.receipt),
    // Sent back by the client, it brings the conversation's next turn here from any gateway of the cluster.
    [sessionTokenHeader]: sessionToken(routed.replica.id, ctx.o.config.router.sessionSecret),
  };
  const streaming = ctx.tracing.start('stream', gen.span);
  try {
    if (up.status !== 200 || !a.g.stream) await answerWhole(ctx, gen, a, routed, up, where);
    else await answerStream(ctx, gen, a, f, routed, up, where, streaming);
  } finally {
    streaming?.end();
    routed.ticket.done();
  }
}

async function answerWhole(ctx: GatewayContext, gen: Generation, a: Accepted, routed: Routed, up: UpstreamResponse, where: Record<string, string>): Promise<void> {
  const engineText = await answerText(up, routed.replica.id);
  routed.ticket.firstByte();
  gen.ttftMs = performance.now() - gen.t0;
  ctx.metrics.ttftSeconds.observe({ route: routed.tier }, gen.ttftMs / 1000);
  if (up.status === 200) {
    const parsed = safeJson(engineText);
    gen.usage = usageOf(parsed);
    gen.response = responseOf(parsed);
  }
  if (up.status === 200 && answersKept(ctx, a.g, routed)) prepareNextTurn(ctx, a.g, routed.replica, a.body, { format: 'json', text: engineText });
  const { turn, route } = gen;
  const text = turn === undefined || route === undefined ? engineText : JSON.stringify(await apiAnswer(route.api, turn, up.status, engineText));
  gen.status = up.status;
  stage(ctx, gen, 'answer');
  await ledger(ctx, gen);
  stage(ctx, gen, 'ledger');
  gen.call.res.writeHead(up.status, { 'content-type': turn === undefined ? up.contentType : 'application/json', 'content-length': Buffer.byteLength(text), ...where });
  gen.call.res.end(text);
}

async function answerStream(
  ctx: GatewayContext,
  gen: Generation,
  a: Accepted,
  f: Forward,
  routed: Routed,
  up: UpstreamResponse,
  where: Record<string, string>,
  streaming: Span | undefined,
): Promise<void> {
  const { req, res } = gen.call;
  const { g, body } = a;
  gen.status = 200;
  res.writeHead(200, { 'content-type': gen.turn === undefined ? up.contentType : 'text/event-stream', 'cache-control': 'no-cache', ...where });
  res.flushHeaders();
  const { ticket, tier } = routed;
  const splice = spliceFor(ctx, gen.endpoint, { ...g.body, ...f.added });
  let firstByteMs: number | undefined;
  const outcome = await pipeEvents(up, res, {
    replica: routed.replica.id,
    maxEventChars: ctx.o.config.upstream.maxEventBytes,
    hideUsage: f.hideUsage,
    translate: gen.turn,
    keepAnswerChars: answersKept(ctx, g, routed) ? maxAnswerChars : 0,
    splice,
    holdDone: true,
    onFirstByte: () => {
      firstByteMs = performance.now() - gen.sentAt;
      ticket.firstByte();
      gen.ttftMs = performance.now() - gen.t0;
      ctx.metrics.ttftSeconds.observe({ route: tier }, gen.ttftMs / 1000);
    },
  });
  gen.usage = outcome.usage;
  gen.response = outcome.response;
  learn(ctx, routed, outcome.usage, firstByteMs);
  let tail = '';
  // A client that left mid-stream is a 499 like one that left before the headers.
  if (gen.gone.signal.aborted) gen.status = 499;
  else if (outcome.failed !== undefined) {
    failed(streaming, outcome.failed);
    ctx.log.warn({ reqId: gen.reqId, replica: routed.replica.id, err: outcome.failed }, 'gateway.stream_failed');
    const m = await migrateStream(ctx, { reqId: gen.reqId, endpoint: gen.endpoint, g, req, res, span: gen.span, gone: gen.gone.signal, t0: gen.t0, hideUsage: f.hideUsage, path: f.path, splice, translate: gen.turn, routed, broke: outcome, priority: a.priority });
    gen.status = m.status;
    if (m.usage !== undefined) gen.usage = m.usage;
    tail = m.tail;
  } else {
    if (outcome.answer !== undefined) prepareNextTurn(ctx, g, routed.replica, body, { format: 'sse', text: outcome.answer });
    tail = outcome.tail;
  }
  // The client's closing events (a translated protocol's) are part of the answer's last bytes.
  if (gen.status === 200 && gen.turn !== undefined) tail += await gen.turn.end();
  stage(ctx, gen, 'answer');
  await ledger(ctx, gen);
  stage(ctx, gen, 'ledger');
  res.end(tail);
}

// Each replica's session token, by secret: the same for every answer from it, where signing it
// anew (an HMAC) took every answer's path a few µs.
const sessionTokens = new Map<string, string>();
function sessionToken(replicaId: string, secret: string): string {
  const key = `${secret}\u0000${replicaId}`;
  let token = sessionTokens.get(key);
  if (token === undefined) {
    token = sessionTokenOf(replicaId, secret);
    sessionTokens.set(key, token);
  }
  return token;
}

// An answer longer than this is not kept to prepare the next turn from: an engine's SSE event
// carries one token in about 200 characters, so this is an answer of some 20k tokens.
const maxAnswerChars = 4 * 1024 * 1024;

// Whether this chat's answer is kept to prepare its next turn; a chat too short to be worth it is
// counted as such, once, when its answer is on its way.
function answersKept(ctx: GatewayContext, g: GenerationRequest, routed: Routed): boolean {
  if (g.endpoint !== 'chat') return false;
  const how = ctx.router.turnPreparation(routed.promptTokens);
  if (how === 'short') ctx.metrics.turnsPrepared.inc({ model: g.model, outcome: 'short' });
  return how === 'prepare';
}

// The conversation's next turn, made ready in the pool while its user reads this answer. In the
// background: the client's answer is already on its way, and a failure costs only that head start.
function prepareNextTurn(ctx: GatewayContext, g: GenerationRequest, replica: ReplicaView, body: Uint8Array, answer: Answer): void {
  void ctx.router.answered(g, replica, { body, answer }).catch((e: unknown) => ctx.log.warn({ err: e }, 'gateway.prepare_failed'));
}

// A request that failed before its answer was on its way gets its error, one that failed after is cut off.
function refuse(ctx: GatewayContext, gen: Generation, e: unknown): void {
  const { res } = gen.call;
  const routed = gen.routed;
  routed?.ticket.done();
  const headers: Record<string, string> = routed === undefined ? {} : { 'x-llmgw-replica': routed.replica.id, 'x-llmgw-route': routed.tier };
  if (gen.gone.signal.aborted) gen.status = 499;
  else if (!res.headersSent) gen.status = sendError(res, e, { ...headers, 'x-request-id': gen.reqId }, gen.route?.api);
  else res.destroy();
  if (gen.status >= 500 || gen.status === 0) ctx.log.warn({ reqId: gen.reqId, err: e }, 'gateway.request_failed');
}

// The request's one ledger row: written before the answer's last byte, or at its end when it failed.
function ledger(ctx: GatewayContext, gen: Generation): Promise<void> {
  const { usage, status } = gen;
  return (gen.ledgered ??= ctx.accounting
    .finish(gen.caller, gen.g?.model ?? '', gen.sent === undefined ? undefined : gen.admitted, {
      requestId: gen.reqId,
      endpoint: gen.route?.api.name ?? gen.endpoint,
      replica: gen.routed?.replica.id ?? none,
      tier: gen.routed?.tier ?? none,
      status,
      promptTokens: usage?.promptTokens ?? 0,
      cachedTokens: usage?.cachedTokens ?? 0,
      completionTokens: usage?.completionTokens ?? 0,
      // An engine that refused (4xx) did no work; one cut off mid-answer did some, and its hold stays charged.
      usageReported: usage !== undefined || (status >= 400 && status < 500 && status !== 499),
      ttftMs: gen.ttftMs,
      totalMs: performance.now() - gen.t0,
    })
    .catch((e: unknown) => ctx.log.error({ reqId: gen.reqId, err: e }, 'gateway.ledger_failed')));
}

// Whatever phase the request got to: its quota settled, its place in admission given back, its row
// written, its log line and metrics, its trace ended.
function finish(ctx: GatewayContext, gen: Generation): void {
  const { sent, usage, g, routed } = gen;
  sent?.settle(usage === undefined ? sent.tokens : usage.promptTokens + usage.completionTokens);
  // Not sent to an engine (a refusal, no replica, an engine that did not start it): nothing was spent.
  if (gen.hold !== undefined && gen.admitted !== undefined) ctx.accounting.release(gen.admitted);
  gen.permit?.done();
  if (gen.gone.signal.aborted && gen.status === 0) gen.status = 499;
  // A failed request's row does not hold its answer back: there is no answer to hold.
  void ledger(ctx, gen);
  account(ctx, { reqId: gen.reqId, endpoint: gen.route?.api.name ?? gen.endpoint, status: gen.status, routed, caller: gen.caller, usage, t0: gen.t0, model: g?.model });
  endRequest(gen.span, {
    [spanAttr.model]: g?.model,
    [spanAttr.status]: gen.status,
    [spanAttr.tier]: routed?.tier,
    [spanAttr.replica]: routed?.replica.id,
    [spanAttr.predictedCachedTokens]: routed?.predictedCachedTokens,
    [spanAttr.inputTokens]: usage?.promptTokens,
    [spanAttr.outputTokens]: usage?.completionTokens,
    [spanAttr.cachedTokens]: usage?.cachedTokens,
    [spanAttr.maxTokens]: maxTokensOf(g),
    [spanAttr.responseId]: gen.response?.id,
    [spanAttr.responseModel]: gen.response?.model,
    [spanAttr.finishReasons]: gen.response?.finishReasons,
    ...hostOf(gen.call.req),
  });
  stage(ctx, gen, 'finish');
}

// The stage that ends now, in llmgw_gateway_request_stage_seconds: one clock read, one held child.
function stage(ctx: GatewayContext, gen: Generation, name: RequestStage): void {
  const now = performance.now();
  ctx.metrics.stages[name].observe((now - gen.stageAt) / 1000);
  gen.stageAt = now;
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

