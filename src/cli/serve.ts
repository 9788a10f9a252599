// `llmgw serve`: the gateway and this node's agent in one process. The composition root of the
// serving path: the config is loaded once, the shared index and its worker pool are built, the
// gateway starts first (so the first full copy of every engine's blocks has somewhere to go), then
// the agent starts the engines, and the gateway sees them through its ReplicaDirectory.
import { Registry } from 'prom-client';
import { Agent, Pool, request } from 'undici';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ActorBoard, ensurePrivateDir, type ReplicaPlan } from '../actors/index.js';
import { flagValue, modelFileOf, type Host } from '../engines/index.js';
import { LlmgwError } from '../errors/index.js';
import { startGateway, poolOptionsOf, processMetrics, type Gateway } from '../gateway/index.js';
import { ClusterIndex, KvMetrics, MAX_SLOTS } from '../kv/index.js';
import { ControlPlane, ExternalReplicas, linkMetrics, LinkServer, readKeyFile, type AgentMessage, type GatewayMessage, type HealthGet } from '../link/index.js';
import { createLogger, type Logger } from '../log/index.js';
import type { ReplicaDirectory, TokenizeApi } from '../routing/index.js';
import type { AdapterDirectory } from '../upstream/index.js';
import { admissionBoard, PlacerLease, Store } from '../store/index.js';
import { batchesFor } from './batches.js';
import { hostname } from 'node:os';
import type { NodeConfig } from '../placement/index.js';
import { HashPool } from '../workers/index.js';
import { clusterPlacer, inProcessPipe, linkedAgent, reportedActors, type LinkedAgent } from './cluster.js';
import type { Config } from './config.js';
import { currentHost, listDir } from './host.js';
import { configFileOrExit, enginePorts, planNode } from './node-plan.js';
import { readyFields, reportProgress, statusLogger } from './status.js';

// The in-process agent's peer id: never a link routing id, which is hex.
const localPeer = 'local';

const usage = `usage: llmgw serve [--config FILE] [--status]

Runs the OpenAI gateway and this node's agent in one process. Without --config it serves the
built-in default: two simulated replicas of one model with KV events, on 127.0.0.1:8080.
With cluster.link set it also binds the agent link and places replicas over cluster.nodes.

Everything it says goes to the log on stderr (coloured lines on a terminal, JSON lines otherwise),
ready included: serve.ready carries the gateway's url and a curl to try. Nothing goes to stdout
unless --status asks: then its status events (serve.listening, serve.replica, serve.waiting,
serve.ready) are printed there too, as on a terminal.
`;

/** How the gateway tokenizes each replica's prompts: its tokenizer source and its /tokenize format. */
interface Tokenizing {
  readonly sources: Map<string, string>;
  readonly apis: Map<string, TokenizeApi>;
}

/**
 * Each of this node's replicas' tokenizer for routing without /tokenize: the sim's --tokenizer
 * (default qwen3), a llama.cpp model's GGUF (the tokenizer and template in its metadata; a
 * directory's model file picked as the engine picks it), or a real engine's model_path when it is a
 * directory with a tokenizer.json (a hub name is not read here; such a replica is tokenized by its
 * /tokenize). And which /tokenize format each speaks: llama-server's differs from vLLM's. A replica
 * placed on another node is known by the plan the gateway sent it; a model file is looked for on this
 * host, and the ids are verified against the replica's /tokenize either way.
 */
function tokenizingOf(plans: readonly ReplicaPlan[], out: Tokenizing = { sources: new Map(), apis: new Map() }): Tokenizing {
  for (const p of plans) {
    const profile = (p.shards.find((s) => s.rank === 0) ?? p.shards[0])?.profile;
    if (profile === undefined) continue;
    if (profile.engine === 'sim') out.sources.set(p.replicaId, flagValue(profile.args, '--tokenizer') ?? 'qwen3');
    else if (profile.engine === 'llamacpp') {
      out.apis.set(p.replicaId, 'llamacpp');
      const gguf = ggufOf(profile.modelPath);
      if (gguf !== undefined) out.sources.set(p.replicaId, gguf);
    } else if (existsSync(join(profile.modelPath, 'tokenizer.json'))) out.sources.set(p.replicaId, profile.modelPath);
  }
  return out;
}

