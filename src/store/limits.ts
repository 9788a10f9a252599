// The admission decision of a key with limits, as a pure function of what the database holds: the
// per-minute buckets, what the key spent today and this month (the ledger's sums) and what its
// requests in flight hold. The scheme is the gateway's in-memory one (a request reserves its bound,
// settles with what the engine reported), so concurrent requests cannot together spend past a limit.
import { LlmgwError, RateLimitError } from '../errors/index.js';

/** The limits of one key; 0 is none. */
export interface KeyLimits {
  readonly name: string;
  readonly requestsPerMinute: number;
  readonly tokensPerMinute: number;
  readonly tokensPerDay: number;
  readonly tokensPerMonth: number;
  readonly costPerDayMicros: number;
  readonly costPerMonthMicros: number;
}

/** Micro-dollars a token of one model (dollars per million tokens, read as micro-dollars per token). */
export interface TokenPrice {
  readonly prompt: number;
  readonly cached: number;
  readonly completion: number;
}

/** A per-minute bucket as stored: its level at `at` (ms). */
export interface Bucket {
  readonly level: number;
  readonly at: number;
}

/** Tokens and micro-dollars. */
export interface Amount {
  readonly tokens: number;
  readonly costMicros: number;
}

/** Everything the decision reads. */
export interface AdmitFacts {
  readonly now: number;
  readonly limits: KeyLimits;
  readonly price: TokenPrice | undefined;
  readonly requests: Bucket | undefined;
  readonly tokens: Bucket | undefined;
  readonly day: Amount;
  readonly month: Amount;
  /** What the key's other requests in flight hold. */
  readonly held: Amount;
  readonly promptTokens: number;
  /** max_tokens x n; undefined when the client set no limit. */
  readonly completionTokens: number | undefined;
}

/** An admitted request: what it holds, the buckets to store, and the completion limit to impose. */
export interface AdmitDecision {
  readonly hold: Amount;
  readonly requests: Bucket | undefined;
  readonly tokens: Bucket | undefined;
  readonly impose: number | undefined;
}

const dayMs = 86_400_000;

// The last day asked for and its names: the ledger asks once a row, nearly always for the day it
// asked last, and formatting the date was 0.5% of a loaded gateway's main thread (issue 51).
let lastDay = NaN;
let lastPeriods: { readonly day: string; readonly month: string } = { day: '', month: '' };

/** The UTC day and month a time falls in, as the ledger's spend periods name them. */
export function periodsOf(ms: number): { readonly day: string; readonly month: string } {
  const day = Math.floor(ms / dayMs);
  if (day !== lastDay) {
    const iso = new Date(ms).toISOString();
    lastPeriods = Object.freeze({ day: `d${iso.slice(0, 10)}`, month: `m${iso.slice(0, 7)}` });
    lastDay = day;
  }
  return lastPeriods;
}

function secondsToNextDay(now: number): number {
  return (dayMs - (now % dayMs)) / 1000;
}

function secondsToNextMonth(now: number): number {
  const d = new Date(now);
  return (Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1) - now) / 1000;
}

function refill(b: Bucket | undefined, perMinute: number, now: number): number {
  if (b === undefined) return perMinute;
  return Math.min(perMinute, b.level + (Math.max(0, now - b.at) * perMinute) / 60_000);
}

// One budget the request must fit: how many tokens are left in it, and how to say it is spent.
interface Room {
  readonly left: number;
  readonly spent: () => LlmgwError;
}

