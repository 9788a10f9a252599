// The messages between a node's agent and the gateway. The same objects go through a direct call in
// `llmgw serve` and through this codec across the ZeroMQ link, so the two paths cannot drift. The
// gateway trusts nothing it decodes: every field is checked, and a message that does not decode is
// counted and dropped, never half-applied.
import { decode, encode } from '@msgpack/msgpack';
import type { ReadyReplica, ReplicaPlan } from '../actors/index.js';
import type { AdapterAccess, Disagg, DisaggRole, EngineCall, ModelTask, Pooling, Profile, ShardSpec } from '../engines/index.js';
import { disaggRoles, isModelTask, isPooling, modelTasks, poolings } from '../engines/index.js';
import { LlmgwError } from '../errors/index.js';
import { RESET_REASONS, type KvDelta, type ResetReason } from '../kv/index.js';
import type { NodeDevice, NodePorts } from '../placement/index.js';

/** What a node offers placement: its name, address, devices, cores and port ranges. */
export interface NodeInventory {
  readonly name: string;
  readonly addr: string;
  readonly devices: readonly NodeDevice[];
  readonly ports: NodePorts;
  /** The cores the agent may use (os.availableParallelism()); absent from an agent before the field. */
  readonly cpus?: number | undefined;
}

/** One replica (or the shards of it) placed on a node, as the agent runs it. */
export type AssignedReplica = ReplicaPlan;

/** A replica the agent can serve from, as its ReadyReplica with the URL as text (the node is the sender). */
export type ReplicaState = Omit<ReadyReplica, 'node' | 'url'> & { readonly url: string };

/** One actor's phase on the node, for `ctl status`; agents before `since` and `parent` send neither. */
export interface ActorPhase {
  readonly actor: string;
  readonly phase: string;
  readonly reason: string | undefined;
  /** When it entered this phase, ms since the epoch on the clock of the `replicas` message's `at`. */
  readonly since?: number | undefined;
  /** The actor it belongs to (a shard's replica), as its node's board has it. */
  readonly parent?: string | undefined;
}

/** What an agent says. */
export type AgentMessage =
  /** `running`: the replicas the node runs now, so a gateway that restarted places them there again. */
  | { readonly type: 'hello'; readonly node: string; readonly proof: Uint8Array; readonly inventory: NodeInventory; readonly running: readonly string[] }
  /** `at`: the agent's clock when sent, so the gateway reads each `since` as an age, whatever the clocks' skew. */
  | { readonly type: 'replicas'; readonly ready: readonly ReplicaState[]; readonly actors: readonly ActorPhase[]; readonly at?: number | undefined }
  | { readonly type: 'kv'; readonly replicaId: string; readonly delta: KvDelta<bigint> }
  | { readonly type: 'forget'; readonly replicaId: string }
  | { readonly type: 'heartbeat' }
  /**
   * What the placer assigned this node, under the placer's lease epoch: a gateway that does not place
   * (one of several) learns from it who owns which replica, and one taking over the lease adopts it.
   */
  | { readonly type: 'placed'; readonly replicas: readonly AssignedReplica[]; readonly placerEpoch: number }
  /** The agent lost messages (its queue overflowed while the link was down): start it over. */
  | { readonly type: 'rejoin' };

/** What the gateway says. */
export type GatewayMessage =
  /** Sent to a peer with no session (new, or one the gateway dropped): answer with hello. */
  | { readonly type: 'challenge'; readonly epoch: string; readonly key: Uint8Array; readonly nonce: Uint8Array }
  /** The hello was accepted: send a full copy of every replica's blocks, then deltas. */
  | { readonly type: 'welcome'; readonly epoch: string }
  | { readonly type: 'refused'; readonly reason: string }
  /**
   * `placerEpoch`: the placer lease's epoch this assignment was made under (0 for a lone gateway); an
   * agent ignores an assignment older than one it took, so a deposed placer cannot undo its successor.
   */
  | { readonly type: 'assign'; readonly replicas: readonly AssignedReplica[]; readonly placerEpoch?: number | undefined }
  | { readonly type: 'heartbeat'; readonly epoch: string };