// The model file llama-server loads for a model_path (as the engine picks it), or undefined when it
// is not here to read.
function ggufOf(modelPath: string): string | undefined {
  try {
    return existsSync(modelPath) ? modelFileOf(modelPath, listDir(modelPath)).model : undefined;
  } catch {
    // Missing here (on another node's disk, or not yet downloaded): its /tokenize alone tokenizes.
    return undefined;
  }
}

// The CA files of https external replicas, read once at startup, by origin: an unreadable one is a
// startup error, not a replica that is never healthy.
function trustedCas(config: Config): Map<string, string> {
  const out = new Map<string, string>();
  config.replicas.forEach((r, i) => {
    const e = r.endpoint;
    if (e === undefined || e.caFile === '') return;
    try {
      out.set(new URL(e.url).origin, readFileSync(e.caFile, 'utf8'));
    } catch (err) {
      const code = err instanceof Error && 'code' in err ? String(err.code) : String(err);
      throw new LlmgwError('LLMGW_CONFIG_READ', `replicas[${i}].endpoint.ca_file: cannot read ${e.caFile} (${code}); give the PEM file of the CA that signed ${e.url}'s certificate`, { cause: err });
    }
  });
  return out;
}

// External replicas' health checks, each https one checked against its ca_file when it has one.
function healthGet(cas: ReadonlyMap<string, string>): { get: HealthGet; close: () => Promise<void> } {
  const dispatcher = new Agent({
    factory: (origin, opts) => {
      const ca = cas.get(new URL(String(origin)).origin);
      return new Pool(origin, ca === undefined ? opts : { ...opts, connect: { ca } });
    },
  });
  const get: HealthGet = async (url, o) => {
    const res = await request(url, { ...o, dispatcher });
    await res.body.dump();
    return res.statusCode;
  };
  return { get, close: () => dispatcher.close() };
}

/** The config and what this node was planned from it, checked before anything listens. */
interface Planned {
  readonly config: Config;
  /** Where the config came from, for serve.listening. */
  readonly source: string;
  readonly plans: ReplicaPlan[];
  readonly nodeConfig: NodeConfig;
  readonly cas: ReadonlyMap<string, string>;
  readonly node: string;
  readonly cluster: boolean;
  readonly several: boolean;
  readonly gatewayId: string;
  readonly allowed: readonly { name: string; publicKey: string | undefined }[];
  readonly localRuns: boolean;
  /** Replicas the config asks for, across every node. */
  readonly wanted: number;
}

/** The parts serve wires before anything listens; `late` holds those started afterwards. */
interface Parts {
  readonly metrics: Registry;
  readonly index: ClusterIndex;
  readonly pool: HashPool;
  readonly tokenizing: Tokenizing;
  readonly late: { gw?: Gateway; local?: LinkedAgent; server?: LinkServer };
  readonly plane: ControlPlane;
  readonly kvMetrics: KvMetrics;
  readonly health: { get: HealthGet; close: () => Promise<void> };
  readonly externals: ExternalReplicas;
  readonly directory: ReplicaDirectory & AdapterDirectory;
  /** Subscribes to changes of the plane's replicas and the external ones. */
  readonly onChange: (listener: () => void) => () => void;
  readonly toPlane: (m: { seq: number; msg: AgentMessage }) => void;
  readonly board: ActorBoard;
  readonly unsubscribeNodes: () => void;
}

/** What runs once serve has started, and has to be stopped. */
interface Running {
  readonly gw: Gateway;
  readonly batches: ReturnType<typeof batchesFor>;
  readonly linkAt: string;
  readonly lease: PlacerLease | undefined;
  readonly sweeper: NodeJS.Timeout;
}

