// Route receipts: why a request went where it went. For each candidate, the numbers the tiers
// weighed (cached tokens predicted, prefill queued ahead, the learned rate, the estimated time to
// first token, whether it was too busy to be chosen for its cache), then the winner and the reason.
// The compact form rides on the response (x-llmgw-receipt); the whole receipt goes in the request's
// log line and stays readable at /debug/receipts?id=<x-request-id> for the last few thousand requests.
import type { ReplicaCost } from './cost-model.js';
import { affinityCap, boundedCount, estimateMs } from './tiers.js';
import type { Candidate, Choice, RouteFacts, WaitOrSpill } from './facts.js';
import type { PrefillOutcome } from './pd.js';

/** One candidate as the decision saw it. */
export interface CandidateReceipt {
  readonly replica: string;
  /** Cached prompt tokens predicted on it, and by which fact (precise index, approximate tree, none). */
  readonly cachedTokens: number;
  readonly cachedBy: 'precise' | 'approximate' | 'none';
  readonly inFlight: number;
  /** Of those, not yet answering. */
  readonly waiting: number;
  /** Uncached prefill this gateway has queued on it. */
  readonly queuedPrefillTokens: number;
  /** Its prefill rate as learned (or the prior), and where that came from. */
  readonly prefillTokensPerS: number;
  readonly rateSource: ReplicaCost['source'];
  /** How long its queue takes to clear, and the estimated time to first token of this request there. */
  readonly queueMs: number;
  readonly ttftMs: number;
  /** Over the TTFT budget or the bounded load: not chosen for its cache. */
  readonly saturated: boolean;
  /** Blocks its cache holds by the index, the load tier's last tie-break (cache-room.ts); absent: not known. */
  readonly cachedBlocks?: number;
}

/** One replica of a stream that moved after its engine broke off: where it ran and how that ended. */
export interface HopReceipt {
  readonly replica: string;
  readonly tier: Choice['tier'];
  /** Completion tokens the client had when this replica took over. */
  readonly fromToken: number;
  /** Why its stream broke (reset, timeout, error-event); absent for the one that finished. */
  readonly broke?: string;
}

/** The prefill hop of a disaggregated request: its outcome, and when sent, the prefill replica's own decision. */
export interface PdReceipt {
  readonly outcome: PrefillOutcome;
  /** What the decode replica was predicted to cache of the prompt, which the skip rule reads. */
  readonly decodeCachedTokens: number;
  readonly prefill?: { readonly replica: string; readonly tier: Choice['tier']; readonly cachedTokens: number; readonly reason: string } | undefined;
  /** Why the hop failed and the request went to its decode replica whole. */
  readonly error?: string | undefined;
}

/** Why one request went where it went. */
export interface RouteReceipt {
  readonly tier: Choice['tier'];
  readonly winner: string;
  readonly promptTokens: number;
  readonly ttftBudgetMs: number;
  readonly reason: string;
  readonly candidates: readonly CandidateReceipt[];
  /** A migrated stream's replicas in order; the rest of the receipt is the last one's decision. */
  readonly hops?: readonly HopReceipt[];
  /** A busy cache holder weighed against a spill: both estimates (rounded) and the one chosen; absent: no busy holder mattered. */
  readonly waitOrSpill?: WaitOrSpill | undefined;
  /** Prefill/decode disaggregation: how the prefill hop ended, where it ran and why (absent: the pool is not disaggregated). */
  readonly pd?: PdReceipt | undefined;
  /** The request's class, and how long it waited in the admission queue and why (absent: admission off). */
  readonly admission?: { readonly priority: string; readonly queuedMs: number; readonly why?: string } | undefined;
}

const ms = (v: number): number => Math.round(v * 10) / 10;

