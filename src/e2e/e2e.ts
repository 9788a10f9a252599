// `llmgw bench e2e`: every routing policy on the same traces and the same fleet of sim (or llama.cpp)
// replicas, each compared with the oracle on that trace. One `llmgw serve` per policy (fresh
// engines), the workloads one after the other with the engines' caches reset between them; llama.cpp
// has no such reset, so it gets a fresh serve per workload instead.
import { request } from 'undici';
import { LlmgwError } from '../errors/index.js';
import { byteTokenizer, loadTokenizer, type SimTokenizer } from '../sim/index.js';
import { driveTrace } from './drive.js';
import { startFleet, type BenchEngine, type Fleet } from './fleet.js';
import { distinctBlocks, oracle } from './oracle.js';
import type { OracleResult } from './oracle.js';
import { summarise } from './report.js';
import type { RunSummary } from './report.js';
import { generateTrace, workloadDefaults } from './workload.js';
import type { Trace, WorkloadOptions } from './workload.js';

/** Everything one bench run takes. */
export interface E2eOptions {
  readonly llmgw: readonly string[];
  readonly engine: BenchEngine;
  readonly replicas: number;
  readonly policies: readonly string[];
  /**
   * gateway.router.wait_or_spill for each run of a policy: [true] is the default; [false, true]
   * runs each policy both ways, labelled `<policy>/valve-only` (today's behaviour) and `<policy>/wait-or-spill`.
   */
  readonly waitOrSpill: readonly boolean[];
  /** Times the whole comparison runs, the variants alternating within each, so run-to-run spread shows. */
  readonly repeat: number;
  readonly workloads: readonly WorkloadOptions[];
  readonly capacityBlocks: number;
  readonly blockSizeTokens: number;
  readonly prefillTokensPerS: number;
  readonly decodeTokensPerS: number;
  readonly requestTimeoutMs: number;
  readonly logFile: string;
  /** Progress lines for a person watching. */
  readonly progress: (line: string) => void;
}

/** The oracle of one workload, with the working set against one replica's cache. */
export interface OracleSummary {
  readonly shape: string;
  readonly requests: number;
  readonly promptTokens: number;
  readonly cachedTokens: number;
  readonly hitRate: number;
  /** Distinct prompt blocks of the trace over one replica's capacity: between 1 and 2 is the hard case. */
  readonly workingSetCaches: number;
}

/** What a bench run found. */
export interface E2eReport {
  readonly oracles: readonly OracleSummary[];
  readonly runs: readonly RunSummary[];
  /** Per workload: round-robin's TTFT p90 over precise's (when both ran), whole run and steady state. */
  readonly ttftP90RoundRobinOverPrecise: Readonly<Record<string, { all: number; steady: number }>>;
  /** Per `<label> <shape>`: every repeat's share of the oracle and TTFT p50, in run order (all of them, not the best). */
  readonly repeats: Readonly<Record<string, { oracleShare: number[]; ttftP50Ms: number[] }>>;
}

/** The exact token ids the engine computes for each request of `trace`: a sim's byte tokenizer, or
 * for llama.cpp the tiny model's Qwen3 tokenizer and chat template. */
export async function traceTokens(trace: Trace, tk: SimTokenizer = byteTokenizer()): Promise<number[][]> {
  return Promise.all(
    trace.requests.map(async (r) => tk.encode(tk.renderChat(r.messages.map((m) => ({ role: m.role, content: m.content })), { addGenerationPrompt: true, continueFinalMessage: false }), false)),
  );
}

async function resetCaches(engines: readonly URL[], signal: AbortSignal): Promise<void> {
  for (const url of engines) {
    const res = await request(new URL('/reset_prefix_cache', url), { method: 'POST', signal });
    await res.body.dump();
    if (res.statusCode !== 200 || res.headers['x-llmgw-sim-reset'] !== 'ok') {
      throw new LlmgwError('LLMGW_BENCH_RESET', `engine ${url.href} refused to reset its prefix cache (status ${res.statusCode}); a request from the previous workload still holds blocks`);
    }
  }
}

// A fresh serve compiles its hot paths and starts its hashing threads on the first requests; a few
// distinct short ones first keep that out of the first workload's figures.
async function warmUp(gateway: URL, replicas: number, signal: AbortSignal): Promise<void> {
  const requests = Array.from({ length: 4 * replicas }, (_, id) => ({
    id,
    atMs: 0,
    after: undefined,
    group: id,
    messages: [{ role: 'user' as const, content: `warm-up ${id}: ${'a few words to route '.repeat(20)}` }],
    maxTokens: 2,
  }));
  await driveTrace({ options: { ...workloadDefaults('shared-prefix'), groups: requests.length, perGroup: 1 }, requests }, gateway, { model: 'bench', timeoutMs: 60_000, signal });
}

// The gateway's own time to decide, from its histogram: the part of TTFT that routing costs.
async function routingTime(gateway: URL, signal: AbortSignal): Promise<{ seconds: number; count: number }> {
  const res = await request(new URL('/metrics', gateway), { signal });
  const text = await res.body.text();
  let seconds = 0;
  let count = 0;
  for (const line of text.split('\n')) {
    const v = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (line.startsWith('llmgw_gateway_routing_duration_seconds_sum')) seconds += v;
    else if (line.startsWith('llmgw_gateway_routing_duration_seconds_count')) count += v;
  }
  return { seconds, count };
}

