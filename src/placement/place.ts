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

/** The ports (and ipc directory) of one shard. */
interface ShardPorts {
  readonly httpPort: number;
  readonly kvEventsPort: number;
  readonly kvReplayPort: number;
  readonly kvIpcDir: string | undefined;
}

/** A node placeCluster may use: its config, and how many cpu replicas it takes. */
export interface ClusterNodeConfig extends NodeConfig {
  /** The most gpu_class: cpu shards placed here; undefined: no bound. */
  readonly cpuReplicas?: number | undefined;
}

/** What one node has left while replicas are placed: devices, cpu room, and the next ports of each range. */
class NodeRoom {
  readonly node: NodeConfig;
  readonly #taken = new Taken();
  // A cpu shard has no device to run out of: without this bound the first node to join took every one.
  readonly #cpuSlots: number | undefined;
  #cpuTaken = 0;
  #nextHttp: number;
  #nextKv: number;
  // Every port handed out, with what it is for: the HTTP and KV-event ranges grow from their own
  // bases, so bases set too close would give one port twice.
  readonly #portOwners = new Map<number, string>();

  constructor(node: ClusterNodeConfig) {
    this.node = node;
    this.#cpuSlots = node.cpuReplicas;
    this.#nextHttp = node.ports.httpBase;
    this.#nextKv = node.ports.kvEventsBase;
  }

