// `llmgw agent`: this node's agent on its own, without the gateway: places the config's replicas on
// this node, runs and supervises them, takes back engines a previous agent left running, and on
// SIGINT/SIGTERM/SIGHUP drains and stops everything (a second signal stops at once).
import { NodeAgent, type OpenKvStream } from '../actors/index.js';
import type { Host } from '../engines/index.js';
import { LlmgwError } from '../errors/index.js';
import { EngineEventStream } from '../kv/index.js';
import { LinkClient, readKeyFile } from '../link/index.js';
import { createLogger, type Logger } from '../log/index.js';
import type { NodeConfig } from '../placement/index.js';
import { linkedAgent, type LinkedAgent } from './cluster.js';
import { HashPool } from '../workers/index.js';
import { registryOf, type Config } from './config.js';
import { currentHost } from './host.js';
import { configFileOrExit, planNode } from './node-plan.js';
import { statusLogger } from './status.js';

const usage = `usage: llmgw agent [--config FILE] [--status]

Without --config, runs the built-in default config. With cluster.link set, joins the gateway there
(cluster.key_file, cluster.gateway_key) and runs the replicas it places on this node; with
cluster.gateways, joins every gateway listed and runs what the one holding the placer lease places.

It logs on stderr (coloured lines on a terminal, JSON lines otherwise) and writes nothing on stdout
unless --status asks: then agent.joining or agent.started is printed there too, as on a terminal.
`;

/** A node's agent joined to its gateways. */
interface Joined {
  readonly clients: readonly LinkClient[];
  readonly linked: LinkedAgent;
  readonly timer: NodeJS.Timeout;
}

/** Connects this node to every gateway: the agent starts on the first assignment it receives. */
function joinCluster(config: Config, node: NodeConfig, host: Host, log: Logger, status: Logger, openKvStream: OpenKvStream): Joined {
  const c = config.cluster;
  if (c.gatewayKey === '') throw new LlmgwError('LLMGW_CONFIG', 'cluster.gateway_key is missing; write the gateway\'s public key (the "public" line of its key file)');
  if (c.link !== '' && c.gateways.length > 0) {
    throw new LlmgwError('LLMGW_CONFIG', `cluster.link (${c.link}) and cluster.gateways are both set; an agent joins every gateway listed under gateways: remove link`);
  }
  const links = c.gateways.length > 0 ? c.gateways : [c.link];
  const keys = readKeyFile(c.keyFile);
  const clients: LinkClient[] = [];
  const linked = linkedAgent({ config, node, host, secretKey: keys.secretKey, sends: links.map((_, i) => (seq, msg) => clients[i]?.send(seq, msg)), openKvStream, log });
  links.forEach((endpoint, i) => {
    const session = linked.sessions[i];
    if (session === undefined) return;
    const client = new LinkClient({
      endpoint,
      // The gateways of one cluster share one keypair: they are one service to the nodes.
      serverKey: c.gatewayKey,
      keys,
      // Connect from the node's own address: on one machine, 127.0.0.2 and 127.0.0.3 are two nodes.
      sourceAddr: node.addr.startsWith('127.') ? node.addr : undefined,
      onMessage: (m) => session.receive(m),
      onConnect: () => session.heartbeat(),
      onOverflow: () => session.join(),
      maxMessageBytes: c.maxMessageBytes,
      log: log.child({ subsystem: 'link', gateway: endpoint }),
    });
    clients.push(client);
    client.start();
    session.join();
  });
  const timer = setInterval(() => linked.tick(), c.heartbeatMs);
  status.info({ node: node.name, addr: node.addr, gateway: c.link, gateways: c.gateways }, 'agent.joining');
  return { clients, linked, timer };
}

/** Runs the agent until a signal has drained it; 0 after a clean stop, 1 on a bad config, 2 on bad usage. */
export async function main(argv: readonly string[]): Promise<number> {
  const arg = configFileOrExit('agent', usage, argv);
  if (typeof arg === 'number') return arg;
  const log = createLogger().child({ component: 'agent' });
  const status = statusLogger(log, arg.status);
  const host = currentHost();
  let agent: NodeAgent;
  let link: Joined | undefined;
  // One thread for hash verification of the engines' KV blocks, off the loop that supervises them.
  const pool = new HashPool({ indexBuffer: null, maxThreads: 1 });
  const openKvStream: OpenKvStream = (o) => new EngineEventStream({ ...o, hasher: pool });
  try {
    const { config, node, plans } = await planNode(arg.file, host);
    if (config.cluster.link !== '' || config.cluster.gateways.length > 0) {
      link = joinCluster(config, node, host, log, status, openKvStream);
      agent = link.linked.agent;
    } else {
      const registry = registryOf(config);
      agent = new NodeAgent({ node: config.node.name, advertiseAddr: config.node.addr, config: config.agent, engines: registry, host, log, openKvStream });
      agent.onChange(() => log.info({ ready: agent.models().map((m) => `${m}: ${agent.ready(m).length}`) }, 'agent.ready.changed'));
      agent.start(plans);
      status.info({ node: config.node.name, replicas: plans.map((p) => p.replicaId) }, 'agent.started');
    }
  } catch (e) {
    await pool.close();
    if (e instanceof LlmgwError) {
      process.stderr.write(`llmgw agent: ${e.message}\n`);
      return 1;
    }
    throw e;
  }
  let signals = 0;
  const onSignal = (signal: NodeJS.Signals): void => {
    signals++;
    if (signals === 1) {
      log.info({ signal }, 'agent.draining');
      return;
    }
    // The operator asked twice: no more waiting for in-flight requests or graceful exits.
    log.warn({ signal }, 'agent.stopping_now');
    agent.stopNow();
  };
  const stop = async (): Promise<void> => {
    if (link === undefined) return agent.close();
    clearInterval(link.timer);
    await link.linked.close();
    for (const c of link.clients) await c.close();
  };
  const stopped = new Promise<void>((resolve, reject) => {
    const first = (signal: NodeJS.Signals): void => {
      onSignal(signal);
      if (signals === 1) stop().then(resolve, reject);
    };
    process.on('SIGINT', first);
    process.on('SIGTERM', first);
    // The terminal closed: Node's default for SIGHUP is to exit at once, which left every engine
    // running with nobody to stop them. A hangup stops as SIGTERM does; an agent meant to outlive
    // its terminal runs under systemd or nohup.
    process.on('SIGHUP', first);
  });
  await stopped;
  await pool.close();
  log.info({}, 'agent.stopped');
  return 0;
}