/** Runs every policy on every workload; each run's figures come beside the oracle of its trace. */
export async function runE2e(o: E2eOptions, signal: AbortSignal): Promise<E2eReport> {
  const prepared: { trace: Trace; tokens: number[][]; oracle: OracleResult; summary: OracleSummary }[] = [];
  const tokenizer = o.engine.name === 'sim' ? byteTokenizer() : await loadTokenizer('qwen3');
  try {
    for (const w of o.workloads) {
      const trace = generateTrace(w);
      const tokens = await traceTokens(trace, tokenizer);
      const result = oracle(
        tokens.map((t) => ({ tokens: t, outputTokens: w.outputTokens })),
        { replicas: o.replicas, capacityBlocks: o.capacityBlocks, blockSizeTokens: o.blockSizeTokens },
      );
      const summary: OracleSummary = {
        shape: w.shape,
        requests: trace.requests.length,
        promptTokens: result.totalPromptTokens,
        cachedTokens: result.totalCachedTokens,
        hitRate: Math.round((result.totalCachedTokens / Math.max(1, result.totalPromptTokens)) * 1000) / 1000,
        workingSetCaches: Math.round((distinctBlocks(tokens, o.blockSizeTokens) / o.capacityBlocks) * 100) / 100,
      };
      o.progress(`oracle ${w.shape}: ${summary.requests} requests, hit rate ${summary.hitRate}, working set ${summary.workingSetCaches} caches`);
      prepared.push({ trace, tokens, oracle: result, summary });
    }
  } finally {
    // Its worker thread would keep the bench's process alive once the report is written.
    await tokenizer.close();
  }
  const runs: RunSummary[] = [];
  const start = (policy: string, waitOrSpill: boolean): Promise<Fleet> =>
    startFleet(
      {
        llmgw: o.llmgw,
        engine: o.engine,
        replicas: o.replicas,
        policy,
        waitOrSpill,
        capacityBlocks: o.capacityBlocks,
        blockSizeTokens: o.blockSizeTokens,
        prefillTokensPerS: o.prefillTokensPerS,
        decodeTokensPerS: o.decodeTokensPerS,
        logFile: o.logFile,
        startTimeoutMs: 60_000,
      },
      signal,
    );
  const freshPerWorkload = o.engine.name !== 'sim';
  const both = o.waitOrSpill.length > 1;
  const variants = o.policies.flatMap((policy) =>
    o.waitOrSpill.map((waitOrSpill) => ({ policy, waitOrSpill, label: both ? `${policy}/${waitOrSpill ? 'wait-or-spill' : 'valve-only'}` : policy })),
  );
  for (let repeat = 1; repeat <= o.repeat; repeat++) {
    for (const { policy, waitOrSpill, label } of variants) {
      let fleet: Fleet | undefined;
      try {
        for (const p of prepared) {
          if (fleet === undefined || freshPerWorkload) {
            await fleet?.close();
            fleet = await start(policy, waitOrSpill);
            await warmUp(fleet.gateway, o.replicas, signal);
          }
          if (!freshPerWorkload) await resetCaches(fleet.engines, signal);
          const before = await routingTime(fleet.gateway, signal);
          const { results, wallMs } = await driveTrace(p.trace, fleet.gateway, { model: 'bench', timeoutMs: o.requestTimeoutMs, signal });
          const after = await routingTime(fleet.gateway, signal);
          const decided = after.count - before.count;
          const summary = summarise(
            { policy: label, shape: p.trace.options.shape, results, wallMs, routingMsMean: decided > 0 ? ((after.seconds - before.seconds) * 1000) / decided : NaN },
            p.tokens.map((t) => t.length),
            p.oracle.totalCachedTokens,
          );
          const s = o.repeat > 1 ? { ...summary, repeat } : summary;
          const wos = waitOrSpill && s.waitOrSpill.holder + s.waitOrSpill.spill > 0 ? `  waited ${s.waitOrSpill.holder} spilled ${s.waitOrSpill.spill}` : '';
          o.progress(
            `${o.repeat > 1 ? `run ${repeat}/${o.repeat} ` : ''}${label.padEnd(12)} ${s.shape.padEnd(13)} share of oracle ${s.oracleShare.toFixed(3)}  hit ${s.hitRate.toFixed(3)}  ` +
              `TTFT p50/p90/p99 ${s.ttftMs.p50}/${s.ttftMs.p90}/${s.ttftMs.p99} ms (steady ${s.ttftSteadyMs.p50}/${s.ttftSteadyMs.p90}/${s.ttftSteadyMs.p99})  ${s.requestsPerS} req/s  routing ${s.routingMsMean} ms  imbalance ${s.imbalance}  failed ${s.failed}${wos}`,
          );
          runs.push(s);
        }
      } finally {
        await fleet?.close();
      }
    }
  }
  const ratio: Record<string, { all: number; steady: number }> = {};
  for (const p of prepared) {
    const rr = runs.find((r) => r.policy === 'round-robin' && r.shape === p.trace.options.shape);
    const pr = runs.find((r) => r.policy === 'precise' && r.shape === p.trace.options.shape);
    const r2 = (a: number, b: number): number => Math.round((a / b) * 100) / 100;
    if (rr !== undefined && pr !== undefined) ratio[p.trace.options.shape] = { all: r2(rr.ttftMs.p90, pr.ttftMs.p90), steady: r2(rr.ttftSteadyMs.p90, pr.ttftSteadyMs.p90) };
  }
  const repeats: Record<string, { oracleShare: number[]; ttftP50Ms: number[] }> = {};
  for (const r of runs) {
    const k = `${r.policy} ${r.shape}`;
    const e = (repeats[k] ??= { oracleShare: [], ttftP50Ms: [] });
    e.oracleShare.push(r.oracleShare);
    e.ttftP50Ms.push(r.ttftMs.p50);
  }
  return { oracles: prepared.map((p) => p.summary), runs, ttftP90RoundRobinOverPrecise: ratio, repeats };
}
