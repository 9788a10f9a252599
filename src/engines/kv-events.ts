// How an engine is told to publish its KV-cache events to the agent (vLLM's flags, which the sim
// shares). Launch flags are command construction, so they live here; src/kv/ owns the wire format.
import type { EnvMap } from './env.js';
import type { KvEventsConfig } from './config.js';

/** The topic every llmgw-started publisher uses; the subscriber filters on it. */
export const kvEventsTopic = 'kv-events';

/** Where one shard publishes: the agent's event port and, when nonzero, the replay port. */
export interface KvEventsPorts {
  readonly kvEventsPort: number;
  readonly kvReplayPort: number;
}

/** vLLM's flags for publishing KV events to the agent on loopback. The endpoint is a concrete
 * address, so vLLM connects and the agent's SUB binds (vLLM binds only for `*`, `::`, ipc and inproc);
 * the replay ROUTER is always bound by vLLM. Prefix caching is switched on because events exist only
 * with it, and the hash algorithm is named because vLLM's default (pickle) cannot be reproduced
 * outside Python. "publisher" is explicit: up to v0.11.0 it defaulted to "null" and nothing was sent. */
export function vllmKvEventsArgs(ports: KvEventsPorts, cfg: KvEventsConfig): string[] {
  const config: Record<string, unknown> = {
    enable_kv_cache_events: true,
    publisher: 'zmq',
    endpoint: `tcp://127.0.0.1:${ports.kvEventsPort}`,
  };
  if (ports.kvReplayPort > 0) config.replay_endpoint = `tcp://127.0.0.1:${ports.kvReplayPort}`;
  config.topic = kvEventsTopic;
  return ['--enable-prefix-caching', '--prefix-caching-hash-algo', cfg.hashAlgo, '--kv-events-config', JSON.stringify(config)];
}

/** The environment a KV-event publisher needs. PYTHONHASHSEED fixes vLLM's first parent hash (unset, it
 * is random and no hash can be reproduced); the int form of block hashes is pinned because that is
 * what the mirror keys on, whatever a future vLLM's default becomes. */
export function vllmKvEventsEnv(cfg: KvEventsConfig): EnvMap {
  return { PYTHONHASHSEED: cfg.hashSeed, VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES: '1' };
}