/** Admits the request or throws RateLimitError (LLMGW_RATE_LIMITED per minute, LLMGW_BUDGET per day or month). */
export function decide(f: AdmitFacts): AdmitDecision {
  const l = f.limits;
  const key = `key "${l.name}"`;
  const rpm = l.requestsPerMinute;
  const rLevel = rpm > 0 ? refill(f.requests, rpm, f.now) : undefined;
  if (rLevel !== undefined && rLevel < 1) {
    throw new RateLimitError(`${key} made its ${rpm} requests per minute; wait, or raise its requests_per_minute`, ((1 - rLevel) * 60_000) / rpm / 1000);
  }
  const prompt = Math.max(0, Math.ceil(f.promptTokens));
  const tLevel = l.tokensPerMinute > 0 ? refill(f.tokens, l.tokensPerMinute, f.now) : undefined;
  const p = f.price;
  // Token rooms count prompt and completion alike; a cost room is turned into the completion tokens it pays for.
  const rooms: Room[] = [];
  if (tLevel !== undefined) {
    rooms.push({
      left: tLevel,
      spent: () =>
        new RateLimitError(
          `${key} has ${Math.max(0, Math.floor(tLevel))} of its ${l.tokensPerMinute} tokens per minute left; wait, lower max_tokens, or raise its tokens_per_minute`,
          Math.max(1, ((prompt + 1 - tLevel) * 60_000) / l.tokensPerMinute / 1000),
        ),
    });
  }
  const budget = (limit: number, used: number, what: string, retryS: number): void => {
    if (limit <= 0) return;
    const left = limit - used - f.held.tokens;
    rooms.push({
      left,
      spent: () => new RateLimitError(`${key} has spent its ${limit} tokens per ${what} (${used} used, ${f.held.tokens} held by requests in flight); wait for the next ${what} (UTC) or raise its tokens_per_${what}`, retryS, 'LLMGW_BUDGET'),
    });
  };
  budget(l.tokensPerDay, f.day.tokens, 'day', secondsToNextDay(f.now));
  budget(l.tokensPerMonth, f.month.tokens, 'month', secondsToNextMonth(f.now));
  const costBudget = (limit: number, used: number, what: string, retryS: number): void => {
    if (limit <= 0 || p === undefined) return;
    const leftMicros = limit - used - f.held.costMicros;
    const spent = (): LlmgwError =>
      new RateLimitError(`${key} has spent its $${limit / 1e6} per ${what} ($${used / 1e6} used); wait for the next ${what} (UTC) or raise its cost_per_${what}`, retryS, 'LLMGW_BUDGET');
    // With no price for completion tokens, only the prompt's cost can exhaust it.
    const completionLeft = p.completion > 0 ? (leftMicros - prompt * p.prompt) / p.completion : leftMicros - prompt * p.prompt >= 0 ? Infinity : -1;
    rooms.push({ left: prompt + completionLeft, spent });
  };
  costBudget(l.costPerDayMicros, f.day.costMicros, 'day', secondsToNextDay(f.now));
  costBudget(l.costPerMonthMicros, f.month.costMicros, 'month', secondsToNextMonth(f.now));

  const tightest = rooms.reduce<Room | undefined>((a, r) => (a === undefined || r.left < a.left ? r : a), undefined);
  const impose = f.completionTokens === undefined && tightest !== undefined && Number.isFinite(tightest.left) ? Math.floor(tightest.left - prompt) : undefined;
  const need = prompt + (f.completionTokens ?? Math.max(1, impose ?? 0));
  if (tLevel !== undefined && need > l.tokensPerMinute) {
    throw new RateLimitError(
      `${key}: this request may use ${need} tokens (prompt at most ${prompt} plus max_tokens), more than its ${l.tokensPerMinute} tokens per minute; lower max_tokens or shorten the prompt, or raise its tokens_per_minute`,
      60,
    );
  }
  for (const r of rooms) if (r.left < need) throw r.spent();
  const costMicros = p === undefined ? 0 : prompt * p.prompt + (need - prompt) * p.completion;
  return {
    hold: { tokens: need, costMicros },
    requests: rLevel === undefined ? undefined : { level: rLevel - 1, at: f.now },
    tokens: tLevel === undefined ? undefined : { level: tLevel - need, at: f.now },
    impose: impose === undefined ? undefined : Math.max(1, impose),
  };
}

/** What a finished request cost in micro-dollars (0 without a price for its model). */
export function costOf(price: TokenPrice | undefined, u: { promptTokens: number; cachedTokens: number; completionTokens: number }): number {
  if (price === undefined) return 0;
  const uncached = Math.max(0, u.promptTokens - u.cachedTokens);
  return Math.round(uncached * price.prompt + u.cachedTokens * price.cached + u.completionTokens * price.completion);
}
