// The first, simple placement: replicas in catalog order, each shard given the next free devices of
// its class and the next ports. Discovery-driven, MIG-aware placement replaces the device choice
// behind the same `place` signature.
import { createHash } from 'node:crypto';
import { cpuClass, profileOf, type Catalog } from '../catalog/index.js';
import { dataParallelSizeOf, gpusPerShard, publishesKvEvents, type Engine, type Profile, type ShardSpec } from '../engines/index.js';
import { ConfigError, LlmgwError, type ConfigIssue } from '../errors/index.js';
import { devicesOfClass, type NodeConfig, type NodeDevice } from './node.js';

/** What placement needs of the engines: find one by name, to know whether it publishes KV events. */
export interface EngineLookup {
  get(name: string): Engine;
}

const maxPort = 65_535;

/** Identifies the profile version a shard starts from, so a restarted agent can tell whether a running
 * shard still matches the catalog. */
export function profileFingerprint(p: Profile): string {
  return createHash('sha256').update(JSON.stringify(p)).digest('hex').slice(0, 16);
}

/** Places every wanted replica on this node; throws a ConfigError listing every replica that does not
 * fit (too few devices of its class, ports past 65535, a profile spanning nodes). */
export function place(catalog: Catalog, node: NodeConfig, engines: EngineLookup): ShardSpec[] {
  const issues: ConfigIssue[] = [];
  const free = new Map<string, NodeDevice[]>();
  const freeOf = (cls: string): NodeDevice[] => {
    let list = free.get(cls);
    if (list === undefined) {
      list = [...devicesOfClass(node, cls)];
      free.set(cls, list);
    }
    return list;
  };
  let nextHttp = node.ports.httpBase;
  let nextKv = node.ports.kvEventsBase;
  const shards: ShardSpec[] = [];

  catalog.replicas.forEach((r, i) => {
    const at = `replicas[${i}]`;
    const profile = profileOf(catalog, r);
    if (profile === undefined) return; // catalog validation names it
    if (profile.nodes > 1) {
      issues.push({
        path: at,
        message: `profile ${JSON.stringify(profile.name)} spans ${profile.nodes} nodes, and this node places single-node replicas only; run it under a multi-node gateway or write nodes: 1`,
      });
      return;
    }
    let engine: Engine;
    try {
      engine = engines.get(profile.engine);
    } catch (e) {
      if (e instanceof LlmgwError) return; // catalog validation names it
      throw e;
    }
    const need = profile.gpuClass === cpuClass ? 0 : gpusPerShard(profile);
    const fp = profileFingerprint(profile);
    for (let k = 0; k < r.count; k++) {
      const pool = freeOf(profile.gpuClass);
      if (pool.length < need) {
        const total = devicesOfClass(node, profile.gpuClass).length;
        issues.push({
          path: at,
          message:
            `replica ${k + 1} of ${r.count} of ${r.model}/${r.profile} needs ${need} GPU${need === 1 ? '' : 's'} of class ${JSON.stringify(profile.gpuClass)}, ` +
            `and node ${node.name} has ${pool.length} left of ${total}; lower count, or list more devices of that class under node.devices`,
        });
        break;
      }
      const devices = pool.splice(0, need);
      const httpPort = nextHttp++;
      let kvEventsPort = 0;
      let kvReplayPort = 0;
      if (profile.kvEvents && publishesKvEvents(engine)) {
        // vLLM offsets both ports by data-parallel rank, so each range is as wide as the DP size.
        const dp = dataParallelSizeOf(profile.args);
        kvEventsPort = nextKv;
        kvReplayPort = nextKv + dp;
        nextKv += 2 * dp;
      }
      if (httpPort > maxPort || kvReplayPort > maxPort) {
        issues.push({ path: at, message: `replica ${k + 1} of ${r.model}/${r.profile} gets a port past ${maxPort}; lower node.ports.http_base or node.ports.kv_events_base` });
        break;
      }
      const replicaId = `${r.model}-${r.profile}-${k}`;
      // A MIG instance is opened only by its UUID; whole cards keep their indices.
      const onMig = devices.some((d) => d.uuid.startsWith('MIG-'));
      shards.push({
        replicaId,
        shardId: `${replicaId}-r0`,
        rank: 0,
        nNodes: 1,
        leaderAddr: node.addr,
        leaderPort: 0,
        gpuIndices: devices.map((d) => d.index),
        gpuUuids: onMig ? devices.map((d) => d.uuid) : [],
        hcas: [],
        mgmtInterface: '',
        gidIndex: undefined,
        httpPort,
        profile,
        bindAddr: node.addr,
        apiKey: '',
        kvEventsPort,
        kvReplayPort,
        threads: 0,
        pool: '',
        fabric: '',
        profileFp: fp,
      });
    }
  });
  if (issues.length > 0) throw new ConfigError(`placement on node ${node.name}`, issues);
  return shards;
}