/** The receipt of a decision, from the very facts and candidates the tiers were given. */
export function receiptOf(
  policy: string,
  f: RouteFacts,
  cs: readonly Candidate[],
  choice: Choice,
  costOf: (id: string) => ReplicaCost | undefined,
): RouteReceipt {
  const cap = affinityCap(f, cs);
  const candidates = cs.map((c): CandidateReceipt => {
    const id = c.view.id;
    const precise = f.precise?.get(id);
    const approximate = f.approximate?.get(id);
    const cachedBy = precise !== undefined ? 'precise' : approximate !== undefined ? 'approximate' : 'none';
    const cachedTokens = Math.min(f.promptTokens, precise ?? approximate ?? 0);
    const cost = costOf(id);
    return {
      replica: id,
      cachedTokens,
      cachedBy,
      inFlight: c.inFlight,
      waiting: boundedCount(c),
      queuedPrefillTokens: c.queuedPrefillTokens,
      prefillTokensPerS: Math.round(c.prefillTokensPerS),
      rateSource: cost?.source ?? 'prior',
      queueMs: ms(estimateMs(c, 0)),
      ttftMs: ms((cost?.overheadMs ?? 0) + estimateMs(c, f.promptTokens - cachedTokens)),
      saturated: estimateMs(c, 0) > f.ttftBudgetMs || boundedCount(c) >= cap,
      ...(c.cachedBlocks === undefined ? {} : { cachedBlocks: c.cachedBlocks }),
    };
  });
  const winner = candidates.find((c) => c.replica === choice.replica.id);
  return {
    tier: choice.tier,
    winner: choice.replica.id,
    promptTokens: f.promptTokens,
    ttftBudgetMs: f.ttftBudgetMs,
    reason: winner === undefined ? 'chosen outside the candidates' : reasonOf(policy, f, choice, winner, candidates),
    candidates,
    ...(choice.waitOrSpill === undefined ? {} : { waitOrSpill: { ...choice.waitOrSpill, holderMs: ms(choice.waitOrSpill.holderMs), spillMs: ms(choice.waitOrSpill.spillMs) } }),
  };
}

function reasonOf(policy: string, f: RouteFacts, choice: Choice, w: CandidateReceipt, cs: readonly CandidateReceipt[]): string {
  if (policy === 'round-robin') return 'round-robin: its turn';
  const resident = f.resident;
  if (choice.tier === 'adapter' && resident !== undefined) {
    const holders = [...resident].sort().join(', ');
    const by = w.cachedTokens > 0 ? `holds ${w.cachedTokens} of ${f.promptTokens} prompt tokens` : `is the least loaded (${w.inFlight} in flight, ${w.queuedPrefillTokens} tokens queued)`;
    return `holds the request's adapter (held by ${holders}); of those it ${by}`;
  }
  // An adapter none of whose holders could take the request is loaded where the later tiers chose.
  const loads = resident === undefined ? '' : resident.size === 0 ? 'adapter held nowhere yet, loads here; ' : `adapter holders ${[...resident].sort().join(', ')} over the TTFT budget, loads here too; `;
  return loads + prefixReasonOf(f, choice, w, cs);
}

