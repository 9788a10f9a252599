// The prefill hop of a request to a prefill/decode disaggregated pool, between routing the decode
// replica and sending to it. routing/pd.ts decides whether the hop is worth it; the prefill replica
// is routed by the usual tiers among the prefill pool; upstream/disagg.ts builds the bodies. What
// comes out is the decode replica's body (undefined: the request goes to it whole) and the receipt.
//
// Failures fall back to the whole request on the decode replica, which computes the prompt itself:
// a prefill replica that cannot be reached or dies before answering (connect errors, resets,
// timeouts), answers a status other than 200 (a 4xx it refused, a 5xx), or answers without usable
// kv_transfer_params (an engine started without a connector). Only the client leaving ends the
// request instead. Under SGLang's protocol both halves go at once, so a failing prefill is seen
// after the decode is on its way: it is counted and logged, and SGLang's decode times the room out.
import type { GenerationRequest } from '../limits/index.js';
import { prefillCandidates } from '../routing/index.js';
import type { PdPools, PdReceipt, ReplicaView, Routed } from '../routing/index.js';
import { answerText, bootstrapFor, isRetryable, nixlDecodeBody, nixlPrefillBody, returnedTransferParams, sglangBody } from '../upstream/index.js';
import type { UpstreamResponse } from '../upstream/index.js';
import { LlmgwError } from '../errors/index.js';
import type { Span } from '@opentelemetry/api';
import type { GatewayContext } from './context.js';
import { safeJson, sendToReplica } from './replica-send.js';
import { spanAttr } from './tracing.js';

/** What the decode replica is sent, and the receipt of the hop. */
export interface DecodePlan {
  /** The decode replica's body; undefined: the request as the client sent it (no hop, or a failed one). */
  readonly body: Readonly<Record<string, unknown>> | undefined;
  readonly pd: PdReceipt;
}

/** The request as the hop needs it. */
export interface HopRequest {
  readonly reqId: string;
  readonly g: GenerationRequest;
  /** The client's fields with the gateway's added (forwardOf's `added`). */
  readonly fields: Readonly<Record<string, unknown>>;
  readonly path: string;
  readonly rawBody: Uint8Array;
  readonly deadlineMs: number;
  readonly signal: AbortSignal;
  readonly span: Span | undefined;
  /** A body as `target`'s engine wants it (its adapter's fields, its priority), as replica-send's bodyFor writes it. */
  readonly bodyFor: (target: ReplicaView, fields: Readonly<Record<string, unknown>>) => Buffer | string;
}

/**
 * Sends a request routed to decode replica `decode` of a disaggregated pool: the prefill hop first
 * (or the reason there is none), then the decode half through `send` (undefined: the whole request).
 * A decode replica that refuses the transferred params with a 4xx gets the whole request once more.
 */
export async function sendDisaggregated(
  ctx: GatewayContext,
  r: HopRequest,
  decode: Routed,
  pools: PdPools,
  send: (body: Readonly<Record<string, unknown>> | undefined) => Promise<UpstreamResponse>,
): Promise<{ up: UpstreamResponse; pd: PdReceipt }> {
  let plan = await prefillHop(ctx, r, decode, pools);
  let up = await send(plan.body);
  if (plan.body !== undefined && plan.pd.outcome === 'sent' && up.status >= 400 && up.status < 500 && up.status !== 429) {
    await up.body.dump();
    ctx.log.warn({ reqId: r.reqId, replica: decode.replica.id, status: up.status }, 'gateway.decode_refused_transfer');
    plan = { body: undefined, pd: { ...plan.pd, outcome: 'failed', error: `decode replica ${decode.replica.id} refused the prefill's kv_transfer_params (status ${up.status})` } };
    up = await send(undefined);
  }
  ctx.metrics.prefillHops.inc({ outcome: plan.pd.outcome });
  r.span?.setAttributes({ [spanAttr.prefillOutcome]: plan.pd.outcome });
  return { up, pd: plan.pd };
}

