// Two sim engines publishing KV events over ZeroMQ, kv's EngineEventStream mirroring each, the
// gateway's index writer filling kv's ClusterIndex, and the workers' HashPool in a thread: the
// precise path with real parts, for the tests that drive it through HTTP.
import { strict as assert } from 'node:assert';
import { Registry } from 'prom-client';
import { request } from 'undici';
import { vllmAdapterAccess } from '../../src/engines/index.js';
import type { GatewayConfig } from '../../src/gateway/index.js';
import type { ReplicaDirectory, ReplicaView } from '../../src/routing/index.js';
import type { AdapterDirectory } from '../../src/upstream/index.js';
import { gatewayDefaults, startGateway, poolOptionsOf } from '../../src/gateway/index.js';
import { ClusterIndex, EngineEventStream, MAX_SLOTS, type KvDelta } from '../../src/kv/index.js';
import type { Logger } from '../../src/log/index.js';
import { parseKvEventsConfig, parseKvTransferConfig, resolveSimOptions, startSim } from '../../src/sim/index.js';
import { HashPool } from '../../src/workers/index.js';
import { profile } from '../engines/specs.js';
import { freePort } from '../support/wait.js';
import { wireTap } from '../support/wire-tap.js';

/** One sim of the cluster: the gateway's view of it, its replay endpoint, its event stream. */
export interface SimReplica {
  readonly view: ReplicaView;
  /** The sim's KV-event replay endpoint. */
  readonly replay: string;
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
  /** How many sims (a, b, …); two by default. */
  readonly replicas?: number;
  /** Each sim's --max-num-seqs: 1 makes a second request wait in the engine's queue behind the first. */
  readonly maxNumSeqs?: number;
  /** Each sim's KV cache in blocks: small, and the sims evict cached blocks as vLLM does when full. */
  readonly kvCapacityBlocks?: number;
  /** Adapters every sim loads at run time (300 ms each), as a runtime_lora sim profile serves them. */
  readonly lora?: { readonly adapters: readonly string[]; readonly failing?: readonly string[]; readonly maxPerReplica?: number };
  /** The sims join the directory only when the test calls `join()`, as an agent's engines come up after the gateway starts. */
  readonly joinLater?: boolean;
  /** Each sim's part in prefill/decode disaggregation (the NIXL connector's kv_role from it); absent: none. */
  readonly roles?: readonly ('prefill' | 'decode' | 'both' | undefined)[];
  /** Sims the gateway believes have a role but that run without a connector (a misconfigured engine). */
  readonly noConnector?: readonly string[];
  /** Every sim behind a recording proxy (`taps` by id): the gateway's bodies as they went on the wire. */
  readonly tap?: boolean;
  /** The engines' KV events are held back from the index until the test calls `releaseKvEvents()`, as if they were late. */
  readonly holdKvEvents?: boolean;
}