function prefixReasonOf(f: RouteFacts, choice: Choice, w: CandidateReceipt, cs: readonly CandidateReceipt[]): string {
  const ws = choice.waitOrSpill;
  if (ws !== undefined) {
    const holder = `busy holder ${ws.holder} (its queue and the uncached rest est. ${ms(ws.holderMs)} ms)`;
    const spill = `${ws.spillTo} (est. ${ms(ws.spillMs)} ms for what it does not hold)`;
    if (ws.chose === 'holder') return `waits for ${holder} rather than spill to ${spill}; holds ${w.cachedTokens} of ${f.promptTokens} prompt tokens`;
    const why = ws.pastDeadline ? `its wait is past the request's deadline (${ms(f.deadlineMs ?? 0)} ms)` : 'spilling is sooner';
    return `spills to ${spill} rather than wait for ${holder}: ${why}`;
  }
  const others = cs.filter((c) => c.replica !== w.replica);
  const fastest = others.reduce<CandidateReceipt | undefined>((b, c) => (b === undefined || c.ttftMs < b.ttftMs ? c : b), undefined);
  if (choice.tier === 'session' && f.session !== undefined) {
    const by = f.session.via === 'token' ? 'its x-session-token' : 'its X-Session-ID, hashed over the replicas';
    return `the session's replica, named by ${by}; holds ${w.cachedTokens} of ${f.promptTokens} prompt tokens, est. TTFT ${w.ttftMs} ms`;
  }
  if (choice.tier !== 'load') {
    const vs = fastest === undefined ? 'the only replica' : `${fastest.replica} ${fastest.ttftMs} ms`;
    return `holds ${w.cachedTokens} of ${f.promptTokens} prompt tokens (${choice.tier}); est. TTFT ${w.ttftMs} ms against ${vs}`;
  }
  const busyHolders = cs.filter((c) => c.cachedTokens > 0 && c.saturated).map((c) => c.replica);
  const why =
    busyHolders.length > 0
      ? `holders ${busyHolders.join(', ')} saturated (queue over ${f.ttftBudgetMs} ms or too many waiting)`
      : cs.some((c) => c.cachedTokens > 0)
        ? 'no holder was faster than an idle replica'
        : 'no replica holds a prefix';
  const room = w.cachedBlocks === undefined ? '' : `, ${w.cachedBlocks} blocks cached`;
  return `${why}; least loaded: ${w.inFlight} in flight, ${w.waiting} waiting, ${w.queuedPrefillTokens} tokens queued${room}`;
}

/**
 * The receipt in one header line: `tier=precise; to=a; a=6016c,0q,312ms; b=16c,4000q,1820ms!` (`!`:
 * saturated); with a busy holder weighed, `wait=holder:45ms|spill:310ms->holder` (or `->spill`); in a
 * disaggregated pool, `pd=sent:p1` (the prefill replica) or `pd=cached` (why the hop was skipped).
 */
export function compactReceipt(r: RouteReceipt): string {
  const each = r.candidates.map((c) => `${c.replica}=${c.cachedTokens}c,${c.queuedPrefillTokens}q,${Math.round(c.ttftMs)}ms${c.saturated ? '!' : ''}`);
  const queued = r.admission?.why === undefined ? [] : [`queued=${r.admission.queuedMs}ms`];
  const ws = r.waitOrSpill;
  const wait = ws === undefined ? [] : [`wait=holder:${Math.round(ws.holderMs)}ms|spill:${Math.round(ws.spillMs)}ms->${ws.chose}${ws.pastDeadline ? '(deadline)' : ''}`];
  const pd = r.pd === undefined ? [] : [`pd=${r.pd.outcome}${r.pd.prefill === undefined ? '' : `:${r.pd.prefill.replica}`}`];
  return [`tier=${r.tier}`, `to=${r.winner}`, ...pd, ...queued, ...wait, ...each].join('; ');
}

/**
 * The last `capacity` receipts by request id; the oldest is dropped first. Kept as routing made
 * them: a copy with its id each, made for every request, cost the event loop more than the rare
 * reader who asks for one.
 */
export class ReceiptRing {
  readonly #byId = new Map<string, RouteReceipt>();
  readonly #capacity: number;

  constructor(capacity: number) {
    this.#capacity = capacity;
  }

  add(reqId: string, r: RouteReceipt): void {
    this.#byId.set(reqId, r);
    if (this.#byId.size > this.#capacity) {
      const oldest = this.#byId.keys().next();
      if (oldest.done !== true) this.#byId.delete(oldest.value);
    }
  }

  get(reqId: string): (RouteReceipt & { readonly reqId: string }) | undefined {
    const r = this.#byId.get(reqId);
    return r === undefined ? undefined : { reqId, ...r };
  }

  /** The newest `n`, newest first. */
  recent(n: number): (RouteReceipt & { readonly reqId: string })[] {
    return [...this.#byId].slice(-n).reverse().map(([reqId, r]) => ({ reqId, ...r }));
  }
}
