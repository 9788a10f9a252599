// What each replica's prefill really costs, learned from what the gateway sees, so the tiers weigh
// time to first token with the replica's own speed rather than one configured guess. A gateway that
// assumes 8000 tokens/s of a replica doing 20000 thinks its queue 2.5 times longer than it is and
// breaks affinity far too early; one that assumes 20000 of a replica slowed to 2000 (a noisy
// neighbour, thermal throttling, a long decode batch) piles work on it long after it saturated.
//
// Two sources, the configured rate only the prior of both:
// - the engine's own metrics (vLLM's prefill-time histogram against the prompt tokens it computed,
//   its queue-time histogram and waiting gauge): direct, but a request's prefill time also covers
//   the others batched with it, so the rate they give is a lower bound. It replaces the prior and
//   is the floor of the estimate.
// - time to first byte of each streamed answer against its own uncached prefill, for answers sent
//   when nothing of ours was queued ahead on that replica: a least-squares line
//   ttfb = overhead + tokens / rate, with exponential forgetting so a replica that slows down is
//   seen within a few tens of requests. Answers that waited behind others are left out: what was
//   ahead is the gateway's own prediction, and fitting on it fed its error back (measured under
//   overload: learned rates from 8k to 209k tokens/s for a sim doing 20k). The prior is a pull toward its line (no overhead, the prior
//   rate) worth `priorWeight` observations, forgotten twice as fast as the data down to a faint permanent pull
//   that keeps the line defined when every request is alike. A pull, not pseudo-points: a point
//   far off the data's line would tilt it.
// Pure: observations in, estimates out; no clock, no I/O.

/** How the model learns; the defaults suit engines answering a few requests a second. */
export interface CostModelOptions {
  /** The prefill rate assumed before anything is known (gateway.router.prefill_tokens_per_s). */
  readonly priorPrefillTokensPerS: number;
  /** How many observations the prior is worth at the start. */
  readonly priorWeight: number;
  /** Weight kept by older observations at each new one: 0.95 remembers about the last 20. */
  readonly decay: number;
  /** Uncached tokens at which the prior's pseudo-observations sit (the scale of a typical prompt). */
  readonly referenceTokens: number;
}

/** Defaults, with the prior left to the caller. */
export const costModelDefaults: Omit<CostModelOptions, 'priorPrefillTokensPerS'> = { priorWeight: 1, decay: 0.95, referenceTokens: 4096 };

/** One streamed request's first byte: how long it took and the prefill it waited for. */
export interface FirstByte {
  /** Prompt tokens the engine computed for it (prompt less cached, from its usage). */
  readonly uncachedTokens: number;
  /** Uncached prefill this gateway had sent the replica and not yet seen answered, when it was sent (above 0: not learned from). */
  readonly aheadTokens: number;
  readonly ttfbMs: number;
}

/** Cumulative figures from one scrape of an engine's /metrics (vLLM's names); absent: not exported. */
export interface EngineScrape {
  readonly waiting?: number | undefined;
  readonly promptTokens?: number | undefined;
  readonly cachedTokens?: number | undefined;
  readonly prefillSeconds?: number | undefined;
  readonly prefillRequests?: number | undefined;
  readonly queueSeconds?: number | undefined;
  readonly queueRequests?: number | undefined;
}

/** What the tiers read of a replica: its costs as learned so far. */
export interface ReplicaCost {
  readonly prefillTokensPerS: number;
  /** Time to first byte with nothing to prefill: network, the first decode step. */
  readonly overheadMs: number;
  /** Mean time the engine's recent requests waited in its own queue (its histogram); 0 when unknown. */
  readonly engineQueueMs: number;
  /** Requests waiting in the engine's queue at the last scrape. */
  readonly engineWaiting: number;
  /** Where the rate comes from. */
  readonly source: 'prior' | 'engine' | 'ttfb';
  /** First bytes observed (before forgetting). */
  readonly observations: number;
}

