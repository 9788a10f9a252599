// The speed regression guard: runs the decision-time bench (bench/conversation: `llmgw serve`
// measured by its own routing histogram) and the overhead bench (llmgw beside nginx under wrk),
// and prints each headline figure beside the last run recorded in the repository
// (docs/perf/guard.json, one entry per mode), with the ratio now / recorded. Nothing here fails on
// a figure: the machines are shared, so a ratio is for a reader to weigh, and CI only prints it.
// It fails only when a bench itself fails (it crashed, or wrote no figures).
// Run: npm run bench:guard [-- --quick] [-- --record]   (--record writes this run's figures as the new
// recorded run; commit docs/perf/guard.json with the change that moved them)
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const quick = process.argv.includes('--quick');
const record = process.argv.includes('--record');
const mode = quick ? 'quick' : 'full';
const repo = fileURLToPath(new URL('../../', import.meta.url));
const recordedFile = `${repo}docs/perf/guard.json`;
const resultsDir = `${repo}bench/results/`;

/** One figure the guard watches: where it is in a bench's JSON, and which way is better. */
interface Figure {
  readonly name: string;
  readonly bench: 'conversation' | 'overhead';
  readonly path: readonly string[];
  readonly unit: string;
  readonly better: 'lower' | 'higher';
}

// The issue-51 headline figures: decision means and percentiles as `npm start` serves them, and
// what llmgw adds beside nginx over the same engines.
const figures: readonly Figure[] = [
  { name: 'first conversation after start, routing mean', bench: 'conversation', path: ['first', 'meanMs'], unit: 'ms', better: 'lower' },
  { name: 'warm conversation, routing mean', bench: 'conversation', path: ['warm', 'meanMs'], unit: 'ms', better: 'lower' },
  { name: 'long turn, routing p50', bench: 'conversation', path: ['long', 'p50Ms'], unit: 'ms', better: 'lower' },
  { name: 'long turn, routing p99', bench: 'conversation', path: ['long', 'p99Ms'], unit: 'ms', better: 'lower' },
  // A long body's tokenizing now runs in its parse trip, outside the routing histogram: these say
  // what a turn costs before it goes upstream, every stage counted, so moving work between stages
  // cannot pass for a gain.
  { name: 'first conversation after start, before upstream mean', bench: 'conversation', path: ['first', 'beforeUpstreamMs'], unit: 'ms', better: 'lower' },
  { name: 'warm conversation, before upstream mean', bench: 'conversation', path: ['warm', 'beforeUpstreamMs'], unit: 'ms', better: 'lower' },
  { name: 'long turn, before upstream mean', bench: 'conversation', path: ['long', 'beforeUpstreamMs'], unit: 'ms', better: 'lower' },
  { name: 'requests/s over nginx, 16 connections', bench: 'overhead', path: ['llmgwOverNginxRps'], unit: 'x', better: 'higher' },
  { name: 'p50 over nginx, 16 connections', bench: 'overhead', path: ['llmgwMinusNginxP50Ms'], unit: 'ms', better: 'lower' },
  { name: 'p50 over nginx, one connection', bench: 'overhead', path: ['unqueued', 'llmgwMinusNginxP50Ms'], unit: 'ms', better: 'lower' },
  { name: 'proxy CPU a request, all threads', bench: 'overhead', path: ['llmgw', 'cpuMs', 'proxy'], unit: 'ms', better: 'lower' },
];

function at(o: unknown, path: readonly string[]): unknown {
  let v = o;
  for (const k of path) v = typeof v === 'object' && v !== null ? Object.entries(v).find(([key]) => key === k)?.[1] : undefined;
  return v;
}

// A figure's value in a bench's JSON; CPU comes as main thread and other threads, summed here.
function valueOf(json: unknown, f: Figure): number | undefined {
  const v = at(json, f.path);
  if (typeof v === 'number' && Number.isFinite(v)) return v;
  const main = at(v, ['mainMs']);
  const other = at(v, ['otherMs']);
  return typeof main === 'number' && typeof other === 'number' ? Math.round((main + other) * 1000) / 1000 : undefined;
}

/** Now over recorded, rounded; undefined when either is missing or the recorded one is 0. */
function ratioOf(now: number | undefined, recorded: number | undefined): number | undefined {
  if (now === undefined || recorded === undefined || recorded === 0) return undefined;
  return Math.round((now / recorded) * 100) / 100;
}

/** The line printed for one figure: now, recorded, the ratio, and whether that ratio is the better way. */
function lineOf(f: Figure, now: number | undefined, recorded: number | undefined): string {
  const r = ratioOf(now, recorded);
  const verdict = r === undefined ? 'no recorded run to compare' : r === 1 ? 'same' : (r < 1) === (f.better === 'lower') ? 'better' : 'worse';
  const show = (v: number | undefined): string => (v === undefined ? 'n/a' : `${v} ${f.unit}`);
  return `${f.name}: ${show(now)} (recorded ${show(recorded)}) ratio ${r ?? 'n/a'} (${f.better} is better: ${verdict})`;
}

async function bench(name: 'conversation' | 'overhead'): Promise<unknown> {
  const args = [`${repo}dist/bench/${name}.js`, ...(quick ? ['--quick'] : [])];
  const { stdout } = await run(process.execPath, args, { timeout: 20 * 60_000, maxBuffer: 64 * 1024 * 1024 });
  process.stdout.write(stdout);
  return JSON.parse(readFileSync(`${resultsDir}${name}${quick ? '-quick' : ''}.json`, 'utf8'));
}

async function main(): Promise<void> {
  console.log(`bench:guard (${mode}): the machine may be shared (load average ${loadavg().map((l) => l.toFixed(2)).join(' ')}); ratios against the recorded run are for reading, never a failure`);
  const json = { conversation: await bench('conversation'), overhead: await bench('overhead') };
  let recorded: Record<string, { when?: string; figures?: Record<string, number> }> = {};
  try {
    recorded = JSON.parse(readFileSync(recordedFile, 'utf8')) as typeof recorded;
  } catch {
    console.log(`no recorded run in ${recordedFile} yet`);
  }
  const before = recorded[mode]?.figures ?? {};
  const now: Record<string, number> = {};
  console.log(`--- bench:guard, ${mode} mode, against the run recorded ${recorded[mode]?.when ?? 'never'} ---`);
  for (const f of figures) {
    const v = valueOf(json[f.bench], f);
    if (v !== undefined) now[f.name] = v;
    console.log(lineOf(f, v, before[f.name]));
  }
  const missing = figures.filter((f) => now[f.name] === undefined);
  if (missing.length > 0) throw new Error(`the benches wrote no ${missing.map((f) => f.name).join(', ')}`);
  writeFileSync(`${resultsDir}guard${quick ? '-quick' : ''}.json`, JSON.stringify({ mode, when: new Date().toISOString(), figures: now, recorded: before }, null, 2) + '\n');
  if (record) {
    recorded[mode] = { when: new Date().toISOString(), figures: now };
    writeFileSync(recordedFile, JSON.stringify(recorded, null, 2) + '\n');
    console.log(`recorded this run as ${mode} in ${recordedFile}`);
  }
}

await main();
