// `llmgw bench e2e`: the end-to-end routing bench from the command line. Flags set the fleet and
// the workloads; the figures are printed as they come and written as JSON with an SVG chart beside.
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { installedEngines } from '../actors/index.js';
import { chartSvg, pdWorkload, runE2e, runPd, shapes, workloadDefaults } from '../e2e/index.js';
import type { BenchEngine, Shape, WorkloadOptions } from '../e2e/index.js';
import { tinyQwen3File } from '../gguf/index.js';
import { qwen3TokenizerFile } from '../tokenize/index.js';
import { cacheDirOf } from './engines.js';
import { LlmgwError } from '../errors/index.js';
import { routePolicies } from '../routing/index.js';
import { currentHost } from './host.js';

const usage = `usage: llmgw bench e2e [--quick] [--shape ${shapes.join('|')}|all|pd] [--policies ${routePolicies.join(',')}]
    [--replicas N] [--rate REQ_PER_S] [--groups N] [--per-group N] [--prefix-tokens N] [--question-tokens N]
    [--answer-tokens N] [--output-tokens N] [--seed N] [--capacity-blocks N] [--prefill-tokens-per-s N]
    [--decode-tokens-per-s N] [--wait-or-spill on|off|both] [--repeat N] [--out DIR]
    [--engine sim|llamacpp] [--model GGUF] [--state-dir DIR]

Starts \`llmgw serve\` with N sim replicas once per routing policy, replays the same generated
workloads through each (Poisson arrivals), and compares every policy with the oracle: the cached
tokens an omniscient router would get on the same trace with the same cache capacity.
  shared-prefix  --groups system prompts x --per-group users, --prefix-tokens system, --question-tokens question
  multi-turn     --groups sessions x --per-group turns, each turn --question-tokens plus --answer-tokens recorded
  long-doc       --groups documents of --prefix-tokens x --per-group questions
  pd             prefill/decode disaggregation: --replicas/2 prefill + --replicas/2 decode sims (4 by
                 default) against as many aggregated, on long documents and answers of --output-tokens;
                 prints TTFT and inter-token latency p50/p99 of both and writes DIR/pd.json
--wait-or-spill sets gateway.router.wait_or_spill (default on); both runs every policy with it off
(labelled <policy>/valve-only, today's behaviour) and on (<policy>/wait-or-spill), back to back.
--repeat N runs the whole comparison N times and lists every run's share of the oracle and TTFT p50.
--quick runs tiny workloads on 2 small replicas: a smoke test of the whole path, not a measurement.
--engine llamacpp runs llama-server replicas instead (the build \`llmgw engines install llamacpp\` put
in --state-dir, default .llmgw-state), serving --model (default: \`llmgw engines tiny-model\`); hit
rates are the engine's own usage, each workload on a fresh serve (llama.cpp has no cache reset).
Writes DIR/e2e.json, DIR/e2e.svg and the serve log DIR/e2e-serve.log (DIR: bench/results).
`;

const numeric = new Map<string, keyof WorkloadOptions | 'replicas' | 'capacityBlocks' | 'prefillTokensPerS' | 'decodeTokensPerS'>([
  ['--rate', 'ratePerS'],
  ['--groups', 'groups'],
  ['--per-group', 'perGroup'],
  ['--prefix-tokens', 'prefixTokens'],
  ['--question-tokens', 'questionTokens'],
  ['--answer-tokens', 'answerTokens'],
  ['--output-tokens', 'outputTokens'],
  ['--seed', 'seed'],
  ['--replicas', 'replicas'],
  ['--capacity-blocks', 'capacityBlocks'],
  ['--prefill-tokens-per-s', 'prefillTokensPerS'],
  ['--decode-tokens-per-s', 'decodeTokensPerS'],
]);

// Tiny workloads for the smoke test: every shape and policy passes through, in seconds.
const quickWorkloads: Readonly<Record<Shape, Partial<WorkloadOptions>>> = {
  'shared-prefix': { groups: 4, perGroup: 3, prefixTokens: 800, questionTokens: 40, ratePerS: 20, outputTokens: 4 },
  'multi-turn': { groups: 3, perGroup: 3, prefixTokens: 200, questionTokens: 60, answerTokens: 40, ratePerS: 20, outputTokens: 4 },
  'long-doc': { groups: 2, perGroup: 3, prefixTokens: 1_500, questionTokens: 40, ratePerS: 20, outputTokens: 4 },
};

interface Args {
  quick: boolean;
  /** --shape pd: disaggregated against aggregated sims instead of the policy comparison. */
  pd: boolean;
  engine: string;
  model: string | undefined;
  stateDir: string;
  shapes: Shape[];
  policies: string[];
  numbers: Map<string, number>;
  waitOrSpill: boolean[];
  repeat: number;
  out: string;
}

