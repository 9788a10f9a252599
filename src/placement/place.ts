// Placement: replicas in catalog order, each shard given free devices of its class and the next
// ports. A device is a whole card or one MIG instance (numbered 1000 + 100 x card + instance). A
// replica on a MIG class gets exactly one instance, and no two replicas share an instance or a card:
// a card given whole takes all its instances with it, and an instance taken keeps its card from being
// given whole. Compute instances of one GPU instance share its memory, so they count as one.
import { createHash } from 'node:crypto';
import { cpuClass, profileOf, type Catalog } from '../catalog/index.js';
import { nearest } from '../config/index.js';
import { isMigClass, migProfileIssues, splitDeviceNumber } from '../discovery/index.js';
import { dataParallelSizeOf, gpusPerShard, kvIpcFits, publishesKvEvents, type Engine, type Profile, type ShardSpec } from '../engines/index.js';
import { ConfigError, LlmgwError, type ConfigIssue } from '../errors/index.js';
import { devicesOfClass, type NodeConfig, type NodeDevice } from './node.js';

/** What placement needs of the engines: find one by name, to know whether it publishes KV events. */
export interface EngineLookup {
  get(name: string): Engine;
}

/** Host facts placement divides among shards. */
export interface PlaceOptions {
  /** CPUs of this node; with it, shards with no GPU get their share as `threads`. */
  readonly cpus?: number;
  /** The agent's private socket directory: engines publishing KV events (without data parallelism) use ipc:// there. */
  readonly kvIpcDir?: string;
}

const maxPort = 65_535;

/** Identifies the profile version a shard starts from, so a restarted agent can tell whether a running
 * shard still matches the catalog. */
export function profileFingerprint(p: Profile): string {
  return createHash('sha256').update(JSON.stringify(p)).digest('hex').slice(0, 16);
}

/** The keys a device occupies: its card, and for an instance its GPU instance (or itself). */
function occupies(d: NodeDevice): { card: string; unit: string | undefined } {
  const s = splitDeviceNumber(d.index);
  const card = `card:${s.cardIndex}`;
  if (s.migDeviceIndex === undefined) return { card, unit: undefined };
  return { card, unit: d.gpuInstanceId === undefined ? `mig:${d.index}` : `gi:${s.cardIndex}:${d.gpuInstanceId}` };
}

/** Tracks what is taken so no two replicas share a card or an instance. */
class Taken {
  readonly #wholeCards = new Set<string>();
  readonly #cardsWithInstances = new Set<string>();
  readonly #units = new Set<string>();