/** The decode replicas of a pool, among `replicas` (what is left after a failed attempt); all of them when none is left. */
export function decodeCandidates(replicas: readonly ReplicaView[], pools: PdPools | undefined): readonly ReplicaView[] {
  if (pools === undefined) return replicas;
  const decode = replicas.filter((x) => pools.decode.some((d) => d.id === x.id));
  return decode.length > 0 ? decode : replicas;
}

/** Runs the prefill hop for the decode replica `decode` chose, or says why there is none. */
export async function prefillHop(ctx: GatewayContext, r: HopRequest, decode: Routed, pools: PdPools): Promise<DecodePlan> {
  const decodeCachedTokens = decode.receipt.candidates.find((c) => c.replica === decode.replica.id)?.cachedTokens ?? 0;
  const c = prefillCandidates({
    promptTokens: decode.promptTokens,
    decodeCachedTokens,
    skipPrefillTokens: ctx.o.config.router.pdSkipPrefillTokens,
    decode: decode.replica,
    prefill: pools.prefill,
  });
  if (!c.hop) return { body: undefined, pd: { outcome: c.why, decodeCachedTokens } };
  const routed = await ctx.router.route(r.g, c.candidates, { signal: r.signal, body: r.rawBody, deadlineMs: r.deadlineMs });
  const target = routed.replica;
  const prefill = { replica: target.id, tier: routed.tier, cachedTokens: routed.receipt.candidates.find((x) => x.replica === target.id)?.cachedTokens ?? 0, reason: routed.receipt.reason };
  if (target.disagg?.protocol === 'sglang') {
    const b = bootstrapFor(target.url.hostname, target.disagg.bootstrapPort);
    void sendSglangPrefill(ctx, r, routed, sglangBody(r.fields, b));
    return { body: sglangBody(r.fields, b), pd: { outcome: 'sent', decodeCachedTokens, prefill } };
  }
  try {
    const params = await ctx.tracing.phase('prefill', r.span, async (s) => {
      s?.setAttributes({ [spanAttr.replica]: target.id });
      const up = await sendToReplica(ctx, target, r.path, r.bodyFor(target, nixlPrefillBody(r.fields)), r.signal, r.reqId);
      const text = await answerText(up, target.id);
      routed.ticket.firstByte();
      if (up.status !== 200) throw new LlmgwError('LLMGW_PREFILL', `prefill replica ${target.id} answered status ${up.status}: ${text.slice(0, 200)}`);
      const got = returnedTransferParams(safeJson(text));
      if (!got.ok) throw new LlmgwError('LLMGW_PREFILL', `prefill replica ${target.id}: ${got.why}`);
      return got.params;
    });
    return { body: nixlDecodeBody(r.fields, params), pd: { outcome: 'sent', decodeCachedTokens, prefill } };
  } catch (e) {
    if (r.signal.aborted || !(e instanceof LlmgwError || isRetryable(e))) throw e;
    ctx.log.warn({ reqId: r.reqId, replica: target.id, err: e }, 'gateway.prefill_failed');
    return { body: undefined, pd: { outcome: 'failed', decodeCachedTokens, prefill, error: e instanceof Error ? e.message : String(e) } };
  } finally {
    routed.ticket.done();
  }
}

// SGLang's prefill half: its answer carries nothing the decode needs, so it is read and dropped.
async function sendSglangPrefill(ctx: GatewayContext, r: HopRequest, routed: Routed, body: Record<string, unknown>): Promise<void> {
  try {
    const up = await sendToReplica(ctx, routed.replica, r.path, r.bodyFor(routed.replica, { ...body, stream: false }), r.signal, r.reqId);
    await up.body.dump();
    routed.ticket.firstByte();
    if (up.status !== 200) throw new LlmgwError('LLMGW_PREFILL', `prefill replica ${routed.replica.id} answered status ${up.status}`);
  } catch (e) {
    if (r.signal.aborted) return;
    ctx.metrics.prefillHops.inc({ outcome: 'failed' });
    ctx.log.warn({ reqId: r.reqId, replica: routed.replica.id, err: e }, 'gateway.prefill_failed');
  } finally {
    routed.ticket.done();
  }
}
