// Routing decision latency and what routing costs the proxy. An index of 8 replicas holding 1M
// blocks; prompts of 1k, 8k, 32k and 128k tokens routed through the gateway's Router (tokenize over
// HTTP, hash and score in the worker pool); then the gateway's event-loop delay while streaming
// traffic passes through it, alone and with a stream of 32k-token decisions beside it.
// The fake engines and the load generator run in a child process, so the loop measured is the
// gateway's alone.
// Run: npx tsc -p . && node dist/bench/route.js   (writes bench/results/route.json)
import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { availableParallelism, cpus, loadavg } from 'node:os';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Registry } from 'prom-client';
import { request } from 'undici';
import { gatewayDefaults, startGateway } from '../src/gateway/index.js';
import { type ReplicaView } from '../src/routing/index.js';
import { parseGenerationRequest } from '../src/limits/index.js';
import { ClusterIndex, hashBlockKeys, MAX_SLOTS } from '../src/kv/index.js';
import { HashPool } from '../src/workers/index.js';
import { benchReplica } from './replicas.js';

const REPLICAS = 8;
const INDEX_BLOCKS = 1_000_000;
const SIZES = [1_024, 8_192, 32_768, 131_072] as const;
const RUNS: Record<number, number> = { 1024: 200, 8192: 150, 32768: 60, 131072: 25 };
const PHASE_MS = 6_000;
const STREAMS = 32;

// --- child side: fake engines (/tokenize over UTF-8 bytes, streaming chat) and the load generator.

const bytesOf = (body: { prompt?: string; messages?: { role: string; content: string }[] }): number[] =>
  body.prompt !== undefined
    ? [...Buffer.from(body.prompt)]
    : [...Buffer.from((body.messages ?? []).map((m) => `<${m.role}>${m.content}`).join('') + '<assistant>')];

async function engines(n: number): Promise<void> {
  const ports: number[] = [];
  for (let i = 0; i < n; i++) {
    const srv = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { prompt?: string; messages?: { role: string; content: string }[] };
        if (req.url === '/tokenize') {
          const tokens = bytesOf(body);
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ count: tokens.length, max_model_len: 1 << 20, tokens, token_strs: null }));
          return;
        }
        // 16 tokens at 5 ms each: a decode-bound stream, as most of a gateway's traffic is.
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        let k = 0;
        const tick = setInterval(() => {
          if (res.destroyed) return clearInterval(tick);
          if (k++ < 16) {
            res.write(`data: ${JSON.stringify({ id: 'x', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: ' tok' } }] })}\n\n`);
            return;
          }
          clearInterval(tick);
          res.write(`data: ${JSON.stringify({ id: 'x', object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: 10, completion_tokens: 16, total_tokens: 26 } })}\n\n`);
          res.end('data: [DONE]\n\n');
        }, 5);
      });
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    ports.push((srv.address() as AddressInfo).port);
  }
  process.send?.({ ports });
}

