// `llmgw agent`: this node's agent on its own, without the gateway: places the config's replicas on
// this node, runs and supervises them, takes back engines a previous agent left running, and on
// SIGINT/SIGTERM drains and stops everything (a second signal stops at once).
import { NodeAgent } from '../actors/index.js';
import { LlmgwError } from '../errors/index.js';
import { EngineEventStream } from '../kv/index.js';
import { createLogger } from '../log/index.js';
import { HashPool } from '../workers/index.js';
import { registryOf } from './config.js';
import { currentHost } from './host.js';
import { configFileOrExit, planNode } from './node-plan.js';

const usage = 'usage: llmgw agent [--config FILE]\n\nWithout --config, runs the built-in default config.\n';

/** Runs the agent until a signal has drained it; 0 after a clean stop, 1 on a bad config, 2 on bad usage. */
export async function main(argv: readonly string[]): Promise<number> {
  const arg = configFileOrExit('agent', usage, argv);
  if (typeof arg === 'number') return arg;
  const log = createLogger().child({ component: 'agent' });
  const host = currentHost();
  let agent: NodeAgent;
  // One thread for hash verification of the engines' KV blocks, off the loop that supervises them.
  const pool = new HashPool({ indexBuffer: null, maxThreads: 1 });
  try {
    const { config, plans } = await planNode(arg.file, host);
    const registry = registryOf(config);
    agent = new NodeAgent({
      node: config.node.name,
      advertiseAddr: config.node.addr,
      config: config.agent,
      engines: registry,
      host,
      log,
      openKvStream: (o) => new EngineEventStream({ ...o, hasher: pool }),
    });
    agent.onChange(() => log.info({ ready: agent.models().map((m) => `${m}: ${agent.ready(m).length}`) }, 'agent.ready.changed'));
    agent.start(plans);
    log.info({ node: config.node.name, replicas: plans.map((p) => p.replicaId) }, 'agent.started');
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
  const stopped = new Promise<void>((resolve, reject) => {
    const first = (signal: NodeJS.Signals): void => {
      onSignal(signal);
      if (signals === 1) agent.close().then(resolve, reject);
    };
    process.on('SIGINT', first);
    process.on('SIGTERM', first);
  });
  await stopped;
  await pool.close();
  log.info({}, 'agent.stopped');
  return 0;
}
