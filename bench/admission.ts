// What admission buys under overload, with the sim, side by side in one run:
//   1. two tenants: A sends interactive chats at 30% of capacity, B floods batch requests at 5x;
//      A's TTFT p99 with B absent, with B flooding (admission on; and on without a replica kept
//      idle for A), and with admission off (engines scheduling by priority, and first
//      come first served as before admission existed);
//   2. equal weights, both flooding: each tenant's share of the prefill tokens served;
//   3. 10,000 requests queued at once: the gateway process's RSS growth, and every request answered
//      or refused with a reason (silent drops counted).
//   4. issue 46's shape: both keys from llmgw.yaml with nothing but their names (equal class and
//      weight, the engines' slots not stated), A one request at a time, B 32 streams at once; on the
//      same engines. Shapes 1 and 4 are printed side by side: A's p50 and p99 alone and under the
//      flood, their ratio, and B's throughput; shape 4 also with reserved_replicas_exclusive off in
//      the same run (what the rule buys A and costs the flood).
// Every sim decodes at the sim's own default rate (50 tokens/s, a 20 ms decode step) unless
// --decode=N says otherwise. Capacity is measured first (closed loop), so the rates are fractions
// of what the sims do here.
// Run: npx tsc -p . && node dist/bench/admission.js [seconds per scenario, default 8] [--decode=N] [--rounds=N] [--quick | --equal-keys]
//   (writes bench/results/admission.json; --quick runs both shapes side by side and writes
//   bench/results/admission-quick.json, so a before and after can be compared from their files;
//   --equal-keys runs shape 4 alone and writes nothing)
import { spawn } from 'node:child_process';
import { setMaxListeners } from 'node:events';
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { Registry } from 'prom-client';
import { Agent, request } from 'undici';
import { admissionDefaults } from '../src/admission/index.js';
import type { AdmissionConfig } from '../src/admission/index.js';
import { percentiles } from '../src/e2e/index.js';
import { gatewayDefaults, hashApiKey, parseGatewayConfig, startGateway } from '../src/gateway/index.js';
import type { Gateway } from '../src/gateway/index.js';
import { queueRowsOf } from '../src/cli/ctl-status.js';
import { resolveSimOptions, simDefaults, startSim } from '../src/sim/index.js';
import { benchReplica } from './replicas.js';

const SECONDS = Number(process.argv.slice(2).find((a) => /^\d+(\.\d+)?$/.test(a)) ?? 8);
// --quick: both shapes only, A alone and under B's flood with admission on (for trying a change).
const QUICK = process.argv.includes('--quick');
// --rounds=N: shape 1 run N times, A alone and under the flood alternating, A's samples pooled: one
// run's p99 of ~75 samples is its first or second worst, and A alone swung 98-139 ms between runs.
const ROUNDS = Number(process.argv.find((a) => a.startsWith('--rounds='))?.slice(9) ?? (QUICK ? 3 : 1));
const DECODE_TOKENS_PER_S = Number(process.argv.find((a) => a.startsWith('--decode='))?.slice(9) ?? simDefaults.decodeTokensPerS);
const keys = { a: 'sk-tenant-a', b: 'sk-tenant-b' };
const PROMPT_CHARS = 1500;
const MAX_TOKENS = 16;

interface Fleet {
  readonly gw: Gateway;
  /** The sims' base URLs, for their own accounts of each request (/sim/requests). */
  readonly simUrls: readonly URL[];
  close(): Promise<void>;
}

interface FleetOptions {
  readonly admission: Partial<AdmissionConfig>;
  readonly policy: 'priority' | 'fcfs';
  readonly maxNumSeqs?: number;
  readonly decodeTokensPerS?: number;
  readonly aPriority?: 'interactive' | 'batch';
  readonly bPriority?: 'batch' | 'standard';
  /** The gateway section as an operator writes it in llmgw.yaml (its keys, nothing stated of the engines), instead of the bench's own. */
  readonly yaml?: unknown;
}

