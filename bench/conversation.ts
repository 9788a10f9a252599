// Routing time per decision as an operator sees it: `llmgw serve` (what `npm start` runs) on the
// built-in default's shape (two sim replicas of qwen3 with KV events, the qwen3 tokenizer, local
// tokenizing verified against /tokenize), measured from outside by the gateway's own
// llmgw_gateway_routing_duration_seconds. Requests go one at a time, so the histogram's _sum
// between two scrapes is one decision's time exactly. (1) The first conversation after /ready: 20
// streamed turns growing to about 28k tokens, each resending the history with the answers the sim
// gave; (2) the same again, warm (a second conversation with other text, the process already
// having routed one); (3) a 100k-token document asked another short question each turn: the p50
// and p99 of those turns, its first (cold) sight apart. The sims answer at once
// (prefill and decode at millions of tokens a second), so a turn's wall time is the gateway's.
// With --cpu-prof the serve process writes a V8 CPU profile per thread (the pool's workers too) to
// bench/results/conversation-profile/ on exit. Each phase also reports its mean time a turn in
// each of the gateway's request stages (llmgw_gateway_request_stage_seconds: tokenize, score,
// decide, upstream, ...), read from the same scrapes, and their sum before upstream.
// Run: npm run build && node dist/bench/conversation.js [--quick] [--cpu-prof]   (writes bench/results/conversation.json)
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';

const quick = process.argv.includes('--quick');
const profile = process.argv.includes('--cpu-prof');
const TURNS = quick ? 5 : 20;
const FINAL_TOKENS = quick ? 7_000 : 28_000;
const LONG_TOKENS = quick ? 20_000 : 100_000;
const LONG_RUNS = quick ? 5 : 40;
const ANSWER_TOKENS = 64;
// --verify-first N: router.tokenize_verify_first for this run (the default's 16 otherwise), to see
// what verifying the first requests against /tokenize costs them.
const verifyAt = process.argv.indexOf('--verify-first');
const verifyFirst = verifyAt < 0 ? undefined : Number(process.argv[verifyAt + 1]);
const main = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));
const results = fileURLToPath(new URL('../../bench/results/', import.meta.url));

const round = (v: number, d = 3): number => Math.round(v * 10 ** d) / 10 ** d;
function pct(values: readonly number[], p: number): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
}
const mean = (v: readonly number[]): number => v.reduce((a, b) => a + b, 0) / Math.max(1, v.length);

const words = ['the', 'gateway', 'routes', 'each', 'request', 'to', 'replica', 'holding', 'longest', 'cached', 'prefix', 'of', 'its', 'prompt',
  'Zürich', 'naïve', '日本語', 'émoji', 'tokens', 'blocks', 'hash', 'engine', 'prefill', 'decode', 'stream', '42', '3.14', 'x = f(y);', '\n'];

// About 1.6 qwen3 tokens a word for this mix; the figures report the prompt tokens the sim counted.
function prose(tokens: number, seed: number): string {
  let x = seed * 2654435761 || 1;
  let s = '';
  for (let i = 0; i < tokens * 0.62; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    s += (words[(x >>> 0) % words.length] ?? '') + ' ';
  }
  return s;
}

// Each sim takes a run of consecutive ports (its HTTP port, its KV events and replay): a base from
// a range below Linux's ephemeral ports, each port checked free.
async function isFree(port: number): Promise<boolean> {
  const srv = createServer();
  const ok = await new Promise<boolean>((resolve) => {
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => resolve(true));
  });
  if (ok) await new Promise<void>((r) => srv.close(() => r()));
  return ok;
}
async function freeRun(width: number): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const base = 20_000 + Math.floor(Math.random() * 12_000);
    let all = true;
    for (let p = base; p < base + width && all; p++) all = await isFree(p);
    if (all) return base;
  }
  throw new Error(`no run of ${width} free ports between 20000 and 32000 after 200 tries`);
}

