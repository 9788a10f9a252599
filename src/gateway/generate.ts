// The generate path: POST /v1/chat/completions and /v1/completions, and the client protocols served
// as a chat (Responses, Messages). A request is authenticated, read, parsed, admitted by quota and by
// the admission queue, routed (facts, then the routing tiers in order, then the choice committed),
// sent (once more elsewhere when the engine could not start it), answered whole or streamed, and
// accounted; a stream that breaks is continued in stream-migration.ts.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Permit, PriorityClass } from '../admission/index.js';
import { maxWaitOf, requestPriority } from '../admission/index.js';
import type { ApiTurn, ClientApi } from '../apis/index.js';
import { LlmgwError, UpstreamError } from '../errors/index.js';
import { parseRequestJson } from '../limits/index.js';
import type { Endpoint, GenerationRequest } from '../limits/index.js';
import { compactReceipt } from '../routing/index.js';
import type { Answer, ReplicaView, Routed } from '../routing/index.js';
import { answerText, isRetryable, pipeEvents, responseOf, usageOf } from '../upstream/index.js';
import type { ResponseFacts, UpstreamResponse, Usage } from '../upstream/index.js';
import type { Admitted } from './accounting.js';
import type { Caller, TokenHold } from './auth.js';
import type { GatewayContext } from './context.js';
import { none, sendError } from './reply.js';
import { adapterReady, bodyFor, safeJson, sendToReplica, upstreamFailure } from './replica-send.js';
import { account, forgetRestarted, learn, observeRouting } from './request-observations.js';
import { concatBody, forwardedBody, readRequest } from './request.js';
import type { Call } from './route.js';
import { checkServed } from './served-models.js';
import { migrateStream, spliceFor } from './stream-migration.js';
import { endRequest, failed, spanAttr } from './tracing.js';

// A routed request whose ticket gives its room back to admission, and whose receipt says how long it
// waited in the admission queue and why.
function withAdmission(r: Routed, permit: Permit | undefined, priority: PriorityClass): Routed {
  if (permit === undefined) return r;
  const admission = { priority, queuedMs: Math.round(permit.waitedMs), ...(permit.why === undefined ? {} : { why: permit.why }) };
  return { ...r, ticket: permit.watch(r.ticket, r.replica.id), receipt: { ...r.receipt, admission } };
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

// A client protocol served as a chat: how its request becomes one (apis/), for its caller.
export interface ApiRoute {
  readonly api: ClientApi;
  begin(ctx: GatewayContext, body: unknown, caller: Caller): Promise<ApiTurn> | ApiTurn;
}

/** Serves one generation request of `endpoint` (a chat or a completion), in `route`'s protocol when it has one. */
export async function generate(ctx: GatewayContext, endpoint: Endpoint, call: Call, route?: ApiRoute): Promise<void> {
  const { req, res } = call;
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
    let body = await call.body();
    if (route !== undefined) {
      turn = await route.begin(ctx, parseRequestJson(body, cfg.maxJsonDepth), caller);
      // From here it is a chat like any other; a long one goes to shared memory as a client's would.
      const chat = Buffer.from(JSON.stringify(turn.chat));
      body = concatBody([chat], chat.length);
    }
    g = await readRequest(endpoint, body, ctx.policy, { pool: ctx.parsePool, bodies: ctx.bodies, parsed: (w) => ctx.metrics.bodyParses.inc(w) });
    const model = g.model;
    checkServed(ctx.o.directory, model);
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
          return sendToReplica(ctx, target, path, body, gone.signal);
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