// Weighted sums of the least-squares line, all decaying together.
interface Fit {
  w: number;
  x: number;
  y: number;
  xx: number;
  xy: number;
}

interface State {
  fit: Fit;
  /** The prior's pull, in observations. */
  priorStrength: number;
  observations: number;
  priorRate: number;
  priorFromEngine: boolean;
  /** The engine's own rate, a lower bound on its throughput; 0 until scraped. */
  engineRate: number;
  engineQueueMs: number;
  engineWaiting: number;
  last: EngineScrape | undefined;
}

// The permanent pull toward the prior, as a fraction of one observation: enough to define the line
// when all requests are the same size, too little to bias it when they are not.
const faint = 0.002;
// Rates outside this band are measurement noise (a first byte that beat the network, a stalled scrape).
const minRate = 1;
// Below this spread of request sizes (standard deviation, in uncached tokens) the slope is not learned.
const minSpreadTokens = 256;
const maxRate = 100_000_000;

/** Per-replica prefill rate and queueing, learned online; the tiers read `estimate(id)`. */
export class CostModel {
  readonly #o: CostModelOptions;
  readonly #byId = new Map<string, State>();

  constructor(o: Partial<CostModelOptions> & { priorPrefillTokensPerS: number }) {
    this.#o = { ...costModelDefaults, ...o };
  }

  #state(id: string, prior?: number): State {
    let s = this.#byId.get(id);
    if (s === undefined) {
      const priorRate = prior ?? this.#o.priorPrefillTokensPerS;
      s = { fit: { w: 0, x: 0, y: 0, xx: 0, xy: 0 }, priorStrength: this.#o.priorWeight, observations: 0, priorRate, priorFromEngine: false, engineRate: 0, engineQueueMs: 0, engineWaiting: 0, last: undefined };
      this.#byId.set(id, s);
    }
    return s;
  }

  /** A streamed answer's first byte on replica `id`. `prior` is the replica's own stated rate, if any. */
  observeFirstByte(id: string, o: FirstByte, prior?: number): void {
    if (o.aheadTokens > 0) return;
    const x = Math.max(0, o.uncachedTokens);
    if (!Number.isFinite(x) || !Number.isFinite(o.ttfbMs) || o.ttfbMs < 0) return;
    const s = this.#state(id, prior);
    const f = s.fit;
    const d = this.#o.decay;
    f.w = f.w * d + 1;
    f.x = f.x * d + x;
    f.y = f.y * d + o.ttfbMs;
    f.xx = f.xx * d + x * x;
    f.xy = f.xy * d + x * o.ttfbMs;
    s.priorStrength *= d * d;
    s.observations++;
  }

  /** One scrape of the engine's /metrics (cumulative values); differences from the last scrape are what count. */
  observeScrape(id: string, now: EngineScrape, prior?: number): void {
    const s = this.#state(id, prior);
    if (now.waiting !== undefined) s.engineWaiting = now.waiting;
    const last = s.last;
    s.last = now;
    if (last === undefined) return;
    const delta = (k: keyof EngineScrape): number | undefined => {
      const a = now[k];
      const b = last[k];
      // A counter that went down is an engine that restarted: this interval says nothing.
      return a === undefined || b === undefined || a < b ? undefined : a - b;
    };
    const queued = delta('queueRequests');
    const queueSeconds = delta('queueSeconds');
    if (queued !== undefined && queueSeconds !== undefined && queued > 0) s.engineQueueMs = (queueSeconds * 1000) / queued;
    else if (s.engineWaiting === 0) s.engineQueueMs = 0;
    const computed = (delta('promptTokens') ?? NaN) - (delta('cachedTokens') ?? NaN);
    const seconds = delta('prefillSeconds');
    if (!(computed > 0) || seconds === undefined || !(seconds > 0)) return;
    const rate = computed / seconds;
    if (rate < minRate || rate > maxRate) return;
    // The engine's measure replaces the configured prior: the whole estimate while no first byte
    // was seen, afterwards the faint pull that keeps the line defined.
    s.priorRate = s.priorFromEngine ? 0.5 * s.priorRate + 0.5 * rate : rate;
    s.priorFromEngine = true;
    s.engineRate = s.priorRate;
  }