const configYaml = (port: number, httpBase: number, kvBase: number, routerYaml: string): string => `engines:
  sim: { bin: "" }
kv_events: { hash_seed: "0", hash_algo: sha256_cbor }
node:
  name: local
  addr: 127.0.0.1
  devices: []
  ports: { http_base: ${httpBase}, kv_events_base: ${kvBase} }
models:
  qwen3:
    served_model_name: qwen3
    profiles:
      - name: sim-cpu
        engine: sim
        gpu_class: cpu
        tp: 1
        model_path: qwen3
        kv_events: true
        args: [--prefill-tokens-per-s, "100000000", --decode-tokens-per-s, "1000000", --answer-tokens, "${ANSWER_TOKENS}", --max-model-len, "262144", --kv-capacity-blocks, "65536"]
replicas:
  - { model: qwen3, profile: sim-cpu, count: 2 }
gateway:
  host: 127.0.0.1
  port: ${port}
  max_body_bytes: 67108864
${routerYaml}`;

async function waitReady(url: string, serve: ChildProcess, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    if (serve.exitCode !== null) throw new Error(`llmgw serve exited with ${serve.exitCode} before /ready`);
    const ok = await request(`${url}/ready`, { signal: AbortSignal.timeout(2_000) })
      .then(async (r) => (await r.body.dump(), r.statusCode === 200))
      .catch(() => false);
    if (ok) return;
    if (Date.now() > until) throw new Error(`llmgw serve was not ready after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

// The routing histogram's sum (seconds) and count, all tiers together, and the request stages'
// sums (llmgw_gateway_request_stage_seconds) by stage.
async function routing(url: string): Promise<{ seconds: number; count: number; stages: Map<string, number> }> {
  const res = await request(`${url}/metrics`, { signal: AbortSignal.timeout(10_000) });
  const text = await res.body.text();
  let seconds = 0;
  let count = 0;
  const stages = new Map<string, number>();
  for (const line of text.split('\n')) {
    const v = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (line.startsWith('llmgw_gateway_routing_duration_seconds_sum')) seconds += v;
    else if (line.startsWith('llmgw_gateway_routing_duration_seconds_count')) count += v;
    const stage = /^llmgw_gateway_request_stage_seconds_sum\{stage="([a-z]+)"\}/.exec(line)?.[1];
    if (stage !== undefined) stages.set(stage, v);
  }
  return { seconds, count, stages };
}

// Each stage's time in one request, between two scrapes (ms).
function stagesBetween(before: Map<string, number>, after: Map<string, number>): Map<string, number> {
  return new Map([...after].map(([stage, v]) => [stage, (v - (before.get(stage) ?? 0)) * 1000]));
}

// A turn's time in the stages before it goes upstream (ms): routing's own (tokenize, score, decide)
// and what readies it (parse, which may tokenize ahead in the same worker trip, quota, admission),
// so work moved from one stage to another shows as moved, not as gone.
function beforeUpstream(stages: Record<string, number>): number {
  const names = Object.keys(stages);
  const end = names.indexOf('upstream');
  return round(names.slice(0, end < 0 ? names.length : end).reduce((n, k) => n + (stages[k] ?? 0), 0));
}

// The mean of each stage over a phase's turns (ms), in the gateway's order of stages.
function stageMeans(turns: readonly Map<string, number>[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const stage of turns[0]?.keys() ?? []) out[stage] = round(mean(turns.map((t) => t.get(stage) ?? 0)));
  return out;
}

interface Message {
  readonly role: string;
  readonly content: string;
}

// One streamed chat turn: the answer's text, the prompt's tokens as the sim counted them, and the
// routing time the gateway recorded for it.
async function turn(url: string, messages: readonly Message[]): Promise<{ answer: string; promptTokens: number; routingMs: number; wallMs: number; stagesMs: Map<string, number> }> {
  const before = await routing(url);
  const t0 = performance.now();
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'qwen3', stream: true, stream_options: { include_usage: true }, max_tokens: ANSWER_TOKENS, messages }),
    signal: AbortSignal.timeout(60_000),
  });
  const text = await res.body.text();
  const wallMs = performance.now() - t0;
  if (res.statusCode !== 200) throw new Error(`chat turn answered ${res.statusCode}: ${text.slice(0, 300)}`);
  let answer = '';
  let promptTokens = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: {')) continue;
    const ev = JSON.parse(line.slice(6)) as { choices?: { delta?: { content?: string } }[]; usage?: { prompt_tokens?: number } | null };
    answer += ev.choices?.[0]?.delta?.content ?? '';
    if (typeof ev.usage?.prompt_tokens === 'number') promptTokens = ev.usage.prompt_tokens;
  }
  const after = await routing(url);
  if (after.count !== before.count + 1) throw new Error(`expected one routing decision for the turn, the histogram counted ${after.count - before.count}`);
  return { answer, promptTokens, routingMs: (after.seconds - before.seconds) * 1000, wallMs, stagesMs: stagesBetween(before.stages, after.stages) };
}

async function conversation(url: string, seed: number): Promise<{ routingMs: number[]; wallMs: number[]; stagesMs: Map<string, number>[]; finalPromptTokens: number }> {
  const history: Message[] = [{ role: 'system', content: prose(400, seed) }];
  const perTurn = (FINAL_TOKENS - 400) / TURNS - ANSWER_TOKENS;
  const routingMs: number[] = [];
  const wallMs: number[] = [];
  const stagesMs: Map<string, number>[] = [];
  let finalPromptTokens = 0;
  for (let k = 0; k < TURNS; k++) {
    history.push({ role: 'user', content: prose(perTurn, seed * 100 + k + 1) });
    const t = await turn(url, history);
    history.push({ role: 'assistant', content: t.answer });
    routingMs.push(t.routingMs);
    wallMs.push(t.wallMs);
    stagesMs.push(t.stagesMs);
    finalPromptTokens = t.promptTokens;
  }
  return { routingMs, wallMs, stagesMs, finalPromptTokens };
}

async function main_(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-conversation-'));
  mkdirSync(results, { recursive: true });
  const port = await freeRun(1);
  const httpBase = await freeRun(2);
  const kvBase = await freeRun(8);
  const cfg = join(dir, 'llmgw.yaml');
  writeFileSync(cfg, configYaml(port, httpBase, kvBase, verifyFirst === undefined ? '' : `  router: { tokenize_verify_first: ${verifyFirst} }\n`));
  const nodeArgs = profile ? ['--cpu-prof', '--cpu-prof-dir', join(results, 'conversation-profile')] : [];
  const serve = spawn(process.execPath, [...nodeArgs, main, 'serve', '--config', cfg], {
    cwd: dir,
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, LLMGW_LOG_FORMAT: 'json' },
  });
  let log = '';
  serve.stderr?.on('data', (c: Buffer) => {
    if (log.length < 1_000_000) log += c.toString('utf8');
  });
  const url = `http://127.0.0.1:${port}`;
  try {
    await waitReady(url, serve, 120_000);
    console.log(`llmgw serve ready at ${url}; two sims; ${TURNS} turns to about ${FINAL_TOKENS} tokens, then ${LONG_RUNS} turns of ${LONG_TOKENS}`);
    console.log(`the machine is shared with other work while this runs (load average ${loadavg().map((l) => l.toFixed(2)).join(' ')}): read the ratios, not the absolute times`);
    const first = await conversation(url, 1);
    const warm = await conversation(url, 2);
    // A long document resent with another question each time: a cached prefix, a new tail, as a
    // long-context chat's turns are.
    const doc = prose(LONG_TOKENS, 3);
    // Its first sight is a cold prompt, encoded whole: reported apart, not as the turns' p99.
    const long: number[] = [];
    const longStages: Map<string, number>[] = [];
    let longTokens = 0;
    let coldMs = NaN;
    for (let i = 0; i <= LONG_RUNS; i++) {
      const t = await turn(url, [{ role: 'user', content: doc }, { role: 'user', content: prose(40, 1000 + i) }]);
      if (i === 0) coldMs = t.routingMs;
      else {
        long.push(t.routingMs);
        longStages.push(t.stagesMs);
      }
      longTokens = t.promptTokens;
    }
    const out = {
      bench: 'conversation',
      quick,
      cpus: availableParallelism(),
      loadavg: loadavg(),
      turns: TURNS,
      first: { finalPromptTokens: first.finalPromptTokens, meanMs: round(mean(first.routingMs)), maxMs: round(Math.max(...first.routingMs)), firstTurnMs: round(first.routingMs[0] ?? NaN), wallMeanMs: round(mean(first.wallMs)), routingMs: first.routingMs.map((v) => round(v)), stagesMs: stageMeans(first.stagesMs), beforeUpstreamMs: beforeUpstream(stageMeans(first.stagesMs)) },
      warm: { finalPromptTokens: warm.finalPromptTokens, meanMs: round(mean(warm.routingMs)), p50Ms: round(pct(warm.routingMs, 50)), maxMs: round(Math.max(...warm.routingMs)), wallMeanMs: round(mean(warm.wallMs)), routingMs: warm.routingMs.map((v) => round(v)), stagesMs: stageMeans(warm.stagesMs), beforeUpstreamMs: beforeUpstream(stageMeans(warm.stagesMs)) },
      long: { promptTokens: longTokens, runs: LONG_RUNS, coldMs: round(coldMs), p50Ms: round(pct(long, 50)), p99Ms: round(pct(long, 99)), meanMs: round(mean(long)), stagesMs: stageMeans(longStages), beforeUpstreamMs: beforeUpstream(stageMeans(longStages)) },
    };
    console.log(`first conversation after /ready (${first.finalPromptTokens} tokens at the end): routing mean ${out.first.meanMs} ms, its first turn ${out.first.firstTurnMs} ms, slowest ${out.first.maxMs} ms`);
    console.log(`warm conversation (${warm.finalPromptTokens} tokens at the end): routing mean ${out.warm.meanMs} ms, p50 ${out.warm.p50Ms} ms, slowest ${out.warm.maxMs} ms`);
    console.log(`${longTokens}-token turns (${LONG_RUNS} after the document's first, cold one of ${out.long.coldMs} ms): routing p50 ${out.long.p50Ms} ms, p99 ${out.long.p99Ms} ms`);
    const stageText = (s: Record<string, number>): string => Object.entries(s).map(([k, v]) => `${k} ${v}`).join(', ');
    console.log(`mean ms a turn by stage (llmgw_gateway_request_stage_seconds): first ${stageText(out.first.stagesMs)}`);
    console.log(`  warm ${stageText(out.warm.stagesMs)}`);
    console.log(`  ${longTokens}-token turns ${stageText(out.long.stagesMs)}`);
    console.log(`mean ms a turn before upstream (every stage up to it): first ${out.first.beforeUpstreamMs}, warm ${out.warm.beforeUpstreamMs}, ${longTokens}-token turns ${out.long.beforeUpstreamMs}`);
    const file = join(results, `conversation${quick ? '-quick' : ''}.json`);
    writeFileSync(file, JSON.stringify(out, null, 2) + '\n');
    console.log(`wrote ${file}`);
  } catch (e) {
    process.stderr.write(log.slice(-4_000));
    throw e;
  } finally {
    if (serve.exitCode === null) serve.kill('SIGTERM');
    const exited = serve.exitCode !== null || await Promise.race([new Promise<boolean>((r) => serve.once('exit', () => r(true))), new Promise<boolean>((r) => setTimeout(() => r(false), 20_000))]);
    if (!exited) serve.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
}

await main_();
