// The tiers: pure functions `(facts, candidates) => Choice | undefined`, tried in order until one
// answers. Each weighs a replica by its estimated time to first token, so one hot prefix cannot
// pile every request on one replica; the load tier always answers.
import { roomOrder } from './cache-room.js';
import type { Candidate, Choice, RouteFacts, RouteTier, Tier } from './facts.js';

const minAffinityCap = 2;

/** Estimated prefill wait on a candidate if it also took `uncachedTokens` more, in ms (its queue alone with 0). */
export const estimateMs = (c: Candidate, uncachedTokens: number): number =>
  ((c.queuedPrefillTokens + uncachedTokens) * 1000) / c.prefillTokensPerS;

/** The requests bounded load counts on a candidate: those not yet answering. */
export const boundedCount = (c: Candidate): number => c.waiting ?? c.inFlight;

/**
 * The most requests waiting for their first token a replica may have and still be chosen for its
 * cache. Consistent hashing with bounded loads: a replica already holding well over its share of the
 * waiting requests takes no more for its cache, however cheap their prefill, because each one
 * waits for a step of its own while the others idle. Requests already answering are not counted:
 * they share the decode batch, and counting them broke a conversation's affinity for an idle
 * replica's full prefill while the holder was merely streaming three answers (measured by
 * `llmgw bench e2e`). The floor of 2 keeps one waiting request from breaking affinity on a quiet cluster.
 */
export function affinityCap(f: RouteFacts, cs: readonly Candidate[]): number {
  const total = cs.reduce((n, c) => n + boundedCount(c), 0);
  return f.boundedLoadFactor > 0 ? Math.max(minAffinityCap, Math.ceil((f.boundedLoadFactor * (total + 1)) / cs.length)) : Infinity;
}

// The affinity rule both cache tiers share. Each replica is scored by its estimated time to first
// token for this request, less the prefill its cache saves the cluster (the hit would otherwise be
// computed again somewhere); the best score wins if it is a replica holding part of the prompt. So
// a sibling sent while its prefix is still being computed joins it (burst co-location), and a
// holder whose queue outweighs its hit loses to an idle replica. Stickiness breaks at saturation:
// a replica whose queued uncached prefill takes longer than the TTFT budget to clear is not chosen
// for its cache, so one hot system prompt cannot pile every request on one replica. With
// wait-or-spill on, a busy holder is not simply dropped: `waitOrSpill` decides by time.
function affinity(tier: Tier, cached: ReadonlyMap<string, number>, f: RouteFacts, cs: readonly Candidate[]): Choice | undefined {
  let best: { c: Candidate; score: number; hit: number } | undefined;
  let busy: { c: Candidate; hit: number; est: number } | undefined;
  const cap = affinityCap(f, cs);
  for (const c of cs) {
    const hit = Math.min(cached.get(c.view.id) ?? 0, f.promptTokens);
    const est = estimateMs(c, f.promptTokens - hit);
    // The queue already there, not this request: a long prompt alone still goes where its prefix is.
    const saturated = estimateMs(c, 0) > f.ttftBudgetMs || boundedCount(c) >= cap;
    if (saturated && hit > 0 && (busy === undefined || hit > busy.hit || (hit === busy.hit && est < busy.est))) busy = { c, hit, est };
    const score = est - (saturated ? 0 : (hit * 1000) / c.prefillTokensPerS);
    const better = best === undefined || score < best.score || (score === best.score && hit > best.hit);
    if (better) best = { c, score, hit: saturated ? 0 : hit };
  }
  const chosen = best === undefined || best.hit <= 0 ? undefined : { replica: best.c.view, tier, predictedCachedTokens: best.hit };
  // A busy holder matters only when it holds more than the replica the rule above chose.
  if (f.waitOrSpill !== true || busy === undefined || (best !== undefined && best.hit >= busy.hit)) return chosen;
  return waitOrSpill(tier, cached, f, cs, busy);
}