  isFree(d: NodeDevice): boolean {
    const o = occupies(d);
    if (this.#wholeCards.has(o.card)) return false;
    if (o.unit === undefined) return !this.#cardsWithInstances.has(o.card);
    return !this.#units.has(o.unit);
  }

  take(d: NodeDevice): void {
    const o = occupies(d);
    if (o.unit === undefined) this.#wholeCards.add(o.card);
    else {
      this.#cardsWithInstances.add(o.card);
      this.#units.add(o.unit);
    }
  }
}

/** Threads for each shard with no GPU: half the CPUs when one or two share the node (llama.cpp's
 * server spinning on every CPU halves its neighbour's speed), an equal share when more do. */
export function cpuThreads(cpus: number, cpuShards: number): number {
  return Math.max(1, Math.floor(cpus / Math.max(2, cpuShards)));
}

/** Places every wanted replica on this node; throws a ConfigError listing every replica that does not
 * fit (too few devices of its class, a MIG profile asking for more than one instance, ports past
 * 65535, a profile spanning nodes). */
export function place(catalog: Catalog, node: NodeConfig, engines: EngineLookup, o: PlaceOptions = {}): ShardSpec[] {
  const issues: ConfigIssue[] = [];
  const taken = new Taken();
  let nextHttp = node.ports.httpBase;
  let nextKv = node.ports.kvEventsBase;
  const shards: ShardSpec[] = [];
  // Every port handed out, with what it is for: the HTTP and KV-event ranges grow from their own
  // bases, so bases set too close would give one port twice.
  const portOwners = new Map<number, string>();

  catalog.replicas.forEach((r, i) => {
    const at = `replicas[${i}]`;
    const profile = profileOf(catalog, r);
    if (profile === undefined) return; // catalog validation names it
    const mig = migProfileIssues(profile);
    if (mig.length > 0) {
      // Catalog validation refuses these too; placement checks again because it also serves nodes
      // whose catalog came from elsewhere, and a refusal here names the replica.
      for (const m of mig) issues.push({ path: at, message: `${r.model}/${r.profile} ${m.key}: ${m.message}` });
      return;
    }
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
    const need = profile.gpuClass === cpuClass ? 0 : isMigClass(profile.gpuClass) ? 1 : gpusPerShard(profile);
    const fp = profileFingerprint(profile);
    for (let k = 0; k < r.count; k++) {
      const ofClass = devicesOfClass(node, profile.gpuClass);
      const devices: NodeDevice[] = [];
      for (const d of ofClass) {
        if (devices.length === need) break;
        if (taken.isFree(d)) devices.push(d);
      }
      if (devices.length < need) {
        const free = ofClass.filter((d) => taken.isFree(d)).length;
        const excluded = node.excluded.map((e) => `${e.label}: ${e.reason}`);
        // No device at all of the class is most often a misspelt gpu_class: name the classes there are.
        const classes = [...new Set(node.devices.map((d) => d.gpuClass))].sort();
        const near = nearest(profile.gpuClass, classes);
        const otherClasses =
          ofClass.length > 0 || classes.length === 0
            ? ''
            : `; the classes here are ${classes.join(', ')}${near === undefined ? '' : ` (did you mean gpu_class: ${near}?)`}`;
        issues.push({
          path: at,
          message:
            `replica ${k + 1} of ${r.count} of ${r.model}/${r.profile} needs ${need} GPU${need === 1 ? '' : 's'} of class ${JSON.stringify(profile.gpuClass)}, ` +
            `and node ${node.name} has ${free} free of ${ofClass.length}; lower count, or list more devices of that class under node.devices` +
            otherClasses +
            (excluded.length > 0 ? `; left out of placement: ${excluded.join('; ')}` : ''),
        });
        break;
      }
      for (const d of devices) taken.take(d);
      const httpPort = nextHttp++;
      let kvEventsPort = 0;
      let kvReplayPort = 0;
      let kvIpcDir: string | undefined;
      if (profile.kvEvents && publishesKvEvents(engine)) {
        // vLLM offsets both ports by data-parallel rank, so each range is as wide as the DP size.
        const dp = dataParallelSizeOf(profile.args);
        kvEventsPort = nextKv;
        kvReplayPort = nextKv + dp;
        nextKv += 2 * dp;
        // vLLM refuses ipc:// for ranks above 0, so a data-parallel engine stays on loopback TCP.
        if (dp === 1 && o.kvIpcDir !== undefined && kvIpcFits(o.kvIpcDir, kvEventsPort)) kvIpcDir = o.kvIpcDir;
      }
      if (httpPort > maxPort || kvReplayPort > maxPort) {
        issues.push({ path: at, message: `replica ${k + 1} of ${r.model}/${r.profile} gets a port past ${maxPort}; lower node.ports.http_base or node.ports.kv_events_base` });
        break;
      }
      const replicaId = `${r.model}-${r.profile}-${k}`;
      const wanted: [number, string][] = [[httpPort, `the HTTP port of ${replicaId}`]];
      for (let rank = 0; kvEventsPort > 0 && rank < kvReplayPort - kvEventsPort; rank++) {
        wanted.push([kvEventsPort + rank, `a KV-event port of ${replicaId}`], [kvReplayPort + rank, `a KV replay port of ${replicaId}`]);
      }
      const owners = new Map(portOwners);
      let clash: [number, string] | undefined;
      for (const [port, what] of wanted) {
        if (owners.has(port)) {
          clash = [port, what];
          break;
        }
        owners.set(port, what);
      }
      if (clash !== undefined) {
        issues.push({
          path: at,
          message:
            `port ${clash[0]} would be both ${owners.get(clash[0]) ?? ''} and ${clash[1]}; ` +
            `set node.ports.http_base (${node.ports.httpBase}) and node.ports.kv_events_base (${node.ports.kvEventsBase}) far enough apart for every shard`,
        });
        break;
      }
      for (const [port, what] of owners) portOwners.set(port, what);
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
        ...(kvIpcDir === undefined ? {} : { kvIpcDir }),
        threads: 0,
        pool: '',
        fabric: '',
        profileFp: fp,
      });
    }
  });
  if (issues.length > 0) throw new ConfigError(`placement on node ${node.name}`, issues);
  if (o.cpus === undefined) return shards;
  const cpuShards = shards.filter((s) => s.gpuIndices.length === 0).length;
  const threads = cpuThreads(o.cpus, cpuShards);
  return shards.map((s) => (s.gpuIndices.length === 0 ? { ...s, threads } : s));
}
