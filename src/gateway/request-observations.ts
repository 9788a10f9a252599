// What a routed request leaves behind: the routing metrics, what its first byte teaches the cost
// model, the tree forgetting a restarted replica, and the one log line and counters of a finished request.
import type { ClientApi } from '../apis/index.js';
import type { Endpoint } from '../limits/index.js';
import type { ReplicaView, Routed } from '../routing/index.js';
import type { Usage } from '../upstream/index.js';
import type { Caller } from './auth.js';
import type { GatewayContext } from './context.js';
import { none } from './reply.js';

// A streamed answer's first byte against the prefill it waited for teaches the cost model that
// replica's speed; a whole answer's time (not streamed) includes its decode and says nothing of it.
export function learn(ctx: GatewayContext, routed: Routed, usage: Usage | undefined, firstByteMs: number | undefined): void {
  if (usage === undefined || firstByteMs === undefined) return;
  const chosen = routed.receipt.candidates.find((c) => c.replica === routed.replica.id);
  ctx.costs.observeFirstByte(
    routed.replica.id,
    { uncachedTokens: usage.promptTokens - (usage.cachedTokens ?? 0), aheadTokens: chosen?.queuedPrefillTokens ?? 0, ttfbMs: firstByteMs },
    routed.replica.prefillTokensPerS,
  );
}

/** A replica whose generation changed restarted: the tree and the cost model forget what it held. */
export function forgetRestarted(ctx: GatewayContext, replicas: readonly ReplicaView[]): void {
  for (const r of replicas) {
    const seen = ctx.generations.get(r.id);
    if (seen !== undefined && seen !== r.generation) {
      ctx.tree.forget(r.id);
      ctx.costs.forget(r.id);
    }
    ctx.generations.set(r.id, r.generation);
  }
}

/** One routing decision in the metrics: its tier, its time, and each fallback it took. */
export function observeRouting(ctx: GatewayContext, routed: Routed, r0: number): void {
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

/** A finished request in the metrics and its one log line. */
export function account(
  ctx: GatewayContext,
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