/** An agent message with its sequence number, as it crosses the link: a gap means messages were lost. */
export interface Sequenced<M> {
  readonly seq: number;
  readonly msg: M;
}

/** A message that did not decode: what was wrong, for the counter and the rate-limited log. */
export class LinkDecodeError extends LlmgwError {
  constructor(message: string) {
    super('LLMGW_LINK_DECODE', message);
  }
}

// Keys travel as 8 bytes each, little-endian: a batch of thousands is one buffer, not thousands of
// msgpack integers.
function packKeys(keys: readonly bigint[]): Uint8Array {
  const out = new BigUint64Array(keys.length);
  for (let i = 0; i < keys.length; i++) out[i] = keys[i] ?? 0n;
  return new Uint8Array(out.buffer);
}

function unpackKeys(bytes: Uint8Array, at: string): bigint[] {
  if (bytes.byteLength % 8 !== 0) throw new LinkDecodeError(`${at}: ${bytes.byteLength} bytes is not a whole number of 8-byte keys`);
  const copy = new Uint8Array(bytes); // aligned, and ours
  return [...new BigUint64Array(copy.buffer, 0, copy.byteLength / 8)];
}

function wireDelta(d: KvDelta<bigint>): Record<string, unknown> {
  return {
    added: packKeys(d.added),
    removed: packKeys(d.removed),
    reset: d.reset,
    tiers: d.tiers === undefined ? undefined : { keys: packKeys(d.tiers.map((t) => t.key)), media: d.tiers.map((t) => t.medium) },
    rank: d.rank,
  };
}

/** Encodes an agent message with its sequence number. */
export function encodeAgentMessage(seq: number, msg: AgentMessage): Uint8Array {
  return encode({ seq, msg: msg.type === 'kv' ? { ...msg, delta: wireDelta(msg.delta) } : msg }, { ignoreUndefined: true });
}

/** Encodes a gateway message. */
export function encodeGatewayMessage(msg: GatewayMessage): Uint8Array {
  return encode(msg, { ignoreUndefined: true });
}

/** Narrows untrusted decoded values field by field; every failure names its path. */
class Reader {
  constructor(
    readonly v: Record<string, unknown>,
    readonly at: string,
  ) {}

  static of(v: unknown, at: string): Reader {
    if (typeof v !== 'object' || v === null || Array.isArray(v) || v instanceof Uint8Array) throw new LinkDecodeError(`${at}: not a map`);
    return new Reader(Object.fromEntries(Object.entries(v)), at);
  }