/** Runs `serve` until SIGINT, SIGTERM or SIGHUP; returns the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  const arg = configFileOrExit('serve', usage, argv);
  if (typeof arg === 'number') return arg;
  const host = currentHost();
  const planned = await plannedOrRefused(arg.file, host);
  if (typeof planned === 'number') return planned;
  const log = createLogger();
  const status = statusLogger(log, arg.status);
  const parts = wireParts(planned, log);
  const store = await openStore(planned.config, parts.pool, log);
  if (typeof store === 'number') return store;
  const running = await startServing(planned, parts, store, host, log);
  const stopAnnouncing = announceReady(planned, parts, running, status);
  // First signal: drain the gateway, then the agent, then stop; second: cut the gateway's streams
  // and kill the engines now.
  const cutNow = new AbortController();
  const sig = await stopSignal(cutNow, parts.late);
  log.info({ signal: sig }, 'serve.stopping');
  stopAnnouncing();
  parts.unsubscribeNodes();
  await drain(parts, store, running, cutNow.signal);
  log.info({}, 'serve.stopped');
  return 0;
}

/** Loads and plans the config and checks what would fail once listening; a refusal is printed, exit code 1. */
async function plannedOrRefused(file: string | undefined, host: Host): Promise<Planned | number> {
  try {
    const { config, source, plans, node: nodeConfig } = await planNode(file, host);
    // The gateway binds first; an engine placed on its port would fail to bind and restart forever.
    const clash = enginePorts(plans).get(config.gateway.port);
    if (clash !== undefined) {
      throw new LlmgwError(
        'LLMGW_PORT_CLASH',
        `gateway.port: ${config.gateway.port} is also ${clash}; choose a gateway port outside the node.ports ranges, or move node.ports.http_base / kv_events_base`,
      );
    }
    // Refused here, before anything listens: found by the agent later, it crashed serve with a stack
    // trace while the gateway was already taking requests.
    for (const dir of new Set(plans.flatMap((p) => p.shards.map((s) => s.kvIpcDir ?? '')))) if (dir !== '') ensurePrivateDir(dir);
    const cas = trustedCas(config);
    const node = config.node.name;
    const cluster = config.cluster.link !== '';
    // One node: this one. A cluster: the nodes listed, this one among them only if it is listed.
    const allowed = cluster ? config.cluster.nodes : [{ name: node, publicKey: undefined }];
    return {
      config,
      source,
      plans,
      nodeConfig,
      cas,
      node,
      cluster,
      several: config.cluster.gateways.length > 1,
      // This gateway's name among several: its lease holder's prefix and its admission board row.
      gatewayId: config.store.gatewayId === '' ? `${hostname()}:${config.gateway.port}` : config.store.gatewayId,
      allowed,
      localRuns: allowed.some((n) => n.name === node),
      wanted: config.replicas.reduce((n, r) => n + r.count, 0),
    };
  } catch (e) {
    if (e instanceof LlmgwError) {
      process.stderr.write(`llmgw serve: ${e.message}\n`);
      return 1;
    }
    throw e;
  }
}