// Wait for a busy cache holder, or spill to another replica, whichever gives the sooner first token.
// Waiting costs the holder's queue plus prefilling the uncached remainder there; spilling costs the
// best other replica's queue plus prefilling all it does not hold, usually the whole prompt, and
// leaves a second copy of the prefix evicting others' blocks from a cold cache. Dropping every busy
// holder (the bounded-load and budget valve alone) sent a few requests of each burst to a cold
// replica (issue 33: 0.967 and 0.880 of the oracle's cached tokens in two runs of a shared-prefix
// trace that fits the caches). A holder whose wait is past the request's deadline is not waited
// for. Ties wait: the spill's copy costs other prompts later. Pure.
function waitOrSpill(
  tier: Tier,
  cached: ReadonlyMap<string, number>,
  f: RouteFacts,
  cs: readonly Candidate[],
  holder: { readonly c: Candidate; readonly hit: number; readonly est: number },
): Choice | undefined {
  let spill: { c: Candidate; hit: number; est: number } | undefined;
  for (const c of cs) {
    if (c === holder.c) continue;
    const hit = Math.min(cached.get(c.view.id) ?? 0, f.promptTokens);
    const est = estimateMs(c, f.promptTokens - hit);
    // Equal estimates: the load tier's order, so a spill goes where load routing would have sent it.
    const better = spill === undefined || est < spill.est || (est === spill.est && (c.inFlight - spill.c.inFlight || c.engineWaiting - spill.c.engineWaiting) < 0);
    if (better) spill = { c, hit, est };
  }
  // A lone replica: nothing to weigh, the load tier takes it.
  if (spill === undefined) return undefined;
  const pastDeadline = holder.est > (f.deadlineMs ?? Infinity);
  const wait = !pastDeadline && holder.est <= spill.est;
  const decided = { chose: wait ? 'holder' : 'spill', holder: holder.c.view.id, holderMs: holder.est, spillTo: spill.c.view.id, spillMs: spill.est, pastDeadline } as const;
  if (wait) return { replica: holder.c.view, tier, predictedCachedTokens: holder.hit, waitOrSpill: decided };
  return { replica: spill.c.view, tier: spill.hit > 0 ? tier : 'load', predictedCachedTokens: spill.hit, waitOrSpill: decided };
}

/**
 * Tier 1, for a request naming an adapter loaded on demand: a replica holding it (or already loading
 * it, so a burst joins one load), by its cached prefix (the adapter's name is in every block key),
 * else by load. Unless every holder's queued prefill is over the TTFT budget: then the later tiers
 * choose among all replicas and the adapter is loaded on one more, so a hot adapter spreads. Requests
 * in flight alone do not spread it, as the bounded-load rule spreads a prefix: a load costs the first
 * request on a new replica hundreds of milliseconds or more, far more than sharing a batch.
 */
export const residentTier: RouteTier = (f, cs) => {
  const resident = f.resident;
  if (resident === undefined) return undefined;
  const holders = cs.filter((c) => resident.has(c.view.id) && estimateMs(c, 0) <= f.ttftBudgetMs);
  if (holders.length === 0) return undefined;
  const among = (f.precise === undefined ? undefined : affinity('precise', f.precise, f, holders)) ?? loadTier(f, holders);
  // Residency decided: among the holders the prefix or the load only broke the tie (the receipt says which).
  return among === undefined ? undefined : { ...among, tier: 'adapter' };
};

/** Tier 2: the replica holding the longest useful prefix, by the engines' own KV events. */
export const preciseTier: RouteTier = (f, cs) => (f.precise === undefined ? undefined : affinity('precise', f.precise, f, cs));

/** Tier 3: the same rule over what was recently routed where. */
export const approximateTier: RouteTier = (f, cs) =>
  f.approximate === undefined ? undefined : affinity('approximate', f.approximate, f, cs);

/**
 * Tier 4: the fewest requests waiting for their first token (this gateway's or the engine's own
 * count, the larger), then the least queued prefill, then the fewest in flight, then the emptier
 * cache by whole prompts (cache-room.ts: every gateway's index agrees on it, their turns do not);
 * ties take turns.
 * What a new request waits behind is prefill, not answers being streamed: an engine runs a waiting
 * request's prefill as one step that nothing interrupts, while answering requests only add a token
 * each to the steps. Fewest in flight first sent an interactive request under a batch flood to the
 * replica in the middle of a batch prompt's step rather than to the one merely streaming two
 * answers (bench/admission.ts: that request's first token came one whole step later).
 */
export const loadTier: RouteTier = (f, cs) => {
  const ahead = (c: Candidate): number => Math.max(boundedCount(c), c.engineWaiting);
  const promptBlocks = Math.floor(f.promptTokens / (cs[0]?.view.blockSizeTokens ?? 16));
  const order = (a: Candidate, b: Candidate): number =>
    ahead(a) - ahead(b) ||
    a.queuedPrefillTokens - b.queuedPrefillTokens ||
    a.inFlight - b.inFlight ||
    a.engineWaiting - b.engineWaiting ||
    roomOrder(a.cachedBlocks, b.cachedBlocks, promptBlocks);
  const sorted = [...cs].sort(order);
  const first = sorted[0];
  if (first === undefined) return undefined;
  const tied = sorted.filter((c) => order(c, first) === 0);
  const pick = tied[f.turn % tied.length] ?? first;
  return { replica: pick.view, tier: 'load', predictedCachedTokens: f.precise?.get(pick.view.id) ?? 0 };
};