  /** The replica's costs as known now; `prior` is its own stated rate, if any. */
  estimate(id: string, prior?: number): ReplicaCost {
    const s = this.#byId.get(id);
    const priorRate = s?.priorRate ?? prior ?? this.#o.priorPrefillTokensPerS;
    if (s === undefined) return { prefillTokensPerS: priorRate, overheadMs: 0, engineQueueMs: 0, engineWaiting: 0, source: 'prior', observations: 0 };
    // Weighted least squares with a ridge toward the prior's line: overhead 0, slope 1000/priorRate;
    // the slope's pull is scaled by the reference size so both pulls are in observations.
    const f = s.fit;
    const pull = s.priorStrength + faint;
    const ref = this.#o.referenceTokens;
    const priorSlope = 1000 / priorRate;
    const a11 = f.w + pull;
    const a12 = f.x;
    const a22 = f.xx + pull * ref * ref;
    const b1 = f.y;
    const b2 = f.xy + pull * ref * ref * priorSlope;
    const det = a11 * a22 - a12 * a12;
    // A line needs requests of different sizes: a window of cache hits alone says nothing of the
    // slope (measured: its jitter alone sent the learned rate past 150k tokens/s), so the prior's
    // slope holds and the data give the overhead.
    const spread = f.w > 0 ? Math.sqrt(Math.max(0, f.xx / f.w - (f.x / f.w) ** 2)) : 0;
    const identifiable = det > 0 && spread >= minSpreadTokens;
    let slope = identifiable ? (a11 * b2 - a12 * b1) / det : priorSlope;
    let intercept = identifiable ? (b1 - a12 * slope) / a11 : f.w > 0 ? (f.y - slope * f.x) / (f.w + pull) : 0;
    // A negative overhead means the line tilted through noise: refit through the origin instead.
    if (intercept < 0) {
      intercept = 0;
      slope = b2 / a22;
    }
    // The engine's own rate is a floor; a hundred times the prior a ceiling against a line tilted by a few outliers.
    const learned = slope > 0 ? 1000 / slope : priorRate;
    const rate = Math.min(maxRate, 100 * priorRate, Math.max(minRate, s.engineRate, learned));
    return {
      prefillTokensPerS: rate,
      overheadMs: intercept,
      engineQueueMs: s.engineQueueMs,
      engineWaiting: s.engineWaiting,
      source: s.observations > 0 ? 'ttfb' : s.priorFromEngine ? 'engine' : 'prior',
      observations: s.observations,
    };
  }

  /**
   * Each replica's prefill rate for the tiers, `stated` its own configured rate (absent: the gateway's
   * prior). A replica with no rate of its own and nothing measured yet takes the median of its
   * measured peers: replicas of one model are alike far more often than not, and weighing one's
   * measured rate against another's configured guess makes the guessed one look slower or faster for
   * no reason (seen on the README's tour: a first follow-up holding its prefix went `load` because the
   * idle replica was measured at the engine's rate and the holder still stood at the prior).
   */
  ratesOf(replicas: readonly { readonly id: string; readonly stated?: number | undefined }[]): number[] {
    const costs = replicas.map((r) => this.estimate(r.id, r.stated));
    const measured = costs.filter((c) => c.source !== 'prior').map((c) => c.prefillTokensPerS).sort((a, b) => a - b);
    const median = measured.length === 0 ? undefined : measured[Math.floor(measured.length / 2)];
    return costs.map((c, i) => (median !== undefined && c.source === 'prior' && replicas[i]?.stated === undefined ? median : c.prefillTokensPerS));
  }

  /** A replica that restarted or left: what was learned of it no longer holds. */
  forget(id: string): void {
    this.#byId.delete(id);
  }
}