/** Builds the index, the worker pool, the control plane, the external replicas and the directory the gateway routes by. */
function wireParts(planned: Planned, log: Logger): Parts {
  const { config, plans, node, allowed, localRuns, several, cas } = planned;
  const metrics = new Registry();
  processMetrics(metrics);
  // Each data-parallel rank has a cache of capacityBlocks of its own, and its blocks are its own keys.
  const capacity = Math.max(65_536, Math.ceil(plans.reduce((n, p) => n + p.capacityBlocks * Math.max(1, p.dataParallelSize), 0) * 1.25));
  const index = new ClusterIndex({ capacityBlocks: capacity });
  const pool = new HashPool({ indexBuffer: index.buffer, ...poolOptionsOf(config.gateway) });
  const tokenizing = tokenizingOf(plans);
  const placer = clusterPlacer(config);

  // The control plane and the gateway need each other: the gateway routes by the plane's directory,
  // the plane writes blocks through the gateway's index writer. Each is reached through the other late.
  const late: { gw?: Gateway; local?: LinkedAgent; server?: LinkServer } = {};
  const plane = new ControlPlane({
    nodes: allowed,
    local: localRuns ? { peer: localPeer, node } : undefined,
    place: placer,
    // One of several gateways places only while it holds the lease in the shared store.
    leased: several,
    onAssigned: (assigned) => tokenizingOf(assigned, tokenizing),
    writer: {
      apply: (n, id, d) => late.gw?.writer?.apply(n, id, d) ?? false,
      reset: (id, why) => late.gw?.writer?.reset(id, why),
      forget: (id) => late.gw?.writer?.forget(id),
    },
    models: [...new Set(Object.values(config.models).map((m) => m.servedModelName))],
    send: (peer, msg) => (peer === localPeer ? toLocal(msg) : late.server?.send(peer, msg)),
    silentAfterMs: config.cluster.silentAfterMs,
    log: log.child({ subsystem: 'control-plane' }),
  });
  // An engine is expected to publish KV events while the router has requests in flight on it.
  const kvMetrics = new KvMetrics({ registry: metrics, inFlight: (id) => late.gw?.load.get(id).inFlight ?? 0 });
  const health = healthGet(cas);
  const externals = new ExternalReplicas({
    // Hash verification of each engine's blocks runs in the same worker pool as prompt hashing.
    openStream: (o) => kvMetrics.open({ ...o, hasher: pool }),
    replicas: config.replicas.flatMap((r) => (r.endpoint === undefined ? [] : [{ ...r.endpoint, model: r.model }])),
    writer: {
      apply: (n, id, d) => late.gw?.writer?.apply(n, id, d) ?? false,
      reset: (id, why) => late.gw?.writer?.reset(id, why),
      forget: (id) => late.gw?.writer?.forget(id),
    },
    get: health.get,
    healthIntervalMs: Math.max(200, config.cluster.heartbeatMs),
    healthTimeoutMs: Math.max(1_000, config.cluster.heartbeatMs),
    log: log.child({ subsystem: 'external' }),
  });
  // What the gateway routes to: the replicas the nodes run, and the ones llmgw did not start.
  // Adapters are listed apart from models, each with its base: /v1/models shows them as vLLM does, and
  // a name that is neither gets one 404 listing both.
  const adapters = [...new Map(Object.values(config.models).flatMap((m) => m.profiles.flatMap((p) => p.adapters.map((a) => [a.name, { name: a.name, base: m.servedModelName }] as const)))).values()];
  const onChange = (listener: () => void): (() => void) => {
    const offPlane = plane.onChange(listener);
    const offExternal = externals.onChange(listener);
    return () => {
      offPlane();
      offExternal();
    };
  };
  const directory: ReplicaDirectory & AdapterDirectory = {
    ready: (m) => [...plane.ready(m), ...externals.ready(m)],
    models: () => [...new Set([...plane.models(), ...config.replicas.flatMap((r) => (r.endpoint === undefined ? [] : [r.model]))])],
    adapters: () => adapters,
    onChange,
  };
  const toLocal = inProcessPipe((msg: GatewayMessage) => late.local?.sessions[0]?.receive(msg));
  const toPlane = inProcessPipe((m: { seq: number; msg: AgentMessage }) => plane.receive(localPeer, m.seq, m.msg));
  linkMetrics(metrics, plane);
  // Every actor of this process and of every other node, on /debug/actors and `llmgw ctl status`.
  const board = new ActorBoard({ tail: (id) => late.local?.agent.tail(id) ?? [] });
  // The in-process agent's actors reach the board first hand; the other nodes' come over the link.
  const showNodes = (): void => {
    for (const n of plane.nodes()) if (!(localRuns && n.name === node)) board.report(n.name, reportedActors(n));
  };
  showNodes();
  const unsubscribeNodes = plane.onChange(showNodes);
  return { metrics, index, pool, tokenizing, late, plane, kvMetrics, health, externals, directory, onChange, toPlane, board, unsubscribeNodes };
}

/** Opens the store (the embedded database unless store.url names a shared one); a refusal is printed, exit code 1. */
async function openStore(config: Config, pool: HashPool, log: Logger): Promise<Store | number> {
  try {
    // The embedded database sits beside the agent's records; a shared one is store.url.
    if (config.store.url === '' && config.store.path === '') mkdirSync(config.agent.stateDir, { recursive: true, mode: 0o700 });
    return await Store.open(config.store, {
      stateDir: config.agent.stateDir,
      configKeys: config.gateway.apiKeys,
      defaultGatewayId: `${hostname()}:${config.gateway.port}`,
      log: log.child({ subsystem: 'store' }),
    });
  } catch (e) {
    await pool.close();
    if (e instanceof LlmgwError) {
      process.stderr.write(`llmgw serve: ${e.message}\n`);
      return 1;
    }
    throw e;
  }
}

