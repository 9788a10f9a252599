// What residency-aware routing buys with LoRA adapters loaded on demand. Two sim replicas that load
// adapters at run time (each load takes the sim's --lora-load-time-ms), six adapters with a skewed
// popularity, at most two held per replica: the same request stream runs through the gateway twice,
// once with the default tiers (the resident tier first) and once with a residency-blind router
// (precise, approximate, load: it still loads what it needs, wherever it sends a request).
// Figures: loads, unloads, latency, and the share of prompt tokens the engines found cached.
// Run: npx tsc -p . && node dist/bench/lora.js   (writes bench/results/lora.json)
import { mkdirSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { availableParallelism, loadavg } from 'node:os';
import { Registry } from 'prom-client';
import { request } from 'undici';
import { vllmAdapterAccess } from '../src/engines/index.js';
import { gatewayDefaults, startGateway } from '../src/gateway/index.js';
import { approximateTier, defaultTiers, loadTier, preciseTier, type ReplicaDirectory, type ReplicaView, type RouteTier } from '../src/routing/index.js';
import { type AdapterDirectory } from '../src/upstream/index.js';
import { ClusterIndex, EngineEventStream, MAX_SLOTS, type KvDelta } from '../src/kv/index.js';
import { parseKvEventsConfig, resolveSimOptions, startSim } from '../src/sim/index.js';
import { HashPool } from '../src/workers/index.js';

const ADAPTERS = ['a0', 'a1', 'a2', 'a3', 'a4', 'a5'];
const WEIGHTS = [8, 4, 2, 1, 1, 1];
const REQUESTS = 160;
const CONCURRENCY = 8;
const MAX_PER_REPLICA = 2;
const LOAD_MS = 300;
const WARMUP = 16;

async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const addr = srv.address();
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  if (addr === null || typeof addr === 'string') throw new Error('no TCP address');
  return addr.port;
}

// A seeded generator, so both policies see the same request stream.
function stream(seed: number): string[] {
  let x = seed;
  const next = (): number => ((x = (x * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31);
  const total = WEIGHTS.reduce((a, b) => a + b, 0);
  return Array.from({ length: REQUESTS }, () => {
    let r = next() * total;
    for (const [i, w] of WEIGHTS.entries()) if ((r -= w) < 0) return ADAPTERS[i] ?? 'a0';
    return 'a0';
  });
}

interface Outcome {
  policy: string;
  loads: number;
  unloads: number;
  meanMs: number;
  p50Ms: number;
  p95Ms: number;
  /** p95 of the requests after the first WARMUP. */
  steadyP95Ms: number;
  cachedShare: number;
  errors: number;
}

function metric(text: string, name: string): number {
  let sum = 0;
  for (const line of text.split('\n')) if (line.startsWith(`${name}{`) && line.includes('outcome="ok"')) sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  return sum;
}

async function run(policy: string, tiers: readonly RouteTier[], adapters: string[]): Promise<Outcome> {
  const closers: (() => Promise<void>)[] = [];
  const index = new ClusterIndex({ capacityBlocks: 200_000 });
  const pool = new HashPool({ indexBuffer: index.buffer, maxThreads: 1 });
  closers.push(() => pool.close());
  await pool.score({ tokens: new Uint32Array(64), hash: { blockSizeTokens: 16, seed: '0' }, slots: [0] });
  const access = vllmAdapterAccess({
    name: 'p', engine: 'sim', gpuClass: 'cpu', tp: 1, pp: 1, gpusPerNode: 0, nodes: 1, args: [], env: {}, modelPath: 'qwen3', servedModelName: 'qwen3',
    adapters: ADAPTERS.map((name) => ({ name, path: `/adapters/${name}` })), runtimeLora: true, kvEvents: true,
  });
  const views: ReplicaView[] = [];
  let apply: (id: string, d: KvDelta) => void = () => undefined;
  for (const id of ['a', 'b']) {
    const [events, replay] = [await freePort(), await freePort()];
    const es = new EngineEventStream({ engineId: id, port: events, replayPort: replay, blockSizeTokens: 16, seed: '0', topic: 'kv-events', capacityBlocks: 4096, onDelta: (d) => apply(id, d) });
    await es.start();
    closers.push(() => es.close());
    const sim = await startSim(
      resolveSimOptions({
        model: 'qwen3', servedModelNames: ['qwen3'], host: '127.0.0.1', port: 0, hashAlgo: 'sha256_cbor', hashSeed: '0', tokenizer: 'bytes',
        decodeTokensPerS: 2000, prefillTokensPerS: 20_000, allowRuntimeLoraUpdating: true, loraLoadTimeMs: LOAD_MS,
        kvEvents: parseKvEventsConfig(JSON.stringify({ enable_kv_cache_events: true, publisher: 'zmq', endpoint: `tcp://127.0.0.1:${events}`, replay_endpoint: `tcp://*:${replay}`, topic: 'kv-events' })),
      }),
    );
    closers.push(() => sim.close());
    await sim.ready;
    views.push({ id, node: 'local', model: 'qwen3', adapters: ADAPTERS, url: new URL(sim.url), apiKey: undefined, generation: 1, kvEvents: true, blockSizeTokens: 16, hashSeed: '0', dataParallelSize: 1, adapterAccess: access });
  }
  const directory: ReplicaDirectory & AdapterDirectory = {
    ready: () => views,
    models: () => ['qwen3'],
    adapters: () => ADAPTERS.map((name) => ({ name, base: 'qwen3' })),
  };
  const registry = new Registry();
  const gw = await startGateway({
    config: { ...gatewayDefaults, port: 0, router: { ...gatewayDefaults.router, loadPollIntervalMs: 0, prefillTokensPerS: 20_000 }, adapters: { ...gatewayDefaults.adapters, maxPerReplica: MAX_PER_REPLICA } },
    directory,
    registry,
    index: { index, slotCount: MAX_SLOTS },
    scorer: pool,
    ownerOf: () => 'local',
    tiers,
  });
  closers.push(() => gw.close());
  apply = (id, d) => void gw.writer?.apply('local', id, d);

  const latencies: number[] = [];
  // The first requests meet a cold cluster (every adapter unloaded, workers and sockets warming).
  const steady: number[] = [];
  let prompt = 0;
  let cached = 0;
  let errors = 0;
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < adapters.length) {
      const i = next++;
      const adapter = adapters[i] ?? 'a0';
      const system = `You are the ${adapter} assistant. Follow the ${adapter} house style in every answer. `.repeat(8);
      const t0 = performance.now();
      const res = await request(new URL('/v1/chat/completions', gw.url), {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: adapter, max_tokens: 8, messages: [{ role: 'system', content: system }, { role: 'user', content: `question ${i}` }] }),
      });
      const body = (await res.body.json()) as { usage?: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } | null } };
      latencies.push(performance.now() - t0);
      if (i >= WARMUP) steady.push(performance.now() - t0);
      if (res.statusCode !== 200) errors++;
      prompt += body.usage?.prompt_tokens ?? 0;
      cached += body.usage?.prompt_tokens_details?.cached_tokens ?? 0;
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, () => worker()));
  const text = await registry.metrics();
  for (const c of closers.reverse()) await c();
  latencies.sort((a, b) => a - b);
  steady.sort((a, b) => a - b);
  const at = (q: number, xs = latencies): number => xs[Math.min(xs.length - 1, Math.floor(q * xs.length))] ?? 0;
  return {
    policy,
    loads: metric(text, 'llmgw_gateway_adapter_loads_total'),
    unloads: metric(text, 'llmgw_gateway_adapter_unloads_total'),
    meanMs: latencies.reduce((a, b) => a + b, 0) / latencies.length,
    p50Ms: at(0.5),
    p95Ms: at(0.95),
    steadyP95Ms: at(0.95, steady),
    cachedShare: prompt === 0 ? 0 : cached / prompt,
    errors,
  };
}

