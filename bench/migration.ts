// The probe of issue 36: how many streams survive engines killed under them. Three sim processes
// behind the gateway, 100 streamed chats started over a few seconds, and an engine killed with
// SIGKILL at 10 random moments (each restarted at once on its port, out of the directory until it is
// healthy again, as the agent would report it). The same streams and the same kill moments run three times:
// with migration (gateway.upstream.max_migrations 1, and 2, the default) and without (0), the comparison.
// A stream counts as completed when it ends with a finish_reason and its text is exactly the sim's
// uninterrupted answer: no gap and no repeat at any seam.
// Run: npx tsc -p . && node dist/bench/migration.js [--streams 100] [--kills 10] [--tokens 200]
//      (writes bench/results/migration.json)
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
import { benchReplica } from './replicas.js';

const mainJs = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));
const cycle = ' the quick brown fox jumps over the lazy dog and';
const arg = (name: string, d: number): number => {
  const i = process.argv.indexOf(name);
  return i < 0 ? d : Number(process.argv[i + 1]);
};
const STREAMS = arg('--streams', 100);
const KILLS = arg('--kills', 10);
const TOKENS = arg('--tokens', 200);
const ENGINES = 3;
const DECODE_TOKENS_PER_S = 100;
// Streams start over this long; the kills fall in it, while streams are running.
const SPREAD_MS = 15_000;

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
      [mainJs, 'sim', 'serve', 'qwen3', '--tokenizer', 'bytes', '--decode-tokens-per-s', String(DECODE_TOKENS_PER_S), '--host', '127.0.0.1', '--port', String(this.port)],
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

type StreamResult = 'completed' | 'wrong-text' | 'error';

async function stream(url: URL, i: number): Promise<StreamResult> {
  try {
    const res = await fetch(new URL('/v1/chat/completions', url), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'qwen3', messages: [{ role: 'user', content: `story ${i}` }], max_tokens: TOKENS, stream: true }),
      signal: AbortSignal.timeout(120_000),
    });
    if (res.status !== 200) return 'error';
    let text = '';
    let finished = false;
    for (const event of (await res.text()).split('\n\n')) {
      if (!event.startsWith('data: {')) continue;
      const data = JSON.parse(event.slice(6)) as { error?: unknown; choices?: { delta?: { content?: string }; finish_reason?: string | null }[] };
      if (data.error !== undefined) return 'error';
      text += data.choices?.[0]?.delta?.content ?? '';
      if (typeof data.choices?.[0]?.finish_reason === 'string') finished = true;
    }
    if (!finished) return 'error';
    return text === cycle.repeat(Math.ceil(TOKENS / cycle.length)).slice(0, TOKENS) ? 'completed' : 'wrong-text';
  } catch {
    return 'error';
  }
}

async function run(label: string, maxMigrations: number, engines: readonly Engine[], seed: number) {
  const registry = new Registry();
  const gw = await startGateway({
    config: { ...gatewayDefaults, port: 0, upstream: { ...gatewayDefaults.upstream, maxMigrations } },
    registry,
    closeGraceMs: 1000,
    directory: { ready: (m) => (m === 'qwen3' ? engines.filter((e) => e.healthy).map((e) => e.view()) : []), models: () => ['qwen3'] },
  });
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
  const results = await Promise.all(streams);
  await Promise.all(restarts);
  const text = await registry.metrics();
  await gw.close();
  const count = (r: StreamResult): number => results.filter((x) => x === r).length;
  const resumed = [...text.matchAll(/^llmgw_gateway_stream_migrations_total\{reason="[^"]+",outcome="resumed"\} (\d+)$/gm)].reduce((s, m) => s + Number(m[1]), 0);
  const outcomes: Record<string, number> = {};
  for (const m of text.matchAll(/^llmgw_gateway_stream_migrations_total\{reason="[^"]+",outcome="([^"]+)"\} (\d+)$/gm)) outcomes[m[1] ?? ''] = (outcomes[m[1] ?? ''] ?? 0) + Number(m[2]);
  const broken = Object.values(outcomes).reduce((s, n) => s + n, 0);
  return { label, maxMigrations, streams: STREAMS, kills, completed: count('completed'), wrongText: count('wrong-text'), errors: count('error'), brokenStreams: broken, resumed, outcomes };
}

async function main(): Promise<void> {
  const engines: Engine[] = [];
  for (let i = 0; i < ENGINES; i++) engines.push(new Engine(`e${i}`, await freePort()));
  try {
    await Promise.all(engines.map((e) => e.start()));
    const seed = arg('--seed', 36);
    const results = [
      await run('migration (max_migrations 1)', 1, engines, seed),
      await run('migration (max_migrations 2)', 2, engines, seed),
      await run('no migration (max_migrations 0)', 0, engines, seed),
    ];
    console.log(`${STREAMS} streams of ${TOKENS} tokens over ${SPREAD_MS / 1000} s, ${ENGINES} sim replicas at ${DECODE_TOKENS_PER_S} tokens/s, ${KILLS} kill -9 at random moments (seed ${seed})`);
    console.log(`host: ${availableParallelism()} cores, load average ${loadavg().map((l) => l.toFixed(1)).join(' ')} (shared with other work)`);
    for (const r of results) {
      console.log(`${r.label.padEnd(32)} completed ${r.completed}/${r.streams}  errors ${r.errors}  wrong text ${r.wrongText}  streams broken ${r.brokenStreams}, resumed ${r.resumed} ${JSON.stringify(r.outcomes)}  (${r.kills} kills)`);
    }
    mkdirSync(new URL('../../bench/results/', import.meta.url), { recursive: true });
    writeFileSync(new URL('../../bench/results/migration.json', import.meta.url), JSON.stringify({ at: new Date().toISOString(), cores: availableParallelism(), loadavg: loadavg(), results }, null, 2) + '\n');
    console.log('wrote bench/results/migration.json');
  } finally {
    await Promise.all(engines.map((e) => e.kill()));
  }
}

await main();