/** Starts the gateway, then the link, the placer lease, the external replicas' checks and this node's agent. */
async function startServing(planned: Planned, parts: Parts, store: Store, host: Host, log: Logger): Promise<Running> {
  const { config, cluster, several, gatewayId, localRuns } = planned;
  const { pool, plane, late } = parts;
  const batches = batchesFor(store, { runnerId: `${hostname()}:${config.gateway.port}:${process.pid}`, log: log.child({ subsystem: 'batch' }), config: config.gateway.batch });
  const gw = await gatewayOrClose(planned, parts, store, batches, log);
  late.gw = gw;
  batches.start(gw.url);
  const linkAt = cluster ? await bindLink(config, parts, gw, log) : '';
  // Started once the link is bound: the assignments a new placer sends have somewhere to go.
  const lease = several
    ? new PlacerLease({
        db: store.db,
        gatewayId,
        ttlMs: config.cluster.leaseTtlMs,
        onHeld: (epoch) => plane.takePlacement(epoch),
        onLost: () => plane.yieldPlacement(),
        log: log.child({ subsystem: 'lease' }),
      })
    : undefined;
  lease?.start();
  await parts.externals.start();
  const sweeper = setInterval(() => {
    plane.sweep();
    late.local?.tick();
  }, config.cluster.heartbeatMs);
  if (localRuns) {
    const local = linkedAgent({
      config,
      node: planned.nodeConfig,
      host,
      secretKey: undefined,
      sends: [(seq, msg) => parts.toPlane({ seq, msg })],
      inFlight: (id) => gw.load.get(id).inFlight,
      // Hash verification of each engine's blocks runs in the same worker pool as prompt hashing.
      openKvStream: (o) => parts.kvMetrics.open({ ...o, hasher: pool }),
      log,
      board: parts.board,
    });
    late.local = local;
    for (const s of local.sessions) s.join();
  }
  return { gw, batches, linkAt, lease, sweeper };
}

/** Starts the gateway over the wired parts; when it fails the store and the pool are closed. */
async function gatewayOrClose(planned: Planned, parts: Parts, store: Store, batches: Running['batches'], log: Logger): Promise<Gateway> {
  const { config, several, gatewayId, cas } = planned;
  const { pool, tokenizing, plane, externals } = parts;
  try {
    return await startGateway({
      config: config.gateway,
      directory: parts.directory,
      registry: parts.metrics,
      index: { index: parts.index, slotCount: MAX_SLOTS },
      scorer: pool,
      parsePool: pool,
      tokenizePool: pool,
      tokenizerOf: (id) => tokenizing.sources.get(id),
      tokenizeApiOf: (id) => tokenizing.apis.get(id),
      ownerOf: (id) => plane.ownerOf(id) ?? externals.ownerOf(id),
      log: log.child({ subsystem: 'gateway' }),
      views: { nodes: () => plane.nodes(), status: () => ({ nodes: plane.nodes(), external: externals.status(), unplaced: plane.unplaced, placer: plane.placer }) },
      actors: parts.board,
      env: process.env,
      store,
      whenStoreDown: config.store.whenDown,
      peerBoard: several && store.db.dialect === 'postgres' ? admissionBoard(store.db, gatewayId) : undefined,
      // Stored Responses live beside the keys, so a conversation outlives a restart.
      responseStore: store.responses,
      caOf: (origin) => cas.get(origin),
      batches: batches.service,
      innerKeyOf: batches.innerKeyOf,
    });
  } catch (e) {
    await store.close();
    await pool.close();
    throw e;
  }
}