async function fleet(o: FleetOptions): Promise<Fleet> {
  const sims = await Promise.all(
    ['s0', 's1'].map(async () => {
      const sim = await startSim(
        resolveSimOptions({
          model: 'm',
          host: '127.0.0.1',
          port: 0,
          tokenizer: 'bytes',
          hashSeed: '0',
          maxNumSeqs: o.maxNumSeqs ?? 4,
          prefillTokensPerS: 20_000,
          decodeTokensPerS: o.decodeTokensPerS ?? DECODE_TOKENS_PER_S,
          schedulingPolicy: o.policy,
        }),
      );
      await sim.ready;
      return sim;
    }),
  );
  const views = sims.map((s, i) => benchReplica(`s${i}`, 'm', new URL(s.url), { kvEvents: false, schedulesByPriority: o.policy === 'priority', prefillTokensPerS: 20_000 }));
  const gw = await startGateway({
    config: o.yaml !== undefined ? { ...parseGatewayConfig(o.yaml), port: 0 } : {
      ...gatewayDefaults,
      port: 0,
      apiKeys: [
        { name: 'a', sha256: hashApiKey(keys.a), requestsPerMinute: 0, tokensPerMinute: 0, admin: true, priority: o.aPriority ?? 'interactive' },
        { name: 'b', sha256: hashApiKey(keys.b), requestsPerMinute: 0, tokensPerMinute: 0, admin: true, priority: o.bPriority ?? 'batch' },
      ],
      router: { ...gatewayDefaults.router, loadPollIntervalMs: 200 },
      upstream: { ...gatewayDefaults.upstream, connections: 1024 },
      // The engines' slots stated, as an operator would (gateway.admission.slots_per_replica).
      admission: { ...admissionDefaults, slotsPerReplica: o.maxNumSeqs ?? 4, ...o.admission },
    },
    directory: { ready: (m) => (m === 'm' ? views : []), models: () => ['m'] },
    registry: new Registry(),
    closeGraceMs: 500,
  });
  return {
    gw,
    simUrls: sims.map((s) => new URL(s.url)),
    close: async () => {
      await gw.close();
      await Promise.all(sims.map((s) => s.close()));
    },
  };
}

const client = new Agent({ connections: 4096, keepAliveTimeout: 10_000 });

let seq = 0;
const prompt = (tenant: string, chars: number): string => `${tenant} ${seq++} `.padEnd(chars, 'lorem ipsum dolor sit amet ');

interface Result {
  readonly tenant: string;
  readonly status: number;
  readonly ttftMs: number | undefined;
  readonly promptTokens: number;
  /** A refusal carrying Retry-After and an OpenAI error: answered with a reason. */
  readonly reasoned: boolean;
  readonly error: string | undefined;
  /** performance.now() when the answer ended. */
  readonly endMs: number;
  /** The engine's id of the answer (its chunks' id), to find the sim's account of it. */
  readonly completionId?: string | undefined;
  /** The gateway's compact receipt (x-llmgw-receipt). */
  readonly receipt?: string | undefined;
}

