// Thinking streams across engines killed under them (issue 46): three sim processes running as the
// default config runs them (Qwen3's tokenizer and template, --reasoning-parser qwen3, 32 think
// tokens), streamed chats started over a few seconds, and an engine killed with SIGKILL at random
// moments (restarted at once, out of the directory until healthy), so kills land mid-think and
// mid-answer. The same streams and kill moments run with migration (max_migrations 2, the default)
// and without (0), the comparison. A stream is exact when it ends with a finish_reason and its
// reasoning and its content are each exactly those of an unkilled stream of the same request.
// Run: npx tsc -p . && node dist/bench/thinking-migration.js [--streams 40] [--kills 8] [--tokens 120]
//      (writes bench/results/thinking-migration.json)
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { availableParallelism, loadavg } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Registry } from 'prom-client';
import { gatewayDefaults, startGateway } from '../src/gateway/index.js';
import type { ReplicaView } from '../src/routing/index.js';
import { HashPool } from '../src/workers/index.js';
import { benchReplica } from './replicas.js';

const mainJs = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));
const arg = (name: string, d: number): number => {
  const i = process.argv.indexOf(name);
  return i < 0 ? d : Number(process.argv[i + 1]);
};
const STREAMS = arg('--streams', 40);
const KILLS = arg('--kills', 8);
const TOKENS = arg('--tokens', 120);
const ENGINES = 3;
const DECODE_TOKENS_PER_S = 100;
// Streams start over this long; the kills fall in it, while streams are running.
const SPREAD_MS = 8_000;

function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => ((s = (s * 1_664_525 + 1_013_904_223) >>> 0) / 2 ** 32);
}

async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const a = srv.address();
  await new Promise<void>((r) => srv.close(() => r()));
  if (a === null || typeof a === 'string') throw new Error('no port');
  return a.port;
}

class Engine {
  child: ChildProcess | undefined;
  generation = 0;
  healthy = false;
  constructor(
    readonly id: string,
    readonly port: number,
  ) {}

  async start(): Promise<void> {
    this.generation++;
    this.child = spawn(
      process.execPath,
      [mainJs, 'sim', 'serve', 'qwen3', '--reasoning-parser', 'qwen3', '--think-tokens', '32', '--decode-tokens-per-s', String(DECODE_TOKENS_PER_S), '--host', '127.0.0.1', '--port', String(this.port)],
      { stdio: 'ignore', env: { ...process.env, PYTHONHASHSEED: '0' } },
    );
    for (let i = 0; i < 600; i++) {
      try {
        if ((await fetch(`http://127.0.0.1:${this.port}/health`, { signal: AbortSignal.timeout(1000) })).status === 200) {
          this.healthy = true;
          return;
        }
      } catch {
        // Not listening yet.
      }
      await sleep(50);
    }
    throw new Error(`sim ${this.id} did not become healthy`);
  }

  async kill(): Promise<void> {
    const c = this.child;
    this.healthy = false;
    if (c === undefined || c.exitCode !== null || c.signalCode !== null) return;
    const exited = once(c, 'exit');
    c.kill('SIGKILL');
    await exited;
  }

  view(): ReplicaView {
    return benchReplica(this.id, 'qwen3', new URL(`http://127.0.0.1:${this.port}`), { kvEvents: false, generation: this.generation });
  }
}

type StreamResult = 'exact' | 'wrong-text' | 'error';

interface Answer {
  readonly reasoning: string;
  readonly content: string;
}

async function stream(url: URL, i: number): Promise<Answer | 'error'> {
  try {
    const res = await fetch(new URL('/v1/chat/completions', url), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'qwen3', messages: [{ role: 'user', content: `think about story ${i}` }], max_tokens: TOKENS, stream: true }),
      signal: AbortSignal.timeout(120_000),
    });
    if (res.status !== 200) return 'error';
    let reasoning = '';
    let content = '';
    let finished = false;
    for (const event of (await res.text()).split('\n\n')) {
      if (!event.startsWith('data: {')) continue;
      const data = JSON.parse(event.slice(6)) as { error?: unknown; choices?: { delta?: { content?: string; reasoning?: string }; finish_reason?: string | null }[] };
      if (data.error !== undefined) return 'error';
      reasoning += data.choices?.[0]?.delta?.reasoning ?? '';
      content += data.choices?.[0]?.delta?.content ?? '';
      if (typeof data.choices?.[0]?.finish_reason === 'string') finished = true;
    }
    return finished ? { reasoning, content } : 'error';
  } catch {
    return 'error';
  }
}

