// `llmgw bench e2e --shape pd`: prefill/decode disaggregation against the same sims aggregated, on
// one trace of long prompts and long answers, in one run. What disaggregation buys is steady decoding:
// on an aggregated replica every new prompt's prefill shares the engine's steps with the answers
// streaming there, and each such step stalls them all; on a decode replica a prompt arrives as
// blocks read from a prefill replica, and only its last token is computed. What it costs is the
// hop and the transfer before the first token.
import { driveTrace } from './drive.js';
import type { RequestResult } from './drive.js';
import { startFleet } from './fleet.js';
import type { Fleet } from './fleet.js';
import { percentiles } from './report.js';
import type { Percentiles } from './report.js';
import { generateTrace, workloadDefaults } from './workload.js';
import type { WorkloadOptions } from './workload.js';

/** What the P/D comparison takes. */
export interface PdOptions {
  readonly llmgw: readonly string[];
  /** Replicas on each side: `prefill` + `decode` disaggregated against as many aggregated. */
  readonly prefill: number;
  readonly decode: number;
  readonly workload: WorkloadOptions;
  readonly capacityBlocks: number;
  readonly blockSizeTokens: number;
  readonly prefillTokensPerS: number;
  readonly decodeTokensPerS: number;
  readonly requestTimeoutMs: number;
  readonly logFile: string;
  readonly progress: (line: string) => void;
}

/** One fleet on the trace. */
export interface PdRun {
  readonly label: string;
  readonly requests: number;
  readonly failed: number;
  readonly ttftMs: Percentiles;
  /** Every gap between successive tokens of every answer. */
  readonly itlMs: Percentiles;
  /** Requests by the receipt's pd= (sent:<replica> counted as sent), for the disaggregated fleet. */
  readonly prefillHops: Readonly<Record<string, number>>;
}

/** The two runs and their ratios (aggregated over disaggregated: above 1, disaggregation is faster). */
export interface PdReport {
  readonly workload: WorkloadOptions;
  readonly runs: readonly PdRun[];
  readonly aggregatedOverPd: { readonly itlP50: number; readonly itlP99: number; readonly ttftP50: number; readonly ttftP99: number };
}

/**
 * Long documents, each asked two questions, answers of hundreds of tokens, arriving fast enough that
 * every replica streams several answers while new documents are prefilled. A follow-up question is
 * shorter than the skip threshold, so its decode replica (holding the document) takes it whole.
 */
export function pdWorkload(quick: boolean): WorkloadOptions {
  const w = { ...workloadDefaults('long-doc'), outputTokens: 256, ratePerS: 4, groups: 24, perGroup: 2, prefixTokens: 12_000, questionTokens: 200 };
  return quick ? { ...w, groups: 3, perGroup: 2, prefixTokens: 2_000, outputTokens: 32, ratePerS: 10 } : w;
}

const round = (p: Percentiles): Percentiles => ({ p50: Math.round(p.p50 * 10) / 10, p90: Math.round(p.p90 * 10) / 10, p99: Math.round(p.p99 * 10) / 10, mean: Math.round(p.mean * 10) / 10 });

function summary(label: string, results: readonly RequestResult[]): PdRun {
  const ok = results.filter((r) => r.status === 200);
  const hops: Record<string, number> = {};
  for (const r of ok) {
    const pd = /pd=([a-z-]+)/.exec(r.receipt ?? '')?.[1];
    if (pd !== undefined) hops[pd] = (hops[pd] ?? 0) + 1;
  }
  return {
    label,
    requests: results.length,
    failed: results.length - ok.length,
    ttftMs: round(percentiles(ok.flatMap((r) => (r.ttftMs === undefined ? [] : [r.ttftMs])))),
    itlMs: round(percentiles(ok.flatMap((r) => r.itlMs))),
    prefillHops: hops,
  };
}

/** Runs the trace on `prefill`+`decode` disaggregated sims, then on as many aggregated ones. */
export async function runPd(o: PdOptions, signal: AbortSignal): Promise<PdReport> {
  const trace = generateTrace(o.workload);
  const replicas = o.prefill + o.decode;
  const runs: PdRun[] = [];
  for (const [label, prefillReplicas] of [[`${o.prefill}P+${o.decode}D`, o.prefill], [`${replicas} aggregated`, 0]] as const) {
    let fleet: Fleet | undefined;
    try {
      fleet = await startFleet(
        {
          llmgw: o.llmgw,
          engine: { name: 'sim' },
          replicas,
          prefillReplicas,
          policy: 'precise',
          waitOrSpill: true,
          capacityBlocks: o.capacityBlocks,
          blockSizeTokens: o.blockSizeTokens,
          prefillTokensPerS: o.prefillTokensPerS,
          decodeTokensPerS: o.decodeTokensPerS,
          logFile: o.logFile,
          startTimeoutMs: 60_000,
        },
        signal,
      );
      const { results } = await driveTrace(trace, fleet.gateway, { model: 'bench', timeoutMs: o.requestTimeoutMs, signal });
      const run = summary(label, results);
      o.progress(
        `${label.padEnd(14)} TTFT p50/p99 ${run.ttftMs.p50}/${run.ttftMs.p99} ms  ITL p50/p99 ${run.itlMs.p50}/${run.itlMs.p99} ms  failed ${run.failed}` +
          (Object.keys(run.prefillHops).length > 0 ? `  prefill hops ${JSON.stringify(run.prefillHops)}` : ''),
      );
      runs.push(run);
    } finally {
      await fleet?.close();
    }
  }
  const [pd, agg] = runs;
  const r2 = (a: number | undefined, b: number | undefined): number => (a === undefined || b === undefined ? NaN : Math.round((a / b) * 100) / 100);
  return {
    workload: o.workload,
    runs,
    aggregatedOverPd: {
      itlP50: r2(agg?.itlMs.p50, pd?.itlMs.p50),
      itlP99: r2(agg?.itlMs.p99, pd?.itlMs.p99),
      ttftP50: r2(agg?.ttftMs.p50, pd?.ttftMs.p50),
      ttftP99: r2(agg?.ttftMs.p99, pd?.ttftMs.p99),
    },
  };
}