async function load(url: string, streams: number, ms: number): Promise<void> {
  const until = Date.now() + ms;
  let done = 0;
  let failed = 0;
  const ttft: number[] = [];
  const body = JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'short question' }] });
  await Promise.all(
    Array.from({ length: streams }, async () => {
      while (Date.now() < until) {
        const t0 = performance.now();
        try {
          const res = await request(`${url}v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
          let first = true;
          for await (const _ of res.body) {
            if (first) ttft.push(performance.now() - t0);
            first = false;
          }
          if (res.statusCode === 200) done++;
          else failed++;
        } catch {
          failed++;
        }
      }
    }),
  );
  ttft.sort((a, b) => a - b);
  process.send?.({ done, failed, perS: done / (ms / 1000), ttftP50Ms: pct(ttft, 50), ttftP99Ms: pct(ttft, 99) });
}

// --- parent side.

const children: ChildProcess[] = [];

function pct(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
}

const round = (v: number, d = 2): number => Math.round(v * 10 ** d) / 10 ** d;

function text(n: number, seed: number): string {
  let x = seed || 1;
  let s = '';
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    s += String.fromCharCode(97 + ((x >>> 0) % 26));
  }
  return s;
}

function randomKeys(n: number, seed: number): bigint[] {
  let x = BigInt(seed) | 1n;
  const out: bigint[] = [];
  for (let i = 0; i < n; i++) {
    x ^= (x << 13n) & 0xffff_ffff_ffff_ffffn;
    x ^= x >> 7n;
    x ^= (x << 17n) & 0xffff_ffff_ffff_ffffn;
    out.push(x);
  }
  return out;
}

async function parent(): Promise<void> {
  const self = fileURLToPath(import.meta.url);
  const child = fork(self, ['--engines', String(REPLICAS)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  children.push(child);
  const [msg] = (await once(child, 'message')) as [{ ports: number[] }];
  const index = new ClusterIndex({ capacityBlocks: 1_300_000 });
  const pool = new HashPool({ indexBuffer: index.buffer });
  const replicas: ReplicaView[] = msg.ports.map((port, i) => benchReplica(`r${i}`, 'm', new URL(`http://127.0.0.1:${port}/`)));
  const gw = await startGateway({
    config: {
      ...gatewayDefaults,
      port: 0,
      maxBodyBytes: 64 * 1024 * 1024,
      router: { ...gatewayDefaults.router, tokenizeCacheEntries: 0, tokenizeTimeoutMs: 10_000, scoreTimeoutMs: 10_000, loadPollIntervalMs: 0, predictionTtlMs: 0 },
    },
    registry: new Registry(),
    directory: { ready: () => replicas, models: () => ['m'] },
    index: { index, slotCount: MAX_SLOTS },
    scorer: pool,
    ownerOf: () => 'local',
  });
  const writer = gw.writer;
  if (writer === undefined) throw new Error('gateway started without an index writer');
  const keys = randomKeys(INDEX_BLOCKS, 7);
  for (let i = 0; i < keys.length; i += 10_000) writer.apply('local', `r${(i / 10_000) % REPLICAS}`, { added: keys.slice(i, i + 10_000), removed: [] });
  const fill = { blocks: index.size, replicas: REPLICAS };
  console.log(`index: ${fill.blocks} blocks over ${REPLICAS} replicas; pool threads: ${Math.max(1, availableParallelism() - 1)}`);

  const latency: Record<string, unknown>[] = [];
  for (const size of SIZES) {
    // Replica r3 holds the first half of every prompt of this size: the scorer walks real chains.
    const base = text(size - 64, size);
    const body = (i: number) => ({ model: 'm', messages: [{ role: 'user', content: base + `#${i}`.padEnd(48, '.') }] });
    const tokens = Uint32Array.from(bytesOf(body(0)));
    const held = hashBlockKeys(tokens, { blockSizeTokens: 16, seed: '0' });
    writer.apply('local', 'r3', { added: [...held.subarray(0, held.length >> 1)], removed: [] });
    const route: number[] = [];
    const tokenize: number[] = [];
    const score: number[] = [];
    const main: number[] = [];
    const runs = RUNS[size] ?? 20;
    for (let i = -5; i < runs; i++) {
      const req = parseGenerationRequest('chat', Buffer.from(JSON.stringify(body(i + 10))));
      const elu0 = performance.eventLoopUtilization();
      const t0 = performance.now();
      const r = await gw.router.route(req, replicas);
      const took = performance.now() - t0;
      // Time the gateway's own thread was busy for this decision: what it takes from the proxy.
      const busyMs = performance.eventLoopUtilization(elu0).active;
      r.ticket.done();
      if (r.tier !== 'precise' || r.replica.id !== 'r3') throw new Error(`size ${size}: routed ${r.tier} to ${r.replica.id}, wanted precise to r3 (${JSON.stringify(r.trace)})`);
      const s0 = performance.now();
      const sc = await pool.score({ tokens: tokens.slice(), hash: { blockSizeTokens: 16, seed: '0' }, slots: [0, 1, 2, 3, 4, 5, 6, 7] });
      const scoreMs = performance.now() - s0;
      if (!sc.ok) throw new Error(`score failed: ${sc.reason}`);
      if (i < 0) continue;
      route.push(took);
      main.push(busyMs);
      tokenize.push(r.trace.tokenizeMs ?? NaN);
      score.push(scoreMs);
    }
    for (const a of [route, tokenize, score, main]) a.sort((x, y) => x - y);
    const row = {
      promptTokens: tokens.length,
      runs,
      routeP50Ms: round(pct(route, 50)),
      routeP99Ms: round(pct(route, 99)),
      tokenizeP50Ms: round(pct(tokenize, 50)),
      tokenizeP99Ms: round(pct(tokenize, 99)),
      scoreOnlyP50Ms: round(pct(score, 50)),
      scoreOnlyP99Ms: round(pct(score, 99)),
      mainThreadBusyP50Ms: round(pct(main, 50)),
      mainThreadBusyP99Ms: round(pct(main, 99)),
    };
    latency.push(row);
    console.log(
      `${String(size).padStart(6)} tokens: route p50 ${row.routeP50Ms} ms, p99 ${row.routeP99Ms} ms ` +
        `(tokenize over HTTP p50 ${row.tokenizeP50Ms} ms; hash+score in the pool p50 ${row.scoreOnlyP50Ms} ms, p99 ${row.scoreOnlyP99Ms} ms; ` +
        `gateway thread busy p50 ${row.mainThreadBusyP50Ms} ms)`,
    );
  }

  // Event-loop delay of the gateway while STREAMS concurrent streams pass through it.
  const phase = async (name: string, decisions: number | undefined): Promise<Record<string, unknown>> => {
    const h = monitorEventLoopDelay({ resolution: 1 });
    const gen = fork(self, ['--load', gw.url.href, String(STREAMS), String(PHASE_MS)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    children.push(gen);
    const result = once(gen, 'message') as Promise<[Record<string, number>]>;
    h.enable();
    let routed = 0;
    const stop = Date.now() + PHASE_MS;
    if (decisions !== undefined) {
      const base = text(decisions - 64, 99);
      await Promise.all(
        [0, 1].map(async (w) => {
          for (let i = 0; Date.now() < stop; i++) {
            const req = parseGenerationRequest('chat', Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: base + `${w}-${i}`.padEnd(48, '.') }] })));
            (await gw.router.route(req, replicas)).ticket.done();
            routed++;
          }
        }),
      );
    }
    const [traffic] = await result;
    h.disable();
    await once(gen, 'exit');
    const row = {
      phase: name,
      decisionsPerS: round(routed / (PHASE_MS / 1000), 1),
      loopDelayP50Ms: round(h.percentile(50) / 1e6),
      loopDelayP99Ms: round(h.percentile(99) / 1e6),
      loopDelayMaxMs: round(h.max / 1e6),
      proxiedPerS: round(traffic.perS ?? NaN, 1),
      proxiedTtftP50Ms: round(traffic.ttftP50Ms ?? NaN),
      proxiedTtftP99Ms: round(traffic.ttftP99Ms ?? NaN),
      proxiedFailed: traffic.failed,
    };
    console.log(
      `${name}: loop delay p50 ${row.loopDelayP50Ms} ms, p99 ${row.loopDelayP99Ms} ms, max ${row.loopDelayMaxMs} ms; ` +
        `${row.proxiedPerS} streams/s (ttft p50 ${row.proxiedTtftP50Ms} ms, p99 ${row.proxiedTtftP99Ms} ms); ${row.decisionsPerS} decisions/s`,
    );
    return row;
  };
  const loop = [
    await phase(`${STREAMS} streams alone`, undefined),
    await phase(`${STREAMS} streams + 32k-token decisions`, 32_768),
    await phase(`${STREAMS} streams + 128k-token decisions`, 131_072),
  ];

  await gw.close();
  await pool.close();
  child.kill('SIGTERM');
  await once(child, 'exit');
  const out = {
    bench: 'route',
    when: new Date().toISOString(),
    machine: { cpus: availableParallelism(), model: cpus()[0]?.model ?? 'unknown', loadavg: loadavg().map((v) => round(v)) },
    node: process.version,
    index: fill,
    latency,
    eventLoop: loop,
  };
  mkdirSync(new URL('../../bench/results/', import.meta.url), { recursive: true });
  writeFileSync(new URL('../../bench/results/route.json', import.meta.url), JSON.stringify(out, null, 2) + '\n');
  console.log('wrote bench/results/route.json');
}

const [mode, a, b, c] = process.argv.slice(2);
if (mode === '--engines') await engines(Number(a));
else if (mode === '--load') await load(a ?? '', Number(b), Number(c));
else {
  try {
    await parent();
  } finally {
    // The engines' process must not outlive a bench that failed half-way.
    for (const c of children) c.kill('SIGTERM');
  }
}