async function run(label: string, maxMigrations: number, engines: readonly Engine[], seed: number) {
  const registry = new Registry();
  // The gateway renders Qwen3's template itself: a thinking stream is continued on the prompt it renders.
  const pool = new HashPool({ indexBuffer: null, maxThreads: 1 });
  const gw = await startGateway({
    config: { ...gatewayDefaults, port: 0, upstream: { ...gatewayDefaults.upstream, maxMigrations } },
    registry,
    closeGraceMs: 1000,
    directory: { ready: (m) => (m === 'qwen3' ? engines.filter((e) => e.healthy).map((e) => e.view()) : []), models: () => ['qwen3'] },
    tokenizePool: pool,
    tokenizerOf: () => 'qwen3',
  });
  await gw.whenWarm();
  const reference = await stream(gw.url, -1);
  if (reference === 'error') throw new Error('the unkilled reference stream failed');
  const rnd = random(seed);
  const killAt = Array.from({ length: KILLS }, () => 500 + rnd() * SPREAD_MS).sort((a, b) => a - b);
  const victims = killAt.map(() => Math.floor(rnd() * ENGINES));
  const t0 = performance.now();
  const streams = Array.from({ length: STREAMS }, async (_, i) => {
    await sleep((i * SPREAD_MS) / STREAMS);
    return stream(gw.url, i);
  });
  const restarts: Promise<void>[] = [];
  let kills = 0;
  for (const [k, at] of killAt.entries()) {
    await sleep(Math.max(0, at - (performance.now() - t0)));
    // Another replica stays ready through every kill (the probe's question is what migration does
    // when there is somewhere to go): with one engine left up, the kill waits for a restart.
    while (engines.filter((e) => e.healthy).length < 2) await sleep(50);
    const up = engines.filter((e) => e.healthy);
    const e = up[(victims[k] ?? 0) % up.length];
    if (e === undefined) continue;
    await e.kill();
    kills++;
    restarts.push(e.start());
  }
  const answers = await Promise.all(streams);
  await Promise.all(restarts);
  const text = await registry.metrics();
  await gw.close();
  await pool.close();
  const results: StreamResult[] = answers.map((a) => (a === 'error' ? 'error' : a.reasoning === reference.reasoning && a.content === reference.content ? 'exact' : 'wrong-text'));
  const count = (r: StreamResult): number => results.filter((x) => x === r).length;
  const resumed = [...text.matchAll(/^llmgw_gateway_stream_migrations_total\{reason="[^"]+",outcome="resumed"\} (\d+)$/gm)].reduce((s, m) => s + Number(m[1]), 0);
  const outcomes: Record<string, number> = {};
  for (const m of text.matchAll(/^llmgw_gateway_stream_migrations_total\{reason="[^"]+",outcome="([^"]+)"\} (\d+)$/gm)) outcomes[m[1] ?? ''] = (outcomes[m[1] ?? ''] ?? 0) + Number(m[2]);
  const broken = Object.values(outcomes).reduce((s, n) => s + n, 0);
  return { label, maxMigrations, streams: STREAMS, kills, exact: count('exact'), wrongText: count('wrong-text'), errors: count('error'), brokenStreams: broken, resumed, outcomes };
}

async function main(): Promise<void> {
  const engines: Engine[] = [];
  for (let i = 0; i < ENGINES; i++) engines.push(new Engine(`e${i}`, await freePort()));
  try {
    await Promise.all(engines.map((e) => e.start()));
    const seed = arg('--seed', 46);
    const results = [await run('migration (max_migrations 2)', 2, engines, seed), await run('no migration (max_migrations 0)', 0, engines, seed)];
    console.log(`${STREAMS} thinking streams of ${TOKENS} tokens (32 of them thinking) over ${SPREAD_MS / 1000} s, ${ENGINES} sim replicas at ${DECODE_TOKENS_PER_S} tokens/s, ${KILLS} kill -9 at random moments (seed ${seed})`);
    console.log(`host: ${availableParallelism()} cores, load average ${loadavg().map((l) => l.toFixed(1)).join(' ')} (shared with other work)`);
    for (const r of results) {
      console.log(`${r.label.padEnd(32)} exact ${r.exact}/${r.streams}  errors ${r.errors}  wrong text ${r.wrongText}  streams broken ${r.brokenStreams}, resumed ${r.resumed} ${JSON.stringify(r.outcomes)}  (${r.kills} kills)`);
    }
    mkdirSync(new URL('../../bench/results/', import.meta.url), { recursive: true });
    writeFileSync(new URL('../../bench/results/thinking-migration.json', import.meta.url), JSON.stringify({ at: new Date().toISOString(), cores: availableParallelism(), loadavg: loadavg(), results }, null, 2) + '\n');
    console.log('wrote bench/results/thinking-migration.json');
  } finally {
    await Promise.all(engines.map((e) => e.kill()));
  }
}

await main();