/** Binds the agent link at cluster.link; returns where it listens. */
async function bindLink(config: Config, parts: Parts, gw: Gateway, log: Logger): Promise<string> {
  const { plane } = parts;
  const server = new LinkServer({
    endpoint: config.cluster.link,
    keys: readKeyFile(config.cluster.keyFile),
    allowed: () => new Map(config.cluster.nodes.flatMap((n) => (n.publicKey === undefined ? [] : [[n.publicKey, n.name] as const]))),
    onMessage: (peer, seq, msg) => plane.receive(peer, seq, msg),
    onRefused: (reason, fields) => plane.refuse(reason, fields),
    maxMessageBytes: config.cluster.maxMessageBytes,
    log: log.child({ subsystem: 'link' }),
  });
  try {
    const linkAt = await server.start();
    parts.late.server = server;
    return linkAt;
  } catch (e) {
    await server.close();
    await gw.close();
    await parts.pool.close();
    throw new LlmgwError('LLMGW_LINK_BIND', `cluster.link: cannot bind ${config.cluster.link} (${e instanceof Error ? e.message : String(e)}); choose a free address and port`, { cause: e });
  }
}

/** Says serve.listening now and serve.ready once every wanted replica serves; returns what stops both. */
function announceReady(planned: Planned, parts: Parts, running: Running, status: Logger): () => void {
  const { config, source, plans, cluster, allowed, wanted } = planned;
  const { gw, linkAt } = running;
  const { directory, board } = parts;
  const models = [...new Set(config.replicas.map((r) => (r.endpoint === undefined ? (config.models[r.model]?.servedModelName ?? r.model) : r.model)))];
  const readyCount = (): number => models.reduce((n, m) => n + directory.ready(m).length, 0);
  let announced = false;
  const announce = (): void => {
    if (announced || wanted === 0 || readyCount() < wanted) return;
    announced = true;
    // Ready means what /ready says: the replicas serve and their tokenizers are loaded, so the
    // first requests a user sends on this line are routed as every later one is.
    void gw.whenWarm().then(() => status.info(readyFields({ url: gw.url, replicas: wanted, models, keyed: config.gateway.apiKeys.length > 0 }), 'serve.ready'));
  };
  const unsubscribe = parts.onChange(announce);
  const page = new URL('/debug/actors', gw.url).href;
  status.info(
    cluster
      ? { url: gw.url.href, link: linkAt, nodes: allowed.map((n) => n.name), replicas: wanted, config: source, page }
      : { url: gw.url.href, replicas: plans.length, config: source, page },
    'serve.listening',
  );
  const stopProgress = reportProgress(board, status, () => announced);
  return () => {
    unsubscribe();
    stopProgress();
  };
}

/** Resolves with the first of SIGINT, SIGTERM, SIGHUP; a second aborts `cutNow` and kills the engines now. */
function stopSignal(cutNow: AbortController, late: Parts['late']): Promise<string> {
  return new Promise<string>((resolve) => {
    let signals = 0;
    const onSignal = (sig: string): void => {
      signals++;
      if (signals === 1) resolve(sig);
      else {
        cutNow.abort();
        late.local?.agent.stopNow();
      }
    };
    process.on('SIGINT', () => onSignal('SIGINT'));
    process.on('SIGTERM', () => onSignal('SIGTERM'));
    // The terminal closed: Node's default for SIGHUP is to exit at once, which left the engines
    // running with nobody to stop them. A hangup stops as SIGTERM does; a serve meant to outlive its
    // terminal runs under systemd or nohup.
    process.on('SIGHUP', () => onSignal('SIGHUP'));
  });
}

/** Stops everything serve started, the gateway first so the engines still serve its last answers. */
async function drain(parts: Parts, store: Store, running: Running, cut: AbortSignal): Promise<void> {
  const { gw, batches, lease, sweeper } = running;
  const { late } = parts;
  // The gateway drains first, while every engine still serves: its streams finish where they run and
  // the requests a load balancer still sends in the grace are served, not refused by a stopping engine.
  // The runner stops first: its lines in flight are cut and stay unanswered, to be sent again on start.
  await batches.close();
  await gw.drain({ signal: cut });
  // Reverse order of start: the engines drain while the gateway still serves their last answers.
  clearInterval(sweeper);
  // Given up first, so another gateway places at once instead of after the lease lapses.
  await lease?.close();
  await late.local?.close();
  await late.server?.close();
  await parts.externals.close();
  await parts.health.close();
  await gw.close();
  await store.close();
  await parts.pool.close();
}
