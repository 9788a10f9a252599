// A stream whose engine broke off mid-answer, continued on another replica: what records a stream
// so it can be continued (the splice, upstream/), and the hops that route and send each continuation
// until one finishes, the bound is reached or nothing can take it.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Span } from '@opentelemetry/api';
import type { PriorityClass } from '../admission/index.js';
import { UpstreamError } from '../errors/index.js';
import { parseGenerationRequest } from '../limits/index.js';
import type { Endpoint, GenerationRequest } from '../limits/index.js';
import type { HopReceipt, ReplicaView, Routed } from '../routing/index.js';
import { breakReasonOf, pipeEvents, requestRefusal, streamErrorEvent, StreamSplice } from '../upstream/index.js';
import type { EventTranslator, Refusal, UpstreamResponse, Usage } from '../upstream/index.js';
import type { GatewayContext } from './context.js';
import { adapterReady, bodyFor, sendToReplica, upstreamFailure } from './replica-send.js';
import { learn, observeRouting } from './request-observations.js';
import { failed, spanAttr } from './tracing.js';

// What records a stream for a migration: none when migrations are off or the request's answer could
// not be continued exactly (then nothing is kept while it streams).
export function spliceFor(ctx: GatewayContext, endpoint: Endpoint, forwarded: Readonly<Record<string, unknown>>): StreamSplice | undefined {
  const max = ctx.o.config.upstream.maxMigrations;
  return max > 0 && requestRefusal(endpoint, forwarded) === undefined ? new StreamSplice(endpoint, forwarded, max) : undefined;
}

// The client's own deadline, when its SDK states it (OpenAI's send X-Stainless-Timeout, in seconds):
// past it the client has given up, and a continuation would only spend an engine's time.
function clientDeadlineAt(req: IncomingMessage, t0: number): number {
  const s = Number(req.headers['x-stainless-timeout']);
  return s > 0 ? t0 + s * 1000 : Number.POSITIVE_INFINITY;
}

/** How an engine's stream ended early: the error it threw, or the error event it sent. */
export interface Broken {
  readonly failed: Error | undefined;
  readonly errorEvent: string | undefined;
}

/**
 * A stream whose engine broke off mid-answer: continued on the ready replica that best holds prompt
 * plus answer so far, for as many hops as gateway.upstream.max_migrations allows, or ended with the
 * error event. Returns the request's status, the usage the client is charged and the stream's last
 * bytes, which wait for the ledger's row.
 */
export async function migrateStream(
  ctx: GatewayContext,
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
  ctx: GatewayContext,
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
  const model = ctx.o.directory.ready(a.g.model)[0];
  if (c.raw !== undefined) {
    // A thinking chat goes on as a raw completion of its prompt as this gateway renders it: only
    // where the model's template is rendered here (and agrees with the engine's) is that exact.
    const prompt = model === undefined ? undefined : await ctx.render(a.g.model, ctx.router.tokenTarget(model), Buffer.from(JSON.stringify(c.raw.original)));
    if (prompt === undefined) return { refused: 'template' };
    c.body.prompt = prompt + c.raw.suffix;
  }
  const endpoint: Endpoint = c.raw === undefined ? a.endpoint : 'completions';
  const path = c.raw === undefined ? a.path : '/v1/completions';
  const text = JSON.stringify(c.body);
  const raw = Buffer.from(text);
  if (c.seam !== undefined && model !== undefined) {
    const seam = await ctx.seam(a.g.model, ctx.router.tokenTarget(model), { original: Buffer.from(JSON.stringify(c.seam.original)), continuation: raw, text: c.seam.text });
    if (seam === 'inexact') return { refused: 'template' };
  }
  const request = parseGenerationRequest(endpoint, raw, ctx.policy);
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
        return sendToReplica(ctx, target, path, bodyFor(target, a.g.model, c.body, {}, text, a.priority), a.gone);
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