/** Starts the cluster; everything is closed by `t.after`. */
export async function cluster(t: import('node:test').TestContext, o: ClusterOptions = {}) {
  const index = new ClusterIndex({ capacityBlocks: 200_000 });
  const router = { ...gatewayDefaults.router, tokenizeTimeoutMs: 5000, scoreTimeoutMs: 5000, loadPollIntervalMs: 0, localTokenize: o.localTokenizer !== undefined, ...o.router };
  // Sized as `llmgw serve` sizes it: short bodies are tokenized on the event loop.
  const pool = new HashPool({ indexBuffer: index.buffer, maxThreads: 1, ...poolOptionsOf({ ...gatewayDefaults, router }) });
  t.after(() => pool.close());
  // A worker thread's first task loads its modules; on a loaded box that alone can pass the score
  // timeout, and the router would rightly fall back. The test is about routing, so warm it first.
  const warm = await pool.score({ tokens: new Uint32Array(64), hash: { blockSizeTokens: 16, seed: '0' }, slots: [0] });
  assert.ok(warm.ok);
  const lora = o.lora;
  const adapterNames = lora?.adapters ?? [];
  // The same description the agent hands the gateway for a runtime_lora sim profile.
  const adapterAccess =
    lora === undefined ? undefined : vllmAdapterAccess(profile({ engine: 'sim', runtimeLora: true, adapters: adapterNames.map((name) => ({ name, path: `/adapters/${name}` })) }));
  const replicas: SimReplica[] = [];
  let applyDelta: (id: string, d: KvDelta) => void = () => undefined;
  const taps = new Map<string, Awaited<ReturnType<typeof wireTap>>>();
  const ids = ['a', 'b', 'c', 'd'].slice(0, o.replicas ?? o.roles?.length ?? 2);
  for (const [i, id] of ids.entries()) {
    const role = o.roles?.[i];
    const kvRole = role === 'prefill' ? 'kv_producer' : role === 'decode' ? 'kv_consumer' : 'kv_both';
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
        ...(o.kvCapacityBlocks === undefined ? {} : { kvCapacityBlocks: o.kvCapacityBlocks }),
        ...(role === undefined || o.noConnector?.includes(id) === true ? {} : { kvTransfer: parseKvTransferConfig(JSON.stringify({ kv_connector: 'NixlConnector', kv_role: kvRole })) }),
        ...(o.maxNumSeqs === undefined ? {} : { maxNumSeqs: o.maxNumSeqs }),
        ...(lora === undefined
          ? {}
          : {
              allowRuntimeLoraUpdating: true,
              loraLoadTimeMs: 300,
              faults: { ...resolveSimOptions({ model: 'qwen3' }).faults, failLoraLoads: [...(lora.failing ?? [])] },
            }),
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
    const tap = o.tap === true ? await wireTap(t, new URL(sim.url)) : undefined;
    if (tap !== undefined) taps.set(id, tap);
    const view: ReplicaView = {
      id,
      node: 'local',
      model: 'qwen3',
      adapters: [...adapterNames],
      url: tap?.url ?? new URL(sim.url),
      apiKey,
      generation: 1,
      kvEvents: true,
      blockSizeTokens: 16,
      hashSeed: '0',
      dataParallelSize: 1,
      adapterAccess,
      ...(role === undefined ? {} : { disagg: { role, protocol: 'nixl' as const, bootstrapPort: 0 } }),
    };
    replicas.push({ view, stream, sim, replay: `tcp://127.0.0.1:${replay}` });
  }
  const config: GatewayConfig = {
    ...gatewayDefaults,
    port: 0,
    router,
    adapters: { ...gatewayDefaults.adapters, maxPerReplica: lora?.maxPerReplica ?? gatewayDefaults.adapters.maxPerReplica },
  };
  const views = replicas.map((r) => r.view);
  let joined = o.joinLater !== true;
  const listeners = new Set<() => void>();
  const directory: ReplicaDirectory & AdapterDirectory = {
    ready: (m) => (joined && (m === 'qwen3' || adapterNames.includes(m)) ? views : []),
    models: () => ['qwen3'],
    adapters: () => adapterNames.map((name) => ({ name, base: 'qwen3' })),
    onChange: (listener) => {
      listeners.add(listener);
      return () => {
        listeners.delete(listener);
      };
    },
  };
  const join = (): void => {
    joined = true;
    for (const l of listeners) l();
  };
  const registry = new Registry();
  const gw = await startGateway({
    config,
    registry,
    directory,
    index: { index, slotCount: MAX_SLOTS },
    scorer: pool,
    parsePool: pool,
    tokenizePool: o.localTokenizer === undefined ? undefined : pool,
    tokenizerOf: o.localTokenizer === undefined ? undefined : () => o.localTokenizer,
    log: o.log,
    ownerOf: () => 'local',
  });
  t.after(() => gw.close());
  const apply = (id: string, d: KvDelta): void => void gw.writer?.apply('local', id, d);
  const held: [string, KvDelta][] = [];
  applyDelta = o.holdKvEvents === true ? (id, d) => void held.push([id, d]) : apply;
  const releaseKvEvents = (): void => {
    applyDelta = apply;
    for (const [id, d] of held.splice(0)) apply(id, d);
  };
  // Events are asynchronous: a test waits for the index to hold what the engines reported.
  const settle = async (): Promise<void> => {
    for (const r of replicas) await r.sim.eventsIdle();
    for (const r of replicas) await r.stream.whenIdle();
  };
  return { gw, replicas, registry, settle, index, pool, join, releaseKvEvents, listeners: () => listeners.size, taps };
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

