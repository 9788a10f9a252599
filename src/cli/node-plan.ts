// What `serve` and `agent` both do before anything starts: read the config once, discover this
// node's GPUs when it asks for that, and place its replicas. One function, so the two commands run
// the same replicas for the same file.
import { readFileSync } from 'node:fs';
import { planReplicas, type ReplicaPlan } from '../actors/index.js';
import type { Host } from '../engines/index.js';
import { LlmgwError } from '../errors/index.js';
import { place, withDiscovered, type NodeConfig } from '../placement/index.js';
import { loadConfig, registryOf, type Config } from './config.js';
import { defaultConfigSource, defaultConfigYaml } from './default-config.js';
import { discoveredIfAsked } from './doctor.js';
import { kvIpcDirOf } from './kv-transport.js';

/**
 * The arguments of `serve`, `agent` and `plan`: `--config FILE` (or `--config=FILE`), or nothing for
 * the built-in default; `--status` (unless `o.status` is false: `plan` has none) to have their
 * status events on stdout as well as in the log.
 */
export function configArgument(argv: readonly string[], o: { status: boolean } = { status: true }): { file?: string; status?: true; help?: true; error?: string } {
  let file: string | undefined;
  let status: true | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] ?? '';
    if (a === '--help' || a === '-h') return { help: true };
    if (a === '--status' && o.status) status = true;
    else if (a === '--config' || a.startsWith('--config=')) {
      // `--config --other` is a forgotten file name, not a file named "--other".
      file = a === '--config' ? argv[++i] : a.slice('--config='.length);
      if (file === undefined || file === '' || (a === '--config' && file.startsWith('--'))) return { error: '--config needs a file name' };
    } else return { error: `unknown argument ${JSON.stringify(a)}` };
  }
  return { ...(file === undefined ? {} : { file }), ...(status === undefined ? {} : { status }) };
}

function readConfigFile(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (e) {
    throw new LlmgwError('LLMGW_CONFIG_READ', `config file ${JSON.stringify(file)} cannot be read (${e instanceof Error ? e.message : String(e)}); check the path given to --config`, { cause: e });
  }
}

/** The config file of `llmgw <command>` and whether status goes to stdout, or the exit code once help or a usage error has been printed. */
export function configFileOrExit(command: string, usage: string, argv: readonly string[]): { file: string | undefined; status: boolean } | number {
  const arg = configArgument(argv);
  if (arg.help) {
    process.stdout.write(usage);
    return 0;
  }
  if (arg.error !== undefined) {
    process.stderr.write(`llmgw ${command}: ${arg.error}\n${usage}`);
    return 2;
  }
  return { file: arg.file, status: arg.status === true };
}

/** The loaded config, where it came from, and the replicas placed on this node. Throws LlmgwError on a bad config. */
export async function planNode(file: string | undefined, host: Host): Promise<{ config: Config; source: string; node: NodeConfig; plans: ReplicaPlan[] }> {
  const source = file ?? defaultConfigSource;
  const config = loadConfig(file === undefined ? defaultConfigYaml : readConfigFile(file), source);
  const discovered = await discoveredIfAsked(config, host);
  const node = discovered === undefined ? config.node : withDiscovered(config.node, discovered);
  // A node of a cluster runs what the gateway places on it, not the config's catalog.
  if (config.cluster.link !== '' || config.cluster.gateways.length > 0) return { config, source, node, plans: [] };
  const plans = planReplicas(place(config, node, registryOf(config), { cpus: host.cpus, kvIpcDir: kvIpcDirOf(config) }), {
    hashSeed: config.kvEvents.hashSeed,
    simBlockSize: config.engines.sim.blockSize,
  });
  return { config, source, node, plans: [...plans] };
}

/** What uses each port the engines of these replicas bind or publish to, data-parallel offsets included. */
export function enginePorts(plans: readonly ReplicaPlan[]): Map<number, string> {
  const uses = new Map<number, string>();
  for (const p of plans) {
    for (const s of p.shards) {
      uses.set(s.httpPort, `${s.shardId}'s HTTP port`);
      // On ipc:// the KV ports only name the socket files; nothing listens on them.
      if (s.kvIpcDir !== undefined && s.kvIpcDir !== '') continue;
      for (let rank = 0; rank < Math.max(1, p.dataParallelSize); rank++) {
        if (s.kvEventsPort > 0) uses.set(s.kvEventsPort + rank, `${s.shardId}'s KV event port (rank ${rank})`);
        if (s.kvReplayPort > 0) uses.set(s.kvReplayPort + rank, `${s.shardId}'s KV replay port (rank ${rank})`);
      }
    }
  }
  return uses;
}