async function main(): Promise<void> {
  const adapters = stream(7);
  const blind: readonly RouteTier[] = [preciseTier, approximateTier, loadTier];
  const results = [await run('resident (default tiers)', defaultTiers, adapters), await run('residency-blind', blind, adapters)];
  const fmt = (n: number): string => n.toFixed(1);
  console.log(`${REQUESTS} requests, concurrency ${CONCURRENCY}, ${ADAPTERS.length} adapters (weights ${WEIGHTS.join(':')}), 2 replicas, ${MAX_PER_REPLICA} held each, sim load ${LOAD_MS} ms`);
  console.log(`host: ${availableParallelism()} cores, load average ${loadavg().map((l) => l.toFixed(1)).join(' ')} (shared with other work)`);
  for (const r of results) {
    console.log(`${r.policy.padEnd(26)} loads ${r.loads}  unloads ${r.unloads}  mean ${fmt(r.meanMs)} ms  p50 ${fmt(r.p50Ms)} ms  p95 ${fmt(r.p95Ms)} ms  (after ${WARMUP}: ${fmt(r.steadyP95Ms)} ms)  cached ${(100 * r.cachedShare).toFixed(1)}%  errors ${r.errors}`);
  }
  const [res, bl] = results;
  if (res !== undefined && bl !== undefined) {
    console.log(`ratios blind/resident: loads ${(bl.loads / Math.max(1, res.loads)).toFixed(2)}x  mean latency ${(bl.meanMs / res.meanMs).toFixed(2)}x  p95 ${(bl.p95Ms / res.p95Ms).toFixed(2)}x  p95 after warm-up ${(bl.steadyP95Ms / res.steadyP95Ms).toFixed(2)}x`);
  }
  mkdirSync(new URL('../../bench/results/', import.meta.url), { recursive: true });
  writeFileSync(new URL('../../bench/results/lora.json', import.meta.url), JSON.stringify({ at: new Date().toISOString(), cores: availableParallelism(), loadavg: loadavg(), results }, null, 2) + '\n');
  console.log('wrote bench/results/lora.json');
}

await main();
