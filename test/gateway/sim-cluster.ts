// Two sim engines publishing KV events over ZeroMQ, kv's EngineEventStream mirroring each, the
// gateway's index writer filling kv's ClusterIndex, and the workers' HashPool in a thread: the
// precise path with real parts, for the tests that drive it through HTTP.
import { strict as assert } from 'node:assert';
import { Registry } from 'prom-client';
import { request } from 'undici';
import type { GatewayConfig, ReplicaView } from '../../src/gateway/index.js';
import { gatewayDefaults, startGateway } from '../../src/gateway/index.js';
import { ClusterIndex, EngineEventStream, MAX_SLOTS, type KvDelta } from '../../src/kv/index.js';
import type { Logger } from '../../src/log/index.js';
import { parseKvEventsConfig, resolveSimOptions, startSim } from '../../src/sim/index.js';
import { HashPool } from '../../src/workers/index.js';
import { freePort } from '../support/wait.js';

interface Replica {
  readonly view: ReplicaView;
  readonly stream: EngineEventStream;
  readonly sim: Awaited<ReturnType<typeof startSim>>;
}

/** How a test cluster is built: router knobs, the sims' prefill speed, and local tokenizing. */
export interface ClusterOptions {
  readonly router?: Partial<GatewayConfig['router']>;
  readonly prefillTokensPerS?: number;
  /** The tokenizer the gateway believes the replicas use (the sims use 'bytes'); absent: /tokenize only. */
  readonly localTokenizer?: string;
  readonly log?: Logger;
}

/** Starts the cluster; everything is closed by `t.after`. */
export async function cluster(t: import('node:test').TestContext, o: ClusterOptions = {}) {
  const index = new ClusterIndex({ capacityBlocks: 200_000 });
  const pool = new HashPool({ indexBuffer: index.buffer, maxThreads: 1 });
  t.after(() => pool.close());
  // A worker thread's first task loads its modules; on a loaded box that alone can pass the score
  // timeout, and the router would rightly fall back. The test is about routing, so warm it first.
  const warm = await pool.score({ tokens: new Uint32Array(64), hash: { blockSizeTokens: 16, seed: '0' }, slots: [0] });
  assert.ok(warm.ok);
  const replicas: Replica[] = [];
  let applyDelta: (id: string, d: KvDelta) => void = () => undefined;
  for (const id of ['a', 'b']) {
    const [events, replay] = [await freePort(), await freePort()];
    const stream = new EngineEventStream({
      engineId: id,
      port: events,
      replayPort: replay,
      blockSizeTokens: 16,
      seed: '0',
      topic: 'kv-events',
      capacityBlocks: 4096,
      onDelta: (d) => applyDelta(id, d),
    });
    await stream.start();
    t.after(() => stream.close());
    const apiKey = `engine-${id}`;
    const sim = await startSim(
      resolveSimOptions({
        model: 'qwen3',
        servedModelNames: ['qwen3'],
        host: '127.0.0.1',
        port: 0,
        hashAlgo: 'sha256_cbor',
        hashSeed: '0',
        tokenizer: 'bytes',
        apiKey,
        decodeTokensPerS: 2000,
        prefillTokensPerS: o.prefillTokensPerS ?? 200_000,
        kvEvents: parseKvEventsConfig(
          JSON.stringify({
            enable_kv_cache_events: true,
            publisher: 'zmq',
            endpoint: `tcp://127.0.0.1:${events}`,
            replay_endpoint: `tcp://*:${replay}`,
            topic: 'kv-events',
          }),
        ),
      }),
    );
    t.after(() => sim.close());
    await sim.ready;
    const view: ReplicaView = {
      id,
      node: 'local',
      model: 'qwen3',
      adapters: [],
      url: new URL(sim.url),
      apiKey,
      generation: 1,
      kvEvents: true,
      blockSizeTokens: 16,
      hashSeed: '0',
      dataParallelSize: 1,
    };
    replicas.push({ view, stream, sim });
  }
  const config: GatewayConfig = {
    ...gatewayDefaults,
    port: 0,
    router: { ...gatewayDefaults.router, tokenizeTimeoutMs: 5000, scoreTimeoutMs: 5000, loadPollIntervalMs: 0, localTokenize: o.localTokenizer !== undefined, ...o.router },
  };
  const registry = new Registry();
  const gw = await startGateway({
    config,
    registry,
    directory: { ready: (m) => (m === 'qwen3' ? replicas.map((r) => r.view) : []), models: () => ['qwen3'] },
    index: { index, slotCount: MAX_SLOTS },
    scorer: pool,
    tokenizePool: o.localTokenizer === undefined ? undefined : pool,
    tokenizerOf: o.localTokenizer === undefined ? undefined : () => o.localTokenizer,
    log: o.log,
    ownerOf: () => 'local',
  });
  t.after(() => gw.close());
  applyDelta = (id, d) => void gw.writer?.apply('local', id, d);
  // Events are asynchronous: a test waits for the index to hold what the engines reported.
  const settle = async (): Promise<void> => {
    for (const r of replicas) await r.sim.eventsIdle();
    for (const r of replicas) await r.stream.whenIdle();
  };
  return { gw, replicas, registry, settle, index };
}

/** A conversation of `turns` long messages about `topic`. */
export const history = (topic: string, turns: number): { role: 'user' | 'assistant'; content: string }[] =>
  Array.from({ length: turns }, (_, i) => ({
    role: i % 2 === 0 ? ('user' as const) : ('assistant' as const),
    content: `${topic} ${i}: a long shared story about ${topic}. `.repeat(12),
  }));

/** One chat request through `url`: status, where it went, and the body. */
export async function chat(url: URL, messages: unknown, extra: Record<string, unknown> = {}) {
  const res = await request(new URL('/v1/chat/completions', url), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'qwen3', messages, max_tokens: 4, ...extra }),
    signal: AbortSignal.timeout(20_000),
  });
  const body = (await res.body.json()) as { usage?: { prompt_tokens_details?: { cached_tokens?: number } | null } };
  return { status: res.statusCode, replica: String(res.headers['x-llmgw-replica']), route: String(res.headers['x-llmgw-route']), body };
}

/** The value of one exposition line of /metrics (0 when absent). */
export function metric(text: string, line: string): number {
  const m = new RegExp(`^${line.replace(/[{}"\\[\]().]/g, '\\$&')} (\\S+)$`, 'm').exec(text);
  return m?.[1] === undefined ? 0 : Number(m[1]);
}