  /** `need` free devices of the profile's class, or undefined (nothing taken) when there are fewer;
   * for the cpu class none, or undefined when the node has no cpu room left. */
  devices(profile: Profile, need: number): NodeDevice[] | undefined {
    if (profile.gpuClass === cpuClass) return this.#cpuSlots === undefined || this.#cpuTaken < this.#cpuSlots ? [] : undefined;
    const devices: NodeDevice[] = [];
    for (const d of devicesOfClass(this.node, profile.gpuClass)) {
      if (devices.length === need) break;
      if (this.#taken.isFree(d)) devices.push(d);
    }
    return devices.length < need ? undefined : devices;
  }

  take(profile: Profile, devices: readonly NodeDevice[]): void {
    if (profile.gpuClass === cpuClass) this.#cpuTaken++;
    for (const d of devices) this.#taken.take(d);
  }

  /** Why `need` devices of the profile's class (or cpu room) are not free here, in the operator's words. */
  shortage(profile: Profile, need: number, what: string): string {
    const node = this.node;
    if (profile.gpuClass === cpuClass) {
      return (
        `${what} needs room for a cpu replica, and node ${node.name} takes ${this.#cpuSlots ?? 0}, all placed; ` +
        `raise its cluster.nodes[].cpu_replicas (by default its cores), start an agent on another node, or lower count`
      );
    }
    const ofClass = devicesOfClass(node, profile.gpuClass);
    const free = ofClass.filter((d) => this.#taken.isFree(d)).length;
    const excluded = node.excluded.map((e) => `${e.label}: ${e.reason}`);
    // No device at all of the class is most often a misspelt gpu_class: name the classes there are.
    const classes = [...new Set(node.devices.map((d) => d.gpuClass))].sort();
    const near = nearest(profile.gpuClass, classes);
    const otherClasses =
      ofClass.length > 0 || classes.length === 0 ? '' : `; the classes here are ${classes.join(', ')}${near === undefined ? '' : ` (did you mean gpu_class: ${near}?)`}`;
    return (
      `${what} needs ${need} GPU${need === 1 ? '' : 's'} of class ${JSON.stringify(profile.gpuClass)}, ` +
      `and node ${node.name} has ${free} free of ${ofClass.length}; lower count, or list more devices of that class under node.devices` +
      otherClasses +
      (excluded.length > 0 ? `; left out of placement: ${excluded.join('; ')}` : '')
    );
  }

  /** The next HTTP port and, for a publishing profile, its KV-event and replay ranges (on ipc:// in
   * `kvIpcDir` when given and the engine has one rank); a string says why not. */
  ports(replicaId: string, what: string, profile: Profile, publishes: boolean, kvIpcDir?: string): ShardPorts | string {
    const httpPort = this.#nextHttp++;
    let kvEventsPort = 0;
    let kvReplayPort = 0;
    let ipcDir: string | undefined;
    if (profile.kvEvents && publishes) {
      // vLLM offsets both ports by data-parallel rank, so each range is as wide as the DP size.
      const dp = dataParallelSizeOf(profile.args);
      kvEventsPort = this.#nextKv;
      kvReplayPort = this.#nextKv + dp;
      this.#nextKv += 2 * dp;
      // vLLM refuses ipc:// for ranks above 0, so a data-parallel engine stays on loopback TCP.
      if (dp === 1 && kvIpcDir !== undefined && kvIpcFits(kvIpcDir, kvEventsPort)) ipcDir = kvIpcDir;
    }
    if (httpPort > maxPort || kvReplayPort > maxPort) return `${what} gets a port past ${maxPort}; lower node.ports.http_base or node.ports.kv_events_base`;
    const wanted: [number, string][] = [[httpPort, `the HTTP port of ${replicaId}`]];
    for (let rank = 0; kvEventsPort > 0 && rank < kvReplayPort - kvEventsPort; rank++) {
      wanted.push([kvEventsPort + rank, `a KV-event port of ${replicaId}`], [kvReplayPort + rank, `a KV replay port of ${replicaId}`]);
    }
    const clash = this.#claim(wanted);
    return clash ?? { httpPort, kvEventsPort, kvReplayPort, kvIpcDir: ipcDir };
  }

  /** One more port from the HTTP range, for a multi-node replica's distributed init on its leader. */
  leaderPort(replicaId: string): number | string {
    const port = this.#nextHttp++;
    if (port > maxPort) return `the distributed-init port of ${replicaId} is past ${maxPort}; lower node.ports.http_base`;
    return this.#claim([[port, `the distributed-init port of ${replicaId}`]]) ?? port;
  }

  #claim(wanted: readonly [number, string][]): string | undefined {
    const owners = new Map(this.#portOwners);
    for (const [port, what] of wanted) {
      if (owners.has(port)) {
        const node = this.node;
        return (
          `port ${port} would be both ${owners.get(port) ?? ''} and ${what}; ` +
          `set node.ports.http_base (${node.ports.httpBase}) and node.ports.kv_events_base (${node.ports.kvEventsBase}) far enough apart for every shard`
        );
      }
      owners.set(port, what);
    }
    for (const [port, what] of owners) this.#portOwners.set(port, what);
    return undefined;
  }
}

/** A profile's refusals before any device is looked at, and its engine; undefined engine: nothing to place. */
function placeable(catalog: Catalog, r: Catalog['replicas'][number], at: string, engines: EngineLookup, issues: ConfigIssue[]): { profile: Profile; engine: Engine } | undefined {
  const profile = profileOf(catalog, r);
  if (profile === undefined) return undefined; // catalog validation names it
  const mig = migProfileIssues(profile);
  if (mig.length > 0) {
    // Catalog validation refuses these too; placement checks again because it also serves nodes
    // whose catalog came from elsewhere, and a refusal here names the replica.
    for (const m of mig) issues.push({ path: at, message: `${r.model}/${r.profile} ${m.key}: ${m.message}` });
    return undefined;
  }
  try {
    return { profile, engine: engines.get(profile.engine) };
  } catch (e) {
    if (e instanceof LlmgwError) return undefined; // catalog validation names it
    throw e;
  }
}

function devicesNeeded(profile: Profile): number {
  return profile.gpuClass === cpuClass ? 0 : isMigClass(profile.gpuClass) ? 1 : gpusPerShard(profile);
}

function shardOf(o: {
  replicaId: string;
  rank: number;
  profile: Profile;
  node: NodeConfig;
  leader: NodeConfig;
  leaderPort: number;
  devices: readonly NodeDevice[];
  ports: ShardPorts;
}): ShardSpec {
  // A MIG instance is opened only by its UUID; whole cards keep their indices.
  const onMig = o.devices.some((d) => d.uuid.startsWith('MIG-'));
  return {
    replicaId: o.replicaId,
    shardId: `${o.replicaId}-r${o.rank}`,
    rank: o.rank,
    nNodes: Math.max(1, o.profile.nodes),
    leaderAddr: o.leader.addr,
    leaderPort: o.leaderPort,
    gpuIndices: o.devices.map((d) => d.index),
    gpuUuids: onMig ? o.devices.map((d) => d.uuid) : [],
    hcas: [],
    mgmtInterface: '',
    gidIndex: undefined,
    httpPort: o.ports.httpPort,
    profile: o.profile,
    bindAddr: o.node.addr,
    apiKey: '',
    // Only the leader publishes events and serves HTTP; a worker's ports are still its own.
    kvEventsPort: o.rank === 0 ? o.ports.kvEventsPort : 0,
    kvReplayPort: o.rank === 0 ? o.ports.kvReplayPort : 0,
    ...(o.ports.kvIpcDir === undefined || o.rank !== 0 ? {} : { kvIpcDir: o.ports.kvIpcDir }),
    threads: 0,
    pool: '',
    fabric: '',
    profileFp: profileFingerprint(o.profile),
  };
}

function withThreads(shards: ShardSpec[], cpus: number | undefined): ShardSpec[] {
  if (cpus === undefined) return shards;
  const threads = cpuThreads(cpus, shards.filter((s) => s.gpuIndices.length === 0).length);
  return shards.map((s) => (s.gpuIndices.length === 0 ? { ...s, threads } : s));
}

/** Places every wanted replica on this node; throws a ConfigError listing every replica that does not
 * fit (too few devices of its class, a MIG profile asking for more than one instance, ports past
 * 65535, a profile spanning nodes). */
export function place(catalog: Catalog, node: NodeConfig, engines: EngineLookup, o: PlaceOptions = {}): ShardSpec[] {
  const issues: ConfigIssue[] = [];
  const room = new NodeRoom(node);
  const shards: ShardSpec[] = [];
  catalog.replicas.forEach((r, i) => {
    const at = `replicas[${i}]`;
    const p = placeable(catalog, r, at, engines, issues);
    if (p === undefined) return;
    const { profile, engine } = p;
    if (profile.nodes > 1) {
      issues.push({
        path: at,
        message: `profile ${JSON.stringify(profile.name)} spans ${profile.nodes} nodes, and this node places single-node replicas only; run it under a multi-node gateway or write nodes: 1`,
      });
      return;
    }
    const need = devicesNeeded(profile);
    for (let k = 0; k < r.count; k++) {
      const what = `replica ${k + 1} of ${r.count} of ${r.model}/${r.profile}`;
      const devices = room.devices(profile, need);
      if (devices === undefined) {
        issues.push({ path: at, message: room.shortage(profile, need, what) });
        break;
      }
      room.take(profile, devices);
      const replicaId = `${r.model}-${r.profile}-${k}`;
      const ports = room.ports(replicaId, what, profile, publishesKvEvents(engine), o.kvIpcDir);
      if (typeof ports === 'string') {
        issues.push({ path: at, message: ports });
        break;
      }
      shards.push(shardOf({ replicaId, rank: 0, profile, node, leader: node, leaderPort: 0, devices, ports }));
    }
  });
  if (issues.length > 0) throw new ConfigError(`placement on node ${node.name}`, issues);
  return withThreads(shards, o.cpus);
}

/** One shard placed somewhere in the cluster. */
export interface PlacedShard {
  readonly node: string;
  readonly spec: ShardSpec;
}

/** The cluster's placement: every shard with its node, and why any replica is left unplaced. */
export interface ClusterPlacement {
  readonly shards: readonly PlacedShard[];
  readonly unplaced: readonly ConfigIssue[];
}

/** One replica to place: where it is in the catalog, and its id. */
interface Wanted {
  readonly at: string;
  readonly what: string;
  readonly replicaId: string;
  readonly profile: Profile;
  readonly engine: Engine;
}

/**
 * Places every wanted replica over `nodes` (in the order given: earlier nodes fill first, GPU classes
 * up to their free devices, the cpu class up to each node's `cpuReplicas`). A replica
 * of a `nodes: N` profile gets N distinct nodes, its leader (rank 0) on the first, whose HTTP range
 * also gives the distributed-init port. `prefer` names the nodes a replica runs on now: such
 * replicas are placed first, on those nodes, so a gateway that restarts, or a node that joins late,
 * moves no running replica. Devices and ports are then handed out per node in catalog order, so the
 * same replicas on the same nodes get the same shard specs whatever the order nodes joined in (a
 * changed spec would restart the engine). A replica that fits nowhere yet is listed in `unplaced`
 * (nodes may still join), never thrown.
 */
export function placeCluster(catalog: Catalog, nodes: readonly ClusterNodeConfig[], engines: EngineLookup, prefer: ReadonlyMap<string, readonly string[]> = new Map()): ClusterPlacement {
  const issues: ConfigIssue[] = [];
  const wanted: Wanted[] = [];
  catalog.replicas.forEach((r, i) => {
    const at = `replicas[${i}]`;
    const p = placeable(catalog, r, at, engines, issues);
    if (p === undefined) return;
    for (let k = 0; k < r.count; k++) wanted.push({ at, what: `replica ${k + 1} of ${r.count} of ${r.model}/${r.profile}`, replicaId: `${r.model}-${r.profile}-${k}`, ...p });
  });
  // First which nodes each replica gets, those running somewhere first; then the specs.
  const scratch = new Map(nodes.map((n) => [n.name, new NodeRoom(n)]));
  const chosenNodes = new Map<string, NodeConfig[]>();
  const byPreference = [...wanted.filter((w) => prefer.has(w.replicaId)), ...wanted.filter((w) => !prefer.has(w.replicaId))];
  for (const w of byPreference) {
    const need = devicesNeeded(w.profile);
    const span = Math.max(1, w.profile.nodes);
    const before = prefer.get(w.replicaId) ?? [];
    const rooms = [...scratch.values()];
    const order = [...before.flatMap((n) => rooms.filter((x) => x.node.name === n)), ...rooms.filter((x) => !before.includes(x.node.name))];
    const chosen: { room: NodeRoom; devices: NodeDevice[] }[] = [];
    for (const room of order) {
      if (chosen.length === span) break;
      const devices = room.devices(w.profile, need);
      if (devices !== undefined) chosen.push({ room, devices });
    }
    if (chosen.length < span) {
      issues.push({
        path: w.at,
        message:
          span > 1
            ? `${w.what} spans ${span} nodes with ${w.profile.gpuClass === cpuClass ? 'room for a cpu shard' : `${need} free GPU${need === 1 ? '' : 's'} of class ${JSON.stringify(w.profile.gpuClass)}`} each, and ${chosen.length} of the ${nodes.length} known nodes have them; start agents on more nodes or lower count`
            : nodes.length === 0
              ? `${w.what} waits for a node: no agent has joined yet`
              : rooms.map((x) => x.shortage(w.profile, need, w.what)).join('; '),
      });
      continue;
    }
    for (const c of chosen) c.room.take(w.profile, c.devices);
    chosenNodes.set(w.replicaId, chosen.map((c) => c.room.node));
  }
  const rooms = new Map(nodes.map((n) => [n.name, new NodeRoom(n)]));
  const shards: PlacedShard[] = [];
  for (const w of wanted) {
    const on = chosenNodes.get(w.replicaId);
    const lead = on?.[0];
    if (on === undefined || lead === undefined) continue;
    const leadRoom = rooms.get(lead.name);
    const leaderPort = on.length > 1 && leadRoom !== undefined ? leadRoom.leaderPort(w.replicaId) : 0;
    if (typeof leaderPort === 'string') {
      issues.push({ path: w.at, message: leaderPort });
      continue;
    }
    const placed: PlacedShard[] = [];
    let refused: string | undefined;
    on.forEach((n, rank) => {
      const room = rooms.get(n.name);
      if (refused !== undefined || room === undefined) return;
      const devices = room.devices(w.profile, devicesNeeded(w.profile));
      if (devices === undefined) {
        refused = room.shortage(w.profile, devicesNeeded(w.profile), w.what);
        return;
      }
      room.take(w.profile, devices);
      const ports = room.ports(w.replicaId, w.what, w.profile, rank === 0 && publishesKvEvents(w.engine));
      if (typeof ports === 'string') refused = ports;
      else placed.push({ node: n.name, spec: shardOf({ replicaId: w.replicaId, rank, profile: w.profile, node: n, leader: lead, leaderPort, devices, ports }) });
    });
    if (refused !== undefined) issues.push({ path: w.at, message: refused });
    else shards.push(...placed);
  }
  return { shards, unplaced: issues };
}
