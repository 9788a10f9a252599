// How an engine is told to publish its KV-cache events to the agent (vLLM's flags, which the sim
// shares). Launch flags are command construction, so they live here; src/kv/ owns the wire format.
import { join } from 'node:path';
import type { EnvMap } from './env.js';
import type { KvEventsConfig } from './config.js';

/** The topic every llmgw-started publisher uses; the subscriber filters on it. */
export const kvEventsTopic = 'kv-events';

/** Where one shard publishes: the agent's event port and, when nonzero, the replay port, or the ipc directory. */
export interface KvEventsPorts {
  readonly kvEventsPort: number;
  readonly kvReplayPort: number;
  readonly kvIpcDir?: string | undefined;
}

/** The longest path a Unix socket address holds on Linux (sun_path is 108 bytes with its NUL). */
export const IPC_PATH_MAX = 107;

/** The two socket files of a shard in an ipc directory, named by its (node-unique) event port. */
export function kvIpcPaths(dir: string, kvEventsPort: number): { events: string; replay: string } {
  return { events: join(dir, `kv-${kvEventsPort}.pub`), replay: join(dir, `kv-${kvEventsPort}.replay`) };
}

/** Whether a shard's sockets fit a Unix socket address in `dir`; a deeper state directory falls back to TCP. */
export function kvIpcFits(dir: string, kvEventsPort: number): boolean {
  return Buffer.byteLength(kvIpcPaths(dir, kvEventsPort).replay) <= IPC_PATH_MAX;
}

/** How an engine's KV events reach the agent, and who binds. */
export interface KvEventsEndpoints {
  readonly transport: 'ipc' | 'tcp';
  /** vLLM's `endpoint`: ipc:// is bound by the engine (the agent connects); tcp://127.0.0.1 is bound by the agent. */
  readonly endpoint: string;
  /** vLLM's `replay_endpoint`, always bound by the engine; undefined without replay. */
  readonly replayEndpoint: string | undefined;
}

/**
 * Where a shard's events go. ipc:// in the agent's private directory when it has one: loopback TCP
 * let any local process read other users' prompt token ids from the replay socket and forge
 * BlockStored or AllBlocksCleared into the agent's SUB. TCP for data-parallel engines, which
 * vLLM cannot offset onto ipc:// ("Invalid endpoint: must contain 'inproc' or 'tcp'").
 */
export function kvEventsEndpoints(ports: KvEventsPorts): KvEventsEndpoints {
  const dir = ports.kvIpcDir ?? '';
  if (dir !== '') {
    const paths = kvIpcPaths(dir, ports.kvEventsPort);
    return { transport: 'ipc', endpoint: `ipc://${paths.events}`, replayEndpoint: ports.kvReplayPort > 0 ? `ipc://${paths.replay}` : undefined };
  }
  return {
    transport: 'tcp',
    endpoint: `tcp://127.0.0.1:${ports.kvEventsPort}`,
    replayEndpoint: ports.kvReplayPort > 0 ? `tcp://127.0.0.1:${ports.kvReplayPort}` : undefined,
  };
}

/** vLLM's flags for publishing KV events to the agent (see kvEventsEndpoints for where). A concrete
 * tcp address makes vLLM connect and the agent's SUB bind (vLLM binds only for `*`, `::`, ipc and
 * inproc); an ipc:// one makes vLLM bind and the agent connect; the replay ROUTER is always bound by
 * vLLM. Prefix caching is switched on because events exist only with it, and the hash algorithm is
 * named because vLLM's default (pickle) cannot be reproduced outside Python. "publisher" is
 * explicit: up to v0.11.0 it defaulted to "null" and nothing was sent. */
export function vllmKvEventsArgs(ports: KvEventsPorts, cfg: KvEventsConfig): string[] {
  const where = kvEventsEndpoints(ports);
  const config: Record<string, unknown> = { enable_kv_cache_events: true, publisher: 'zmq', endpoint: where.endpoint };
  if (where.replayEndpoint !== undefined) config.replay_endpoint = where.replayEndpoint;
  config.topic = kvEventsTopic;
  return ['--enable-prefix-caching', '--prefix-caching-hash-algo', cfg.hashAlgo, '--kv-events-config', JSON.stringify(config)];
}

/** The environment a KV-event publisher needs. PYTHONHASHSEED fixes vLLM's first parent hash (unset, it
 * is random and no hash can be reproduced); the int form of block hashes is pinned because that is
 * what the mirror keys on, whatever a future vLLM's default becomes. */
export function vllmKvEventsEnv(cfg: KvEventsConfig): EnvMap {
  return { PYTHONHASHSEED: cfg.hashSeed, VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES: '1' };
}
