// `llmgw serve`: the gateway and this node's agent in one process. The composition root of the
// serving path: the config is loaded once, the shared index and its worker pool are built, the
// gateway starts first (so the first full copy of every engine's blocks has somewhere to go), then
// the agent starts the engines, and the gateway sees them through its ReplicaDirectory.
import { collectDefaultMetrics, Registry } from 'prom-client';
import { ActorBoard, NodeAgent, type ActorView, type ReplicaPlan } from '../actors/index.js';
import { LlmgwError } from '../errors/index.js';
import { startGateway, type Gateway, type ReplicaDirectory } from '../gateway/index.js';
import { ClusterIndex, MAX_SLOTS } from '../kv/index.js';
import { createLogger } from '../log/index.js';
import { HashPool } from '../workers/index.js';
import { registryOf, type Config } from './config.js';
import { currentHost } from './host.js';
import { configFileOrExit, enginePorts, planNode } from './node-plan.js';

const usage = `usage: llmgw serve [--config FILE]

Runs the OpenAI gateway and this node's agent in one process. Without --config it serves the
built-in default: two simulated replicas of one model with KV events, on 127.0.0.1:8080.
`;

/** Runs `serve` until SIGINT or SIGTERM; returns the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  const arg = configFileOrExit('serve', usage, argv);
  if (typeof arg === 'number') return arg;
  const host = currentHost();
  let config: Config;
  let source: string;
  let plans: ReplicaPlan[];
  try {
    ({ config, source, plans } = await planNode(arg.file, host));
    // The gateway binds first; an engine placed on its port would fail to bind and restart forever.
    const clash = enginePorts(plans).get(config.gateway.port);
    if (clash !== undefined) {
      throw new LlmgwError(
        'LLMGW_PORT_CLASH',
        `gateway.port: ${config.gateway.port} is also ${clash}; choose a gateway port outside the node.ports ranges, or move node.ports.http_base / kv_events_base`,
      );
    }
  } catch (e) {
    if (e instanceof LlmgwError) {
      process.stderr.write(`llmgw serve: ${e.message}\n`);
      return 1;
    }
    throw e;
  }
  const log = createLogger();
  const engines = registryOf(config);
  const node = config.node.name;
  const ours = new Set(plans.map((p) => p.replicaId));

  const metrics = new Registry();
  collectDefaultMetrics({ register: metrics, prefix: 'llmgw_process_' });
  // Each data-parallel rank has a cache of capacityBlocks of its own, and its blocks are its own keys.
  const capacity = Math.max(65_536, Math.ceil(plans.reduce((n, p) => n + p.capacityBlocks * Math.max(1, p.dataParallelSize), 0) * 1.25));
  const index = new ClusterIndex({ capacityBlocks: capacity });
  const pool = new HashPool({ indexBuffer: index.buffer });

  // The agent is built after the gateway, which reads it through this late-bound directory.
  const late: { agent?: NodeAgent } = {};
  const directory: ReplicaDirectory = { ready: (m) => late.agent?.ready(m) ?? [], models: () => late.agent?.models() ?? [] };
  // Every actor of this process, on /debug/actors and `llmgw ctl status`.
  const board = new ActorBoard({ tail: (id) => late.agent?.tail(id) ?? [] });
  let gw: Gateway;
  try {
    gw = await startGateway({
      config: config.gateway,
      directory,
      registry: metrics,
      index: { index, slotCount: MAX_SLOTS },
      scorer: pool,
      ownerOf: (id) => (ours.has(id) ? node : undefined),
      log: log.child({ subsystem: 'gateway' }),
      actors: board,
    });
  } catch (e) {
    await pool.close();
    throw e;
  }
  const writer = gw.writer;
  const agent = new NodeAgent({
    node,
    advertiseAddr: config.node.addr,
    config: config.agent,
    engines,
    host,
    kvSink: { delta: (id, d) => void writer?.apply(node, id, d), forget: (id) => writer?.forget(id) },
    inFlight: (id) => gw.load.get(id).inFlight,
    log: log.child({ subsystem: 'agent' }),
    board,
  });
  late.agent = agent;

  const models = [...new Set(plans.map((p) => p.model))];
  const readyCount = (): number => models.reduce((n, m) => n + agent.ready(m).length, 0);
  let announced = false;
  const announce = (): void => {
    if (announced || readyCount() < plans.length) return;
    announced = true;
    const model = models[0] ?? 'MODEL';
    const auth = config.gateway.apiKeys.length > 0 ? ` -H 'Authorization: Bearer YOUR_KEY'` : '';
    process.stdout.write(
      `llmgw ready: ${plans.length} replica${plans.length === 1 ? '' : 's'} of ${models.join(', ')} behind ${gw.url.href}\n` +
        `try: curl -s ${new URL('/v1/chat/completions', gw.url).href} -H 'Content-Type: application/json'${auth} ` +
        `-d '{"model": "${model}", "messages": [{"role": "user", "content": "Hello"}]}'\n`,
    );
  };
  const unsubscribe = agent.onChange(announce);
  process.stdout.write(`llmgw serve: gateway on ${gw.url.href}, starting ${plans.length} replica${plans.length === 1 ? '' : 's'} from ${source}\n`);
  const stopProgress = reportProgress(board, () => announced, new URL('/debug/actors', gw.url).href);
  agent.start(plans);

  // First signal: drain (the agent waits for the gateway's in-flight requests), then stop; second: kill now.
  const stopped = new Promise<string>((resolve) => {
    let signals = 0;
    const onSignal = (sig: string): void => {
      signals++;
      if (signals === 1) resolve(sig);
      else agent.stopNow();
    };
    process.on('SIGINT', () => onSignal('SIGINT'));
    process.on('SIGTERM', () => onSignal('SIGTERM'));
  });
  const sig = await stopped;
  log.info({ signal: sig }, 'serve.stopping');
  unsubscribe();
  stopProgress();
  // Reverse order of start: the engines drain while the gateway still serves their last answers.
  await agent.close();
  await gw.close();
  await pool.close();
  log.info({}, 'serve.stopped');
  return 0;
}

const PROGRESS_EVERY_MS = 15_000;

/**
 * Until every replica is ready, says what each one is doing when it changes, and every 15 s which
 * are still on their way: loading a model takes minutes, and a silent terminal looks like a hang.
 */
function reportProgress(board: ActorBoard, done: () => boolean, page: string): () => void {
  const said = new Map<string, string>();
  const name = (a: ActorView): string => a.id.slice('replica:'.length);
  const unsubscribe = board.subscribe((a) => {
    if (done() || a.kind !== 'replica' || said.get(a.id) === a.phase) return;
    said.set(a.id, a.phase);
    process.stdout.write(`llmgw serve: replica ${name(a)} ${a.phase}${a.reason === undefined ? '' : ` (${a.reason})`}\n`);
  });
  const timer = setInterval(() => {
    if (done()) return;
    const now = Date.now();
    const pending = board
      .actors()
      .filter((a) => a.kind === 'replica' && a.phase !== 'ready')
      .map((a) => `${name(a)} ${a.phase} for ${Math.round((now - a.since) / 1000)} s`);
    if (pending.length > 0) process.stdout.write(`llmgw serve: still waiting: ${pending.join(', ')}; each step on ${page}\n`);
  }, PROGRESS_EVERY_MS);
  return () => {
    clearInterval(timer);
    unsubscribe();
  };
}