// One streamed chat; the time to its first content byte.
async function chat(gw: Gateway, tenant: 'a' | 'b', chars: number, signal: AbortSignal): Promise<Result> {
  const t0 = performance.now();
  try {
    const res = await request(new URL('/v1/chat/completions', gw.url), {
      method: 'POST',
      dispatcher: client,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${keys[tenant]}` },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: prompt(tenant, chars) }], max_tokens: MAX_TOKENS, stream: true, stream_options: { include_usage: true } }),
      signal,
    });
    if (res.statusCode !== 200) {
      const text = await res.body.text();
      const reasoned = res.headers['retry-after'] !== undefined && text.includes('"error"');
      return { tenant, status: res.statusCode, ttftMs: undefined, promptTokens: 0, reasoned, error: undefined, endMs: performance.now() };
    }
    let ttftMs: number | undefined;
    let text = '';
    for await (const chunk of res.body) {
      ttftMs ??= performance.now() - t0;
      text += Buffer.from(chunk).toString('utf8');
    }
    const usage = /"prompt_tokens":(\d+)/.exec(text);
    const receipt = res.headers['x-llmgw-receipt'];
    return {
      tenant,
      status: 200,
      ttftMs,
      promptTokens: Number(usage?.[1] ?? 0),
      reasoned: true,
      error: undefined,
      endMs: performance.now(),
      completionId: /"id":"([^"]+)"/.exec(text)?.[1],
      receipt: typeof receipt === 'string' ? receipt : undefined,
    };
  } catch (e) {
    return { tenant, status: 0, ttftMs: undefined, promptTokens: 0, reasoned: false, error: e instanceof Error ? e.name : String(e), endMs: performance.now() };
  }
}

// Poisson arrivals at `perS` for `seconds`; every request is awaited (the stop signal aborts stragglers).
async function open(gw: Gateway, tenant: 'a' | 'b', perS: number, seconds: number, chars: number, stop: AbortSignal): Promise<Result[]> {
  const out: Promise<Result>[] = [];
  const end = performance.now() + seconds * 1000;
  let next = performance.now();
  while (next < end) {
    const wait = next - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    out.push(chat(gw, tenant, chars, stop));
    next += (-Math.log(1 - Math.random()) * 1000) / perS;
  }
  return Promise.all(out);
}

// Requests a second the fleet completes with `concurrency` always outstanding.
async function capacity(): Promise<number> {
  const f = await fleet({ admission: { enabled: false }, policy: 'priority' });
  try {
    let done = 0;
    const end = performance.now() + 3000;
    const worker = async (): Promise<void> => {
      while (performance.now() < end) if ((await chat(f.gw, 'a', PROMPT_CHARS, AbortSignal.timeout(30_000))).status === 200) done++;
    };
    const t0 = performance.now();
    await Promise.all(Array.from({ length: 24 }, worker));
    return done / ((performance.now() - t0) / 1000);
  } finally {
    await f.close();
  }
}

const round = (v: number, d = 1): number => Math.round(v * 10 ** d) / 10 ** d;

function tally(rs: readonly Result[]) {
  const ok = rs.filter((r) => r.status === 200);
  const refused = rs.filter((r) => r.status !== 200 && r.status !== 0);
  const aborted = rs.filter((r) => r.error === 'AbortError');
  const ttft = percentiles(ok.flatMap((r) => (r.ttftMs === undefined ? [] : [r.ttftMs])));
  return {
    sent: rs.length,
    ok: ok.length,
    refused: refused.length,
    refusedWithReason: refused.filter((r) => r.reasoned).length,
    abortedByBench: aborted.length,
    silent: rs.filter((r) => r.status === 0 && r.error !== 'AbortError').length + refused.filter((r) => !r.reasoned).length,
    ttftP50Ms: round(ttft.p50),
    ttftP99Ms: round(ttft.p99),
    promptTokens: ok.reduce((n, r) => n + r.promptTokens, 0),
  };
}

interface SimAccount {
  readonly id: string;
  readonly queuedMs: number;
  readonly prefillMs: number;
  readonly ttftMs: number | null;
  readonly preemptions: number;
}

// Where A's first-token time went, per request, from the gateway's receipt and the sim's own account:
//   admission: waited in the gateway's admission queue (the receipt's queued=);
//   gatewayOther: the rest of the time outside the engine (routing, proxying, the event loop);
//   engineQueue: in the engine's waiting queue (for the step running when it came, or behind others);
//   ownPrefill: its own prompt at the prefill rate;
//   sharedStep: the rest of its scheduled steps: other requests' prefill chunks and decodes in them.
// Printed as the mean over all of A's requests and over the slowest 5%, in ms.
interface Where {
  readonly ttft: number;
  readonly admission: number;
  readonly gatewayOther: number;
  readonly engineQueue: number;
  readonly ownPrefill: number;
  readonly sharedStep: number;
}

interface Breakdown {
  readonly rows: readonly Where[];
  readonly enginePreemptions: number;
  readonly engineFinished: number;
}

async function breakdown(f: Fleet, rs: readonly Result[]): Promise<Breakdown> {
  const accounts = new Map<string, SimAccount>();
  for (const u of f.simUrls) {
    const res = await request(new URL('/sim/requests', u));
    for (const a of ((await res.body.json()) as { data: SimAccount[] }).data) accounts.set(a.id, a);
  }
  const rows = rs.flatMap((r) => {
    const a = r.completionId === undefined ? undefined : accounts.get(r.completionId);
    if (r.ttftMs === undefined || a === undefined || a.ttftMs === null) return [];
    const admission = Number(/queued=(\d+(?:\.\d+)?)ms/.exec(r.receipt ?? '')?.[1] ?? 0);
    return [{ ttft: r.ttftMs, admission, gatewayOther: r.ttftMs - a.ttftMs - admission, engineQueue: a.queuedMs, ownPrefill: a.prefillMs, sharedStep: a.ttftMs - a.queuedMs - a.prefillMs }];
  });
  // The preemptions the engines made (each one a prompt prefilled again), over every request they finished.
  const preemptions = [...accounts.values()].reduce((n, a) => n + a.preemptions, 0);
  return { rows, enginePreemptions: preemptions, engineFinished: accounts.size };
}

// The breakdown's mean over all of A's requests and over the slowest 5%; rounds pooled.
function whereOf(bs: readonly Breakdown[]) {
  const rows = bs.flatMap((b) => b.rows);
  const mean = (xs: readonly Where[]) => {
    const m = (k: keyof Where): number => round(xs.reduce((n, x) => n + x[k], 0) / Math.max(1, xs.length));
    return { n: xs.length, ttft: m('ttft'), admission: m('admission'), gatewayOther: m('gatewayOther'), engineQueue: m('engineQueue'), ownPrefill: m('ownPrefill'), sharedStep: m('sharedStep') };
  };
  const slow = [...rows].sort((a, b) => b.ttft - a.ttft).slice(0, Math.max(1, Math.ceil(rows.length / 20)));
  const sum = (k: 'enginePreemptions' | 'engineFinished'): number => bs.reduce((n, b) => n + b[k], 0);
  return { all: mean(rows), slowest5pct: mean(slow), enginePreemptions: sum('enginePreemptions'), engineFinished: sum('engineFinished') };
}

// B's answers a second that ended inside its window: what the flood got done.
const perS = (rs: readonly Result[], fromMs: number, toMs: number): number => round(rs.filter((r) => r.status === 200 && r.endMs > fromMs && r.endMs <= toMs).length / ((toMs - fromMs) / 1000), 2);

async function twoTenants(name: string, cap: number, o: Parameters<typeof fleet>[0], withB: boolean) {
  const f = await fleet(o);
  const stop = new AbortController();
  setMaxListeners(0, stop.signal);
  try {
    const t0 = performance.now();
    const aRun = open(f.gw, 'a', 0.3 * cap, SECONDS, PROMPT_CHARS, stop.signal);
    const bRun = withB ? open(f.gw, 'b', 5 * cap, SECONDS, PROMPT_CHARS, stop.signal) : Promise.resolve([]);
    // A's requests all finish on their own; B's stragglers past the window are cut by the bench.
    const a = await aRun;
    const where = await breakdown(f, a);
    setTimeout(() => stop.abort(), 2_000).unref();
    const b = await bRun;
    return { scenario: name, a: tally(a), b: tally(b), bPerS: perS(b, t0, t0 + SECONDS * 1000), whereA: whereOf([where]), samples: { a, b, where } };
  } finally {
    stop.abort();
    await f.close();
  }
}

// The shape of issue 46, as a new user meets it: both keys from llmgw.yaml with nothing but their
// names (so both of class standard, weight 1), the engines' slots not stated, the sims at their own
// decode rate with 4 sequences each; A sends one request at a time, B keeps 32 streams open.
const yamlKeys = { api_keys: [{ name: 'a', sha256: hashApiKey(keys.a) }, { name: 'b', sha256: hashApiKey(keys.b) }] };

async function equalKeys(name: string, withB: boolean, exclusive = true) {
  const yaml = exclusive ? yamlKeys : { ...yamlKeys, admission: { reserved_replicas_exclusive: false } };
  const f = await fleet({ admission: {}, policy: 'priority', maxNumSeqs: 4, yaml });
  const stop = new AbortController();
  setMaxListeners(0, stop.signal);
  try {
    const end = performance.now() + SECONDS * 1000;
    const closedLoop = async (tenant: 'a' | 'b'): Promise<Result[]> => {
      const out: Result[] = [];
      while (performance.now() < end && !stop.signal.aborted) out.push(await chat(f.gw, tenant, PROMPT_CHARS, stop.signal));
      return out;
    };
    // One request first, not counted, in both runs: the first through a fresh gateway pays for its start.
    await chat(f.gw, 'a', PROMPT_CHARS, stop.signal);
    const t0 = performance.now();
    const bRun = withB ? Promise.all(Array.from({ length: 32 }, () => closedLoop('b'))) : Promise.resolve([]);
    // B's first streams are in before A's first request: A meets the flood, not its start.
    if (withB) await new Promise((r) => setTimeout(r, 1000));
    const a = await closedLoop('a');
    const where = await breakdown(f, a);
    setTimeout(() => stop.abort(), 2_000).unref();
    const b = (await bRun).flat();
    return { scenario: name, a: tally(a), b: tally(b), bPerS: perS(b, t0, end), whereA: whereOf([where]), samples: { a, b, where } };
  } finally {
    stop.abort();
    await f.close();
  }
}

async function fairness(cap: number) {
  const f = await fleet({ admission: {}, policy: 'priority', aPriority: 'batch', bPriority: 'batch' });
  const stop = new AbortController();
  setMaxListeners(0, stop.signal);
  try {
    // Both batch, both flooding at 3x with equal weights: A with prompts 4x B's.
    const t0 = performance.now();
    // Both stay backlogged to the end; what is still waiting a second later is cut by the bench.
    setTimeout(() => stop.abort(), (SECONDS + 1) * 1000).unref();
    const [a, b] = await Promise.all([open(f.gw, 'a', 3 * cap, SECONDS, PROMPT_CHARS * 2, stop.signal), open(f.gw, 'b', 3 * cap, SECONDS, PROMPT_CHARS / 2, stop.signal)]);
    // Only what the engines served inside the window, after the first second (both backlogged by then).
    const within = (r: Result): boolean => r.status === 200 && r.endMs > t0 + 1000 && r.endMs <= t0 + SECONDS * 1000;
    const served = { a: tally(a.filter(within)).promptTokens, b: tally(b.filter(within)).promptTokens };
    const total = served.a + served.b;
    return { promptChars: { a: PROMPT_CHARS * 2, b: PROMPT_CHARS / 2 }, prefillTokensServed: served, shareA: round(served.a / total, 3), shareB: round(served.b / total, 3) };
  } finally {
    stop.abort();
    await f.close();
  }
}

// 10,000 requests at once against replicas that never free a slot: the child process sends them (its
// sockets are its own), the gateway holds them, and each is refused when its wait runs out.
async function tenThousand() {
  const f = await fleet({ admission: { maxQueuedRequests: 20_000, maxWaitMs: 120_000 }, policy: 'priority', maxNumSeqs: 1, decodeTokensPerS: 1000 });
  try {
    global.gc?.();
    const before = process.memoryUsage().rss;
    let peak = before;
    const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 100);
    const child = spawn(process.execPath, [fileURLToPath(import.meta.url), 'flood', f.gw.url.href], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number | null>((r) => child.on('exit', r));
    // The queue's peak and the process's RSS at it, read every 100 ms until the child is done.
    let queued = 0;
    let atFull = before;
    let over = false;
    void exited.then(() => (over = true));
    while (!over) {
      await new Promise((r) => setTimeout(r, 100));
      const rows = await queueRows(f.gw);
      if (rows === undefined) continue;
      const now = rows[0]?.queued ?? 0;
      if (now > queued) [queued, atFull] = [now, process.memoryUsage().rss];
    }
    clearInterval(sampler);
    const counts = JSON.parse(out) as Record<string, number>;
    return { queuedAtPeak: queued, rssBeforeMiB: round(before / 2 ** 20), rssQueuedMiB: round(atFull / 2 ** 20), rssPeakMiB: round(peak / 2 ** 20), growthPerRequestKiB: round((atFull - before) / 1024 / Math.max(1, queued), 2), ...counts };
  } finally {
    await f.close();
  }
}

// The gateway's queues, read as `llmgw ctl status` reads them; undefined when the read was reset:
// while the child's 10,000 connect, the loaded box's listen backlog overflowed and reset a poll,
// which ended the whole run before it wrote its results. A reset poll is one sample missed.
async function queueRows(gw: Gateway): Promise<ReturnType<typeof queueRowsOf> | undefined> {
  try {
    const res = await request(new URL('/debug/queues', gw.url), { headers: { authorization: `Bearer ${keys.a}` } });
    return queueRowsOf(await res.body.json());
  } catch (e) {
    if (e instanceof Error && 'code' in e && e.code === 'ECONNRESET') return undefined;
    throw e;
  }
}

// The child's side: 10,008 requests that may wait 60 s each, connecting at 4,000 a second (a burst of
// thousands of connects at once overflows the listen backlog, which resets them before the gateway
// sees them); counts what came back.
async function floodChild(base: string): Promise<void> {
  const agent = new Agent({ connections: 20_000 });
  const n = 10_008;
  const statuses: Record<string, number> = {};
  let reasoned = 0;
  let silent = 0;
  await Promise.all(
    Array.from({ length: n }, async (_, i) => {
      await new Promise((r) => setTimeout(r, Math.floor(i / 400) * 100));
      try {
        const res = await request(new URL('/v1/chat/completions', base), {
          method: 'POST',
          dispatcher: agent,
          headers: { 'content-type': 'application/json', authorization: `Bearer ${i % 2 === 0 ? keys.a : keys.b}`, 'x-llmgw-max-wait-ms': '60000' },
          body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: `request ${i}` }], max_tokens: 4 }),
          signal: AbortSignal.timeout(120_000),
        });
        const text = await res.body.text();
        statuses[res.statusCode] = (statuses[res.statusCode] ?? 0) + 1;
        if (res.statusCode !== 200 && res.headers['retry-after'] !== undefined && text.includes('"error"')) reasoned++;
      } catch (e) {
        silent++;
        if (silent <= 3) process.stderr.write(`flood: ${e instanceof Error ? e.message : String(e)}\n`);
      }
    }),
  );
  process.stdout.write(JSON.stringify({ sent: n, byStatus: statuses, refusedWithReason: reasoned, silentOrTimedOut: silent }));
  await agent.close();
}

type Run = Awaited<ReturnType<typeof twoTenants>> & { readonly rounds?: readonly RoundFigures[] };

interface RoundFigures {
  readonly aP99Ms: number;
  readonly aP50Ms: number;
  readonly bPerS: number;
}

// Rounds of one scenario as one run: A's and B's samples pooled for the percentiles, B's rate the
// rounds' mean, and each round's own figures beside them.
function pooled(name: string, rs: readonly Run[]): Run {
  const a = rs.flatMap((r) => r.samples.a);
  const b = rs.flatMap((r) => r.samples.b);
  const rounds = rs.map((r) => ({ aP99Ms: r.a.ttftP99Ms, aP50Ms: r.a.ttftP50Ms, bPerS: r.bPerS }));
  const where = rs.map((r) => r.samples.where);
  return { scenario: name, a: tally(a), b: tally(b), bPerS: round(rs.reduce((n, r) => n + r.bPerS, 0) / rs.length, 2), whereA: whereOf(where), samples: { a, b, where: where[0] ?? { rows: [], enginePreemptions: 0, engineFinished: 0 } }, rounds };
}

// Shape 1, A alone and under the flood alternating for ROUNDS rounds, so a slow or quick spell of
// the machine falls on both sides rather than on one.
async function benchRounds(cap: number): Promise<{ alone: Run; flood: Run }> {
  const alone: Run[] = [];
  const flood: Run[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    alone.push(await twoTenants(`bench shape: A alone, round ${i + 1}`, cap, { admission: {}, policy: 'priority' }, false));
    flood.push(await twoTenants(`bench shape: B flooding, round ${i + 1}`, cap, { admission: {}, policy: 'priority' }, true));
  }
  const label = ROUNDS > 1 ? ` (${ROUNDS} rounds pooled)` : '';
  return { alone: pooled(`bench shape: A alone${label}`, alone), flood: pooled(`bench shape: B flooding${label}`, flood) };
}

// The JSON keeps the figures, not every request.
const withoutSamples = (key: string, value: unknown): unknown => (key === 'samples' ? undefined : value);

function printRun(r: Run): void {
  console.log(`${r.scenario}: A p50 ${r.a.ttftP50Ms} ms p99 ${r.a.ttftP99Ms} ms (${r.a.ok}/${r.a.sent} ok); B ok ${r.b.ok} (${r.bPerS}/s) refused ${r.b.refused} (with reason ${r.b.refusedWithReason}) cut ${r.b.abortedByBench} silent ${r.b.silent}`);
  if (r.rounds !== undefined && r.rounds.length > 1) console.log(`  per round: A p99 ${r.rounds.map((x) => x.aP99Ms).join(' / ')} ms, p50 ${r.rounds.map((x) => x.aP50Ms).join(' / ')} ms${r.b.sent > 0 ? `; B ${r.rounds.map((x) => x.bPerS).join(' / ')}/s` : ''}`);
  console.log(`  where A's TTFT went (ms; mean of all | of the slowest 5%): ${JSON.stringify(r.whereA.all)} | ${JSON.stringify(r.whereA.slowest5pct)}; engines preempted ${r.whereA.enginePreemptions} times in ${r.whereA.engineFinished} requests`);
}

// Both shapes, each A alone and under B's flood; shape 4 also under it with
// reserved_replicas_exclusive off (the reserved replica takes B's decodes), which shape 1 (B a lower
// class, not a tenant over its share) does not use. A's first-token time and B's throughput side by side.
async function bothShapes(cap: number) {
  const bench = {
    shape: 'bench: A interactive at 0.3x capacity, B batch at 5x, slots stated',
    ...(await benchRounds(cap)),
    shared: undefined,
  };
  const equal = {
    shape: 'issue 46: equal keys from YAML, slots unstated, A sequential, B 32 streams',
    alone: await equalKeys('equal keys: A alone', false),
    flood: await equalKeys('equal keys: B flooding 32 streams', true),
    shared: await equalKeys('equal keys: B flooding 32 streams, reserved_replicas_exclusive false', true, false),
  };
  return [bench, equal].map((x: { shape: string; alone: Run; flood: Run; shared: Run | undefined }) => ({
    ...x,
    p50x: round(x.flood.a.ttftP50Ms / x.alone.a.ttftP50Ms, 2),
    p99x: round(x.flood.a.ttftP99Ms / x.alone.a.ttftP99Ms, 2),
    roundP99x: x.alone.rounds?.map((r, i) => round((x.flood.rounds?.[i]?.aP99Ms ?? 0) / r.aP99Ms, 2)),
    sharedP99x: x.shared === undefined ? undefined : round(x.shared.a.ttftP99Ms / x.alone.a.ttftP99Ms, 2),
  }));
}

function printShapes(shapes: Awaited<ReturnType<typeof bothShapes>>): void {
  for (const x of shapes) for (const r of [x.alone, x.flood, x.shared]) if (r !== undefined) printRun(r);
  console.log(`A's TTFT alone | under the flood (ms), the ratio, and B's answers a second (decode ${DECODE_TOKENS_PER_S} tokens/s):`);
  for (const x of shapes) {
    const perRound = x.roundP99x !== undefined && x.roundP99x.length > 1 ? ` (${x.alone.a.ok}|${x.flood.a.ok} samples pooled over ${x.roundP99x.length} rounds; each round's p99 ratio ${x.roundP99x.join(' / ')})` : '';
    console.log(`  ${x.shape}: p50 ${x.alone.a.ttftP50Ms} | ${x.flood.a.ttftP50Ms} (${x.p50x}x), p99 ${x.alone.a.ttftP99Ms} | ${x.flood.a.ttftP99Ms} (${x.p99x}x)${perRound}; B ${x.flood.bPerS}/s, its p99 ${x.flood.b.ttftP99Ms}`);
    if (x.shared !== undefined) console.log(`    reserved_replicas_exclusive false, same run: p50 ${x.shared.a.ttftP50Ms}, p99 ${x.shared.a.ttftP99Ms} (${x.sharedP99x}x); B ${x.shared.bPerS}/s, its p99 ${x.shared.b.ttftP99Ms}`);
  }
}

async function main(): Promise<void> {
  if (process.argv[2] === 'flood') {
    await floodChild(process.argv[3] ?? '');
    return;
  }
  if (process.argv[2] === 'ten-thousand') {
    console.log(`10k queued: ${JSON.stringify(await tenThousand())}`);
    await client.close();
    return;
  }
  if (process.argv.includes('--equal-keys')) {
    const runs = [await equalKeys('equal keys: A alone', false), await equalKeys('equal keys: B flooding 32 streams', true), await equalKeys('equal keys: B flooding, reserved_replicas_exclusive false', true, false)];
    for (const r of runs) printRun(r);
    const [alone, flood, shared] = runs.map((r) => r.a.ttftP99Ms);
    console.log(`A's TTFT p99 with the flood against A alone (decode ${DECODE_TOKENS_PER_S} tokens/s): ${round((flood ?? 0) / (alone ?? 1), 2)}x; reserved_replicas_exclusive false ${round((shared ?? 0) / (alone ?? 1), 2)}x`);
    await client.close();
    return;
  }
  const loadBefore = loadavg();
  const cap = await capacity();
  console.log(`capacity: ${round(cap)} requests/s (2 sims, max_num_seqs 4, ${PROMPT_CHARS}-token prompts, ${MAX_TOKENS} tokens out, decode ${DECODE_TOKENS_PER_S} tokens/s)`);
  const shapes = await bothShapes(cap);
  mkdirSync('bench/results', { recursive: true });
  const conditions = { seconds: SECONDS, decodeTokensPerS: DECODE_TOKENS_PER_S, cores: availableParallelism(), load: loadBefore, capacityPerS: round(cap) };
  if (QUICK) {
    printShapes(shapes);
    writeFileSync('bench/results/admission-quick.json', JSON.stringify({ ...conditions, rounds: ROUNDS, loadAfter: loadavg(), shapes }, withoutSamples, 2) + '\n');
    await client.close();
    return;
  }
  const [benchShape] = shapes;
  if (benchShape === undefined) throw new Error('two shapes');
  // The same without a replica kept idle for A: what gateway.admission.reserved_replicas buys.
  const unreserved = await twoTenants('B flooding, admission on, reserved_replicas 0', cap, { admission: { reservedReplicas: 0 }, policy: 'priority' }, true);
  const offPriority = await twoTenants('B flooding, admission off, engines by priority', cap, { admission: { enabled: false }, policy: 'priority' }, true);
  const offFcfs = await twoTenants('B flooding, admission off, engines fcfs (before admission)', cap, { admission: { enabled: false }, policy: 'fcfs' }, true);
  const runs = [unreserved, offPriority, offFcfs];
  for (const r of runs) printRun(r);
  const base = benchShape.alone.a.ttftP99Ms;
  const ratios = { onVsAlone: benchShape.p99x, unreservedVsAlone: round(unreserved.a.ttftP99Ms / base, 2), offPriorityVsAlone: round(offPriority.a.ttftP99Ms / base, 2), offFcfsVsAlone: round(offFcfs.a.ttftP99Ms / base, 2) };
  console.log(`bench shape, A's TTFT p99 against A alone: admission on ${ratios.onVsAlone}x (reserved_replicas 0: ${ratios.unreservedVsAlone}x), off (engine priority) ${ratios.offPriorityVsAlone}x, off (fcfs) ${ratios.offFcfsVsAlone}x`);
  printShapes(shapes);
  const fair = await fairness(cap);
  console.log(`equal weights, both flooding: prefill tokens A ${fair.shareA}, B ${fair.shareB}`);
  const big = await tenThousand();
  console.log(`10k queued: ${JSON.stringify(big)}`);
  const result = { ...conditions, loadAfter: loadavg(), shapes, runs, ratios, fairness: fair, tenThousand: big };
  writeFileSync('bench/results/admission.json', JSON.stringify(result, withoutSamples, 2) + '\n');
  await client.close();
}

await main();
