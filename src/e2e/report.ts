// What one policy did on one workload, summarised, and the chart of every run: the figures a
// reader compares (TTFT percentiles, latency, throughput, hit rate from the engines' own usage,
// balance across replicas) with each policy's cached tokens shown as a share of the oracle's.
import type { RequestResult } from './drive.js';

/** Percentiles of a sample, in its unit. */
export interface Percentiles {
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly mean: number;
}

/** One policy on one workload. */
export interface RunSummary {
  readonly policy: string;
  readonly shape: string;
  readonly requests: number;
  readonly failed: number;
  readonly ttftMs: Percentiles;
  /**
   * TTFT of the requests after the first quarter of the trace: the steady state. Every workload
   * starts with every cache cold, a burst of first uses that every policy (the oracle too) must
   * prefill; the whole-run figures keep it, these leave it out.
   */
  readonly ttftSteadyMs: Percentiles;
  readonly e2eMs: Percentiles;
  readonly requestsPerS: number;
  readonly outputTokensPerS: number;
  /** The gateway's mean time to decide (tokenize and score included), from its own histogram. */
  readonly routingMsMean: number;
  readonly promptTokens: number;
  readonly cachedTokens: number;
  /** Cached over prompt tokens, from the engines' usage. */
  readonly hitRate: number;
  /** Cached tokens over the oracle's on the same trace. */
  readonly oracleShare: number;
  /** Requests per replica, and the busiest over the mean (1 is perfectly even). */
  readonly perReplica: Readonly<Record<string, number>>;
  readonly imbalance: number;
  /** Decisions by the tier that made them (x-llmgw-route). */
  readonly tiers: Readonly<Record<string, number>>;
  /** Busy cache holders weighed (the receipt's `wait=`): how many requests waited for one, how many spilled. */
  readonly waitOrSpill: { readonly holder: number; readonly spill: number };
  /** Which of `--repeat` runs this was (1 is the first). */
  readonly repeat?: number;
  /** Requests whose prompt the engine counted differently from the bench (the oracle's tokens would be wrong). */
  readonly tokenMismatches: number;
}

/** Nearest-rank percentiles; NaN for an empty sample. */
export function percentiles(xs: readonly number[]): Percentiles {
  const s = [...xs].sort((a, b) => a - b);
  const at = (p: number): number => (s.length === 0 ? NaN : (s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] ?? NaN));
  const mean = s.length === 0 ? NaN : s.reduce((a, b) => a + b, 0) / s.length;
  return { p50: at(50), p90: at(90), p99: at(99), mean };
}

const round = (v: number, d = 1): number => (Number.isFinite(v) ? Math.round(v * 10 ** d) / 10 ** d : v);
const roundAll = (p: Percentiles): Percentiles => ({ p50: round(p.p50), p90: round(p.p90), p99: round(p.p99), mean: round(p.mean) });
const count = (xs: readonly string[]): Record<string, number> => {
  const out: Record<string, number> = {};
  for (const x of xs) out[x] = (out[x] ?? 0) + 1;
  return out;
};

/** Summarises one run; `expectedPromptTokens` are the bench's own counts, `oracleCachedTokens` the oracle's total. */
export function summarise(
  run: { policy: string; shape: string; results: readonly RequestResult[]; wallMs: number; routingMsMean: number },
  expectedPromptTokens: readonly number[],
  oracleCachedTokens: number,
): RunSummary {
  const ok = run.results.filter((r) => r.status === 200);
  const promptTokens = ok.reduce((n, r) => n + (r.promptTokens ?? 0), 0);
  const cachedTokens = ok.reduce((n, r) => n + r.cachedTokens, 0);
  const perReplica = count(ok.map((r) => r.replica));
  const loads = Object.values(perReplica);
  const mean = loads.length === 0 ? 0 : loads.reduce((a, b) => a + b, 0) / loads.length;
  const seconds = run.wallMs / 1000;
  return {
    policy: run.policy,
    shape: run.shape,
    requests: run.results.length,
    failed: run.results.length - ok.length,
    ttftMs: roundAll(percentiles(ok.flatMap((r) => (r.ttftMs === undefined ? [] : [r.ttftMs])))),
    ttftSteadyMs: roundAll(percentiles(ok.flatMap((r) => (r.ttftMs === undefined || r.id < run.results.length / 4 ? [] : [r.ttftMs])))),
    e2eMs: roundAll(percentiles(ok.map((r) => r.e2eMs))),
    requestsPerS: round(ok.length / seconds, 2),
    outputTokensPerS: round(ok.reduce((n, r) => n + r.completionTokens, 0) / seconds),
    routingMsMean: round(run.routingMsMean, 2),
    promptTokens,
    cachedTokens,
    hitRate: round(promptTokens === 0 ? 0 : cachedTokens / promptTokens, 3),
    oracleShare: round(oracleCachedTokens === 0 ? 1 : cachedTokens / oracleCachedTokens, 3),
    perReplica,
    imbalance: round(mean === 0 ? 1 : Math.max(...loads) / mean, 2),
    tiers: count(ok.map((r) => r.route)),
    waitOrSpill: { holder: ok.filter((r) => r.receipt?.includes('->holder') === true).length, spill: ok.filter((r) => r.receipt?.includes('->spill') === true).length },
    tokenMismatches: ok.filter((r) => r.promptTokens !== expectedPromptTokens[r.id]).length,
  };
}