  #bad(k: string, want: string): never {
    throw new LinkDecodeError(`${this.at}.${k}: not ${want}`);
  }

  str(k: string): string {
    const x = this.v[k];
    return typeof x === 'string' ? x : this.#bad(k, 'a string');
  }

  optStr(k: string): string | undefined {
    return this.v[k] === undefined || this.v[k] === null ? undefined : this.str(k);
  }

  num(k: string): number {
    const x = this.v[k];
    return typeof x === 'number' && Number.isFinite(x) ? x : this.#bad(k, 'a number');
  }

  optNum(k: string): number | undefined {
    return this.v[k] === undefined || this.v[k] === null ? undefined : this.num(k);
  }

  bool(k: string): boolean {
    const x = this.v[k];
    return typeof x === 'boolean' ? x : this.#bad(k, 'a boolean');
  }

  /** Absent from an agent or gateway of a version before the field: undefined. */
  optBool(k: string): boolean | undefined {
    return this.v[k] === undefined || this.v[k] === null ? undefined : this.bool(k);
  }

  bytes(k: string): Uint8Array {
    const x = this.v[k];
    return x instanceof Uint8Array ? x : this.#bad(k, 'bytes');
  }

  list(k: string): unknown[] {
    const x = this.v[k];
    return Array.isArray(x) ? x : this.#bad(k, 'a list');
  }

  strs(k: string): string[] {
    return this.list(k).map((x, i) => (typeof x === 'string' ? x : this.#bad(`${k}[${i}]`, 'a string')));
  }

  nums(k: string): number[] {
    return this.list(k).map((x, i) => (typeof x === 'number' ? x : this.#bad(`${k}[${i}]`, 'a number')));
  }

  map(k: string): Reader {
    return Reader.of(this.v[k], `${this.at}.${k}`);
  }

  maps(k: string): Reader[] {
    return this.list(k).map((x, i) => Reader.of(x, `${this.at}.${k}[${i}]`));
  }

  stringMap(k: string): Record<string, string> {
    const m = this.map(k);
    return Object.fromEntries(Object.keys(m.v).map((key) => [key, m.str(key)]));
  }
}

// Keys cross as 64-bit words in one byte string; the receiver gets kv's own delta type back.
const isResetReason = (s: string): s is ResetReason => (RESET_REASONS as readonly string[]).includes(s);

function readDelta(r: Reader): KvDelta<bigint> {
  const tiersRaw = r.v.tiers;
  let tiers: { key: bigint; medium: string }[] | undefined;
  if (tiersRaw !== undefined && tiersRaw !== null) {
    const t = r.map('tiers');
    const keys = unpackKeys(t.bytes('keys'), `${t.at}.keys`);
    const media = t.strs('media');
    if (media.length !== keys.length) throw new LinkDecodeError(`${t.at}: ${keys.length} keys but ${media.length} media`);
    tiers = keys.map((key, i) => ({ key, medium: media[i] ?? 'GPU' }));
  }
  const rank = r.optNum('rank');
  if (rank !== undefined && !(Number.isInteger(rank) && rank >= 0)) throw new LinkDecodeError(`${r.at}.rank: ${rank} is not a rank`);
  const reset = r.optStr('reset');
  if (reset !== undefined && !isResetReason(reset)) throw new LinkDecodeError(`${r.at}.reset: ${JSON.stringify(reset)} is not one of ${RESET_REASONS.join(', ')}`);
  const delta: KvDelta<bigint> = { added: unpackKeys(r.bytes('added'), `${r.at}.added`), removed: unpackKeys(r.bytes('removed'), `${r.at}.removed`) };
  if (reset !== undefined) delta.reset = reset;
  if (tiers !== undefined) delta.tiers = tiers;
  if (rank !== undefined) delta.rank = rank;
  return delta;
}

function readDevice(r: Reader): NodeDevice {
  return {
    index: r.num('index'),
    name: r.str('name'),
    uuid: r.str('uuid'),
    gpuClass: r.str('gpuClass'),
    computeCapability: r.str('computeCapability'),
    memoryTotalMb: r.optNum('memoryTotalMb'),
    label: r.str('label'),
    gpuInstanceId: r.optNum('gpuInstanceId'),
  };
}

function readInventory(r: Reader): NodeInventory {
  const ports = r.map('ports');
  // Placement gives a node as many cpu replicas as it has cores: 0 or 2.5 would quietly give it none, or half of one.
  const cpus = r.optNum('cpus');
  if (cpus !== undefined && !(Number.isInteger(cpus) && cpus >= 1)) throw new LinkDecodeError(`${r.at}.cpus: ${cpus} is not a count of cores`);
  return { name: r.str('name'), addr: r.str('addr'), devices: r.maps('devices').map(readDevice), ports: { httpBase: ports.num('httpBase'), kvEventsBase: ports.num('kvEventsBase') }, cpus };
}

// How the replica's engine takes its adapters (engines/ built it on the node): plain calls and fields.
function readEngineCall(r: Reader, k: string): EngineCall | undefined {
  if (r.v[k] === undefined || r.v[k] === null) return undefined;
  const c = r.map(k);
  return { path: c.str('path'), body: c.map('body').v };
}

function readAdapterAccess(r: Reader): AdapterAccess | undefined {
  if (r.v.adapterAccess === undefined || r.v.adapterAccess === null) return undefined;
  const a = r.map('adapterAccess');
  return {
    adapters: a.maps('adapters').map((x) => ({
      name: x.str('name'),
      requestFields: x.map('requestFields').v,
      load: readEngineCall(x, 'load'),
      unload: readEngineCall(x, 'unload'),
    })),
    maxLoaded: a.optNum('maxLoaded'),
  };
}

const roleOf = (r: Reader, k: string): DisaggRole | undefined => {
  const v = r.optStr(k);
  if (v === undefined || (disaggRoles as readonly string[]).includes(v)) return v as DisaggRole | undefined;
  throw new LinkDecodeError(`${r.at}.${k}: ${JSON.stringify(v)} is not one of ${disaggRoles.join(', ')}`);
};

// A replica's part in prefill/decode disaggregation; absent from an agent before the field.
function readDisagg(r: Reader): Disagg | undefined {
  if (r.v.disagg === undefined || r.v.disagg === null) return undefined;
  const d = r.map('disagg');
  const protocol = d.str('protocol');
  if (protocol !== 'nixl' && protocol !== 'sglang') throw new LinkDecodeError(`${d.at}.protocol: ${JSON.stringify(protocol)} is not nixl or sglang`);
  return { role: roleOf(d, 'role') ?? 'both', protocol, bootstrapPort: d.num('bootstrapPort') };
}

function readReplicaState(r: Reader): ReplicaState {
  return {
    id: r.str('id'),
    model: r.str('model'),
    adapters: r.strs('adapters'),
    url: r.str('url'),
    apiKey: r.optStr('apiKey'),
    generation: r.num('generation'),
    kvEvents: r.bool('kvEvents'),
    blockSizeTokens: r.num('blockSizeTokens'),
    hashSeed: r.str('hashSeed'),
    dataParallelSize: r.num('dataParallelSize'),
    adapterAccess: readAdapterAccess(r),
    schedulesByPriority: r.optBool('schedulesByPriority'),
    disagg: readDisagg(r),
    ...(r.optBool('embeds') === true ? { embeds: true } : {}),
  };
}

function readActorPhase(r: Reader): ActorPhase {
  return { actor: r.str('actor'), phase: r.str('phase'), reason: r.optStr('reason'), since: r.optNum('since'), parent: r.optStr('parent') };
}

function readProfile(r: Reader): Profile {
  return {
    name: r.str('name'),
    engine: r.str('engine'),
    gpuClass: r.str('gpuClass'),
    tp: r.num('tp'),
    pp: r.num('pp'),
    gpusPerNode: r.num('gpusPerNode'),
    nodes: r.num('nodes'),
    args: r.strs('args'),
    env: r.stringMap('env'),
    modelPath: r.str('modelPath'),
    servedModelName: r.str('servedModelName'),
    adapters: r.maps('adapters').map((a) => ({ name: a.str('name'), path: a.str('path') })),
    runtimeLora: r.bool('runtimeLora'),
    kvEvents: r.bool('kvEvents'),
    role: roleOf(r, 'role'),
    bootstrapPort: r.optNum('bootstrapPort'),
    ...reasoningParserOf(r),
    ...embeddingOf(r),
  };
}

// Absent on the wire when the profile has none, so an older agent's profiles read the same.
function reasoningParserOf(r: Reader): { reasoningParser?: string } {
  const v = r.optStr('reasoningParser');
  return v === undefined ? {} : { reasoningParser: v };
}

// Absent on the wire for a generating profile, as from an agent before embeddings.
function embeddingOf(r: Reader): { task?: ModelTask; pooling?: Pooling } {
  const task = r.optStr('task');
  const pooling = r.optStr('pooling');
  if (task !== undefined && !isModelTask(task)) throw new LinkDecodeError(`${r.at}.task: ${JSON.stringify(task)} is not one of ${modelTasks.join(', ')}`);
  if (pooling !== undefined && !isPooling(pooling)) throw new LinkDecodeError(`${r.at}.pooling: ${JSON.stringify(pooling)} is not one of ${poolings.join(', ')}`);
  return { ...(task === undefined ? {} : { task }), ...(pooling === undefined ? {} : { pooling }) };
}

function readShard(r: Reader): ShardSpec {
  return {
    replicaId: r.str('replicaId'),
    shardId: r.str('shardId'),
    rank: r.num('rank'),
    nNodes: r.num('nNodes'),
    leaderAddr: r.str('leaderAddr'),
    leaderPort: r.num('leaderPort'),
    gpuIndices: r.nums('gpuIndices'),
    gpuUuids: r.strs('gpuUuids'),
    hcas: r.strs('hcas'),
    mgmtInterface: r.str('mgmtInterface'),
    gidIndex: r.optNum('gidIndex'),
    httpPort: r.num('httpPort'),
    profile: readProfile(r.map('profile')),
    bindAddr: r.str('bindAddr'),
    apiKey: r.str('apiKey'),
    kvEventsPort: r.num('kvEventsPort'),
    kvReplayPort: r.num('kvReplayPort'),
    threads: r.num('threads'),
    pool: r.str('pool'),
    fabric: r.str('fabric'),
    profileFp: r.str('profileFp'),
  };
}

function readAssigned(r: Reader): AssignedReplica {
  return {
    replicaId: r.str('replicaId'),
    model: r.str('model'),
    adapters: r.strs('adapters'),
    shards: r.maps('shards').map(readShard),
    blockSizeTokens: r.num('blockSizeTokens'),
    hashSeed: r.str('hashSeed'),
    dataParallelSize: r.num('dataParallelSize'),
    capacityBlocks: r.num('capacityBlocks'),
    schedulesByPriority: r.optBool('schedulesByPriority'),
  };
}

function decodeMap(bytes: Uint8Array, what: string): Reader {
  let v: unknown;
  try {
    v = decode(bytes);
  } catch (e) {
    throw new LinkDecodeError(`${what}: not msgpack (${e instanceof Error ? e.message : String(e)})`);
  }
  return Reader.of(v, what);
}

/** Decodes an agent message; throws LinkDecodeError naming the bad field. */
export function decodeAgentMessage(bytes: Uint8Array): Sequenced<AgentMessage> {
  const top = decodeMap(bytes, 'agent message');
  const seq = top.num('seq');
  const m = top.map('msg');
  const type = m.str('type');
  switch (type) {
    case 'hello':
      return { seq, msg: { type, node: m.str('node'), proof: m.bytes('proof'), inventory: readInventory(m.map('inventory')), running: m.strs('running') } };
    case 'replicas':
      return {
        seq,
        msg: { type, ready: m.maps('ready').map(readReplicaState), actors: m.maps('actors').map(readActorPhase), at: m.optNum('at') },
      };
    case 'kv':
      return { seq, msg: { type, replicaId: m.str('replicaId'), delta: readDelta(m.map('delta')) } };
    case 'forget':
      return { seq, msg: { type, replicaId: m.str('replicaId') } };
    case 'placed':
      return { seq, msg: { type, replicas: m.maps('replicas').map(readAssigned), placerEpoch: m.num('placerEpoch') } };
    case 'heartbeat':
    case 'rejoin':
      return { seq, msg: { type } };
    default:
      throw new LinkDecodeError(`agent message: unknown type ${JSON.stringify(type)}`);
  }
}

/** Decodes a gateway message; throws LinkDecodeError naming the bad field. */
export function decodeGatewayMessage(bytes: Uint8Array): GatewayMessage {
  const m = decodeMap(bytes, 'gateway message');
  const type = m.str('type');
  switch (type) {
    case 'challenge':
      return { type, epoch: m.str('epoch'), key: m.bytes('key'), nonce: m.bytes('nonce') };
    case 'welcome':
      return { type, epoch: m.str('epoch') };
    case 'refused':
      return { type, reason: m.str('reason') };
    case 'assign':
      return { type, replicas: m.maps('replicas').map(readAssigned), placerEpoch: m.optNum('placerEpoch') };
    case 'heartbeat':
      return { type, epoch: m.str('epoch') };
    default:
      throw new LinkDecodeError(`gateway message: unknown type ${JSON.stringify(type)}`);
  }
}