function parse(argv: readonly string[]): Args {
  const a: Args = { quick: false, pd: false, engine: 'sim', model: undefined, stateDir: '.llmgw-state', shapes: [...shapes], policies: ['round-robin', 'least-load', 'approximate', 'precise'], numbers: new Map(), waitOrSpill: [true], repeat: 1, out: 'bench/results' };
  for (let i = 0; i < argv.length; i++) {
    const raw = argv[i] ?? '';
    const eq = raw.indexOf('=');
    const flag = eq >= 0 ? raw.slice(0, eq) : raw;
    const value = (): string => {
      const v = eq >= 0 ? raw.slice(eq + 1) : argv[++i];
      if (v === undefined || v === '') throw new LlmgwError('LLMGW_BENCH_USAGE', `${flag} needs a value`);
      return v;
    };
    if (flag === '--quick') a.quick = true;
    else if (flag === '--out') a.out = value();
    else if (flag === '--engine') {
      a.engine = value();
      if (a.engine !== 'sim' && a.engine !== 'llamacpp') throw new LlmgwError('LLMGW_BENCH_USAGE', `--engine: ${JSON.stringify(a.engine)} is not sim or llamacpp`);
    } else if (flag === '--wait-or-spill') {
      const v = value();
      const as = v === 'on' ? [true] : v === 'off' ? [false] : v === 'both' ? [false, true] : undefined;
      if (as === undefined) throw new LlmgwError('LLMGW_BENCH_USAGE', `--wait-or-spill: ${JSON.stringify(v)} is not on, off or both`);
      a.waitOrSpill = as;
    } else if (flag === '--repeat') {
      const given = value();
      const v = Number(given);
      if (!Number.isInteger(v) || v < 1 || v > 100) throw new LlmgwError('LLMGW_BENCH_USAGE', `--repeat: ${JSON.stringify(given)} is not a whole number from 1 to 100`);
      a.repeat = v;
    } else if (flag === '--model') a.model = value();
    else if (flag === '--state-dir') a.stateDir = value();
    else if (flag === '--shape') {
      const v = value();
      if (v === 'pd') {
        a.pd = true;
        continue;
      }
      const picked = v === 'all' ? [...shapes] : v.split(',');
      const bad = picked.filter((s) => !shapes.some((k) => k === s));
      if (bad.length > 0) throw new LlmgwError('LLMGW_BENCH_USAGE', `--shape: ${bad.join(', ')} is not one of ${shapes.join(', ')}, all`);
      a.shapes = shapes.filter((s) => picked.includes(s));
    } else if (flag === '--policies') {
      const picked = value().split(',');
      const bad = picked.filter((p) => !routePolicies.some((k) => k === p));
      if (bad.length > 0) throw new LlmgwError('LLMGW_BENCH_USAGE', `--policies: ${bad.join(', ')} is not one of ${routePolicies.join(', ')}`);
      a.policies = picked;
    } else if (numeric.has(flag)) {
      const v = Number(value());
      if (!(v > 0) || !Number.isFinite(v)) throw new LlmgwError('LLMGW_BENCH_USAGE', `${flag}: ${JSON.stringify(argv[i])} is not a positive number`);
      a.numbers.set(numeric.get(flag) ?? flag, v);
    } else throw new LlmgwError('LLMGW_BENCH_USAGE', `unknown argument ${JSON.stringify(raw)}`);
  }
  return a;
}

// --shape pd: half the replicas prefill, half decode, against as many aggregated, on one trace.
async function benchPd(args: Args, o: { llmgw: readonly string[]; replicas: number; capacityBlocks: number; blockSizeTokens: number; prefillTokensPerS: number; decodeTokensPerS: number }, signal: AbortSignal): Promise<number> {
  const w: Record<string, unknown> = { ...pdWorkload(args.quick) };
  for (const [k, v] of args.numbers) if (k in w) w[k] = v;
  const workload = { ...pdWorkload(args.quick), ...w };
  const half = Math.max(1, Math.floor((args.numbers.get('replicas') ?? 4) / 2));
  const report = await runPd(
    {
      llmgw: o.llmgw,
      prefill: half,
      decode: half,
      workload,
      // A decode replica holds every answer's whole prompt for as long as it streams: with the e2e
      // default of 64k tokens, two of them fit ten 12k-token answers and the rest wait for blocks,
      // which measures the cache size, not the split. 256k tokens each fits the trace on either fleet.
      capacityBlocks: args.numbers.get('capacityBlocks') ?? (args.quick ? o.capacityBlocks : 16_384),
      blockSizeTokens: o.blockSizeTokens,
      prefillTokensPerS: o.prefillTokensPerS,
      decodeTokensPerS: o.decodeTokensPerS,
      requestTimeoutMs: 300_000,
      logFile: join(args.out, 'pd-serve.log'),
      progress: (line) => process.stdout.write(`${line}\n`),
    },
    signal,
  );
  const json = {
    bench: 'e2e --shape pd',
    when: new Date().toISOString(),
    quick: args.quick,
    machine: { cpus: availableParallelism(), model: cpus()[0]?.model ?? 'unknown', loadavg: loadavg().map((l) => Math.round(l * 100) / 100) },
    note: 'the machine may be shared with other work: compare the two fleets within one run, not across runs',
    ...report,
  };
  writeFileSync(join(args.out, 'pd.json'), `${JSON.stringify(json, null, 2)}\n`);
  process.stdout.write(`aggregated / disaggregated: ${JSON.stringify(report.aggregatedOverPd)}\nwrote ${join(args.out, 'pd.json')}\n`);
  return 0;
}