const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const palette = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2', '#b07aa1'];

/**
 * Two panels, one group of bars per workload and one bar per policy: cached tokens as a share of
 * the oracle (linear, the oracle drawn at 1), and TTFT p90 (log scale, so a 10x gap stays readable).
 */
export function chartSvg(runs: readonly RunSummary[], title: string): string {
  const shapesSeen = [...new Set(runs.map((r) => r.shape))];
  const policies = [...new Set(runs.map((r) => r.policy))];
  const W = 460;
  const H = 300;
  const pad = { l: 56, r: 12, t: 40, b: 56 };
  const plotW = W - pad.l - pad.r;
  const plotH = H - pad.t - pad.b;
  const groupW = plotW / Math.max(1, shapesSeen.length);
  const barW = (groupW * 0.8) / Math.max(1, policies.length);
  const ttfts = runs.map((r) => r.ttftSteadyMs.p90).filter((v) => Number.isFinite(v) && v > 0);
  const lo = Math.pow(10, Math.floor(Math.log10(Math.min(...ttfts, 10))));
  const hi = Math.pow(10, Math.ceil(Math.log10(Math.max(...ttfts, 100))));
  const panel = (x0: number, name: string, value: (r: RunSummary) => number, y: (v: number) => number, ticks: readonly { v: number; label: string }[], fmt: (v: number) => string): string => {
    let s = `<g transform="translate(${x0},0)"><text x="${pad.l + plotW / 2}" y="24" text-anchor="middle" font-weight="bold">${esc(name)}</text>`;
    for (const t of ticks) {
      const ty = pad.t + plotH - y(t.v) * plotH;
      s += `<line x1="${pad.l}" x2="${pad.l + plotW}" y1="${ty}" y2="${ty}" stroke="#ddd"/><text x="${pad.l - 6}" y="${ty + 4}" text-anchor="end">${esc(t.label)}</text>`;
    }
    shapesSeen.forEach((shape, g) => {
      const gx = pad.l + g * groupW + groupW * 0.1;
      policies.forEach((policy, i) => {
        const r = runs.find((x) => x.shape === shape && x.policy === policy);
        if (r === undefined) return;
        const v = value(r);
        const h = Math.max(0, Math.min(1, y(v))) * plotH;
        const bx = gx + i * barW;
        s += `<rect x="${bx.toFixed(1)}" y="${(pad.t + plotH - h).toFixed(1)}" width="${(barW * 0.9).toFixed(1)}" height="${h.toFixed(1)}" fill="${palette[i % palette.length] ?? '#999'}"><title>${esc(`${policy} on ${shape}: ${fmt(v)}`)}</title></rect>`;
        s += `<text x="${(bx + barW * 0.45).toFixed(1)}" y="${(pad.t + plotH - h - 3).toFixed(1)}" text-anchor="middle" font-size="9">${esc(fmt(v))}</text>`;
      });
      s += `<text x="${pad.l + g * groupW + groupW / 2}" y="${pad.t + plotH + 16}" text-anchor="middle">${esc(shape)}</text>`;
    });
    return `${s}<line x1="${pad.l}" x2="${pad.l + plotW}" y1="${pad.t + plotH}" y2="${pad.t + plotH}" stroke="#333"/></g>`;
  };
  const share = panel(0, 'cached tokens / oracle', (r) => r.oracleShare, (v) => v, [0, 0.25, 0.5, 0.75, 1].map((v) => ({ v, label: v.toFixed(2) })), (v) => v.toFixed(2));
  const logTicks: { v: number; label: string }[] = [];
  for (let v = lo; v <= hi; v *= 10) logTicks.push({ v, label: v >= 1000 ? `${v / 1000} s` : `${v} ms` });
  const logY = (v: number): number => (v <= 0 ? 0 : (Math.log10(v) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo)));
  const ttft = panel(W, 'TTFT p90, steady state (log)', (r) => r.ttftSteadyMs.p90, logY, logTicks, (v) => (v >= 1000 ? `${(v / 1000).toFixed(1)}s` : `${Math.round(v)}`));
  const legend = policies
    .map((p, i) => `<rect x="${pad.l + i * 130}" y="${H + 4}" width="12" height="12" fill="${palette[i % palette.length] ?? '#999'}"/><text x="${pad.l + i * 130 + 16}" y="${H + 14}">${esc(p)}</text>`)
    .join('');
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${2 * W}" height="${H + 48}" font-family="sans-serif" font-size="11">
<rect width="100%" height="100%" fill="#fff"/>
<text x="${W}" y="${H + 38}" text-anchor="middle" fill="#555">${esc(title)}</text>
${share}
${ttft}
${legend}
</svg>
`;
}