/** Runs `bench e2e`; returns the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === '--help' || sub === '-h' || (sub === 'e2e' && (rest.includes('--help') || rest.includes('-h')))) {
    process.stdout.write(usage);
    return 0;
  }
  let args: Args;
  try {
    if (sub !== 'e2e') throw new LlmgwError('LLMGW_BENCH_USAGE', sub === undefined ? 'name a bench' : `unknown bench ${JSON.stringify(sub)} (have e2e)`);
    args = parse(rest);
  } catch (e) {
    if (!(e instanceof LlmgwError)) throw e;
    process.stderr.write(`llmgw bench: ${e.message}\n${usage}`);
    return 2;
  }
  const n = (k: string, quick: number, full: number): number => args.numbers.get(k) ?? (args.quick ? quick : full);
  const workloads = args.shapes.map((shape): WorkloadOptions => {
    const w: Record<string, unknown> = { ...workloadDefaults(shape), ...(args.quick ? quickWorkloads[shape] : {}) };
    for (const [k, v] of args.numbers) if (k in w) w[k] = v;
    return { ...workloadDefaults(shape), ...w };
  });
  const host = currentHost();
  mkdirSync(args.out, { recursive: true });
  let engine: BenchEngine = { name: 'sim' };
  if (args.engine === 'llamacpp') {
    const stateDir = resolve(args.stateDir);
    if (!installedEngines(stateDir).some((i) => i.engine === 'llamacpp')) {
      process.stderr.write(`llmgw bench: no llama.cpp build installed under ${stateDir}; run llmgw engines install llamacpp FROM (or pass --state-dir)\n`);
      return 2;
    }
    const model = args.model ?? (await tinyQwen3File({ cacheDir: cacheDirOf(process.env), tokenizerDir: dirname(qwen3TokenizerFile()) })).path;
    engine = { name: 'llamacpp', model: resolve(model), stateDir };
  }
  const options = {
    llmgw: host.llmgwCommand ?? [],
    engine,
    replicas: n('replicas', 2, 2),
    policies: args.policies,
    waitOrSpill: args.waitOrSpill,
    repeat: args.repeat,
    workloads,
    capacityBlocks: n('capacityBlocks', 256, 4096),
    blockSizeTokens: 16,
    prefillTokensPerS: n('prefillTokensPerS', 200_000, 20_000),
    decodeTokensPerS: n('decodeTokensPerS', 2_000, 50),
    requestTimeoutMs: 300_000,
    logFile: join(args.out, 'e2e-serve.log'),
    progress: (line: string) => process.stdout.write(`${line}\n`),
  };
  const stop = new AbortController();
  const onSignal = (): void => stop.abort(new LlmgwError('LLMGW_BENCH_STOPPED', 'the bench was interrupted'));
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    if (args.pd) return await benchPd(args, options, stop.signal);
    const report = await runE2e(options, stop.signal);
    const json = {
      bench: 'e2e',
      when: new Date().toISOString(),
      quick: args.quick,
      machine: { cpus: availableParallelism(), model: cpus()[0]?.model ?? 'unknown', loadavg: loadavg().map((l) => Math.round(l * 100) / 100) },
      note: 'the machine may be shared with other work: compare policies within one run, not across runs',
      fleet: { engine: engine.name, replicas: options.replicas, capacityBlocks: options.capacityBlocks, blockSizeTokens: options.blockSizeTokens, prefillTokensPerS: options.prefillTokensPerS, decodeTokensPerS: options.decodeTokensPerS },
      workloads,
      ...report,
    };
    writeFileSync(join(args.out, 'e2e.json'), `${JSON.stringify(json, null, 2)}\n`);
    const title = `llmgw bench e2e: ${options.replicas} ${engine.name} replicas, ${engine.name === 'sim' ? `${options.capacityBlocks * 16} cached tokens each` : 'their own prompt caches'}${args.quick ? ' (quick: not a measurement)' : ''}`;
    writeFileSync(join(args.out, 'e2e.svg'), chartSvg(report.runs, title));
    if (args.repeat > 1) {
      for (const [k, v] of Object.entries(report.repeats)) process.stdout.write(`${k}: share of oracle ${v.oracleShare.join(' ')}; TTFT p50 ${v.ttftP50Ms.join(' ')} ms\n`);
    }
    process.stdout.write(`round-robin TTFT p90 / precise: ${JSON.stringify(report.ttftP90RoundRobinOverPrecise)}\nwrote ${join(args.out, 'e2e.json')} and e2e.svg\n`);
    return 0;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}
