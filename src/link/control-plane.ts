// The gateway as control plane: admits nodes (a listed key, then proof of holding it), places the
// catalog's replicas over the nodes that joined and sends each agent its shards, applies a node's
// block changes only to the replicas placed on that node, and takes a silent node's replicas out of
// routing with their blocks cleared until it is back with a full copy. The same code serves the
// in-process agent of `llmgw serve` and agents across the ZeroMQ link: only the transport differs.
import { randomBytes } from 'node:crypto';
import type { KvDelta } from '../kv/index.js';
import { silentLogger, type Logger } from '../log/index.js';
import { newChallenge, type Challenge } from './keys.js';
import { RefusalLog, type RefusalReason } from './refusals.js';
import type { ActorPhase, AgentMessage, AssignedReplica, GatewayMessage, NodeInventory, ReplicaState } from './messages.js';

/** A node allowed to join: its name and the public key its agent proves (none for the in-process agent). */
export interface AllowedNode {
  readonly name: string;
  readonly publicKey: string | undefined;
}

/** Where the catalog's replicas go on the nodes known so far. */
export interface Placement {
  readonly byNode: ReadonlyMap<string, readonly AssignedReplica[]>;
  /** Replicas that fit on no known node yet, with why. */
  readonly unplaced: readonly { readonly path: string; readonly message: string }[];
}

/** Places the catalog over `nodes` (in the config's order), trying each replica's `prefer` nodes first. */
export type Placer = (nodes: readonly NodeInventory[], prefer: ReadonlyMap<string, readonly string[]>) => Placement;

/** What the control plane needs of the index writer (gateway's IndexWriter satisfies it). */
export interface DeltaWriter {
  apply(node: string, replicaId: string, delta: KvDelta<bigint>): boolean;
  reset(replicaId: string, reason: string): void;
  forget(replicaId: string): void;
}

/** A ready replica as the gateway routes to it (gateway's ReplicaView). */
export interface RoutedReplica extends Omit<ReplicaState, 'url'> {
  readonly node: string;
  readonly url: URL;
}

/** How a ControlPlane is built. */
export interface ControlPlaneOptions {
  /** The nodes that may join, in placement order. */
  readonly nodes: readonly AllowedNode[];
  /** The in-process agent's peer id and node name: trusted without a key. */
  readonly local?: { readonly peer: string; readonly node: string } | undefined;
  readonly place: Placer;
  readonly writer: DeltaWriter | undefined;
  /** Every model name the catalog serves, ready or not. */
  readonly models: readonly string[];
  /** Sends one message to a peer (the link's routing id, or the local agent). */
  readonly send: (peer: string, msg: GatewayMessage) => void;
  /** A node heard from for no longer than this is silent: out of routing, its blocks cleared. */
  readonly silentAfterMs: number;
  /**
   * True for one of several gateways: it places only between takePlacement and yieldPlacement (while
   * it holds the placer lease), and otherwise learns each node's replicas from the node. Absent or
   * false: a lone gateway, which always places.
   */
  readonly leased?: boolean | undefined;
  /** Each node's replicas as they are now known (placed here, or reported by a node): serve's tokenizers read them. */
  readonly onAssigned?: ((replicas: readonly AssignedReplica[]) => void) | undefined;
  readonly log?: Logger | undefined;
  readonly now?: () => number;
}

/** Counters the link's metrics read. */
export interface ControlPlaneStats {
  /** Refusals by reason (RefusalReason): in the socket's handshake, of a message, of a node or a replica. */
  readonly refused: Map<string, number>;
  /** Sessions started over after lost messages. */
  gaps: number;
  /** Nodes that went silent. */
  silences: number;
}

/** One node, as `ctl nodes` and `ctl status` show it. */
export interface NodeStatus {
  readonly name: string;
  readonly state: 'up' | 'silent' | 'waiting';
  readonly addr: string | undefined;
  /** Devices by class, e.g. { l4: 2 }. */
  readonly devices: Readonly<Record<string, number>>;
  /** The cores its agent reported: the most cpu replicas placed here unless cluster.nodes says otherwise. */
  readonly cpus: number | undefined;
  readonly lastSeenMsAgo: number | undefined;
  /** Replicas placed here, with the ranks of their shards. */
  readonly assigned: readonly string[];
  readonly ready: readonly string[];
  readonly actors: readonly ActorPhase[];
}

interface Session {
  readonly node: string;
  expectedSeq: number;
}

interface NodeState {
  inventory: NodeInventory | undefined;
  peer: string | undefined;
  lastSeen: number;
  ready: readonly ReplicaState[];
  actors: readonly ActorPhase[];
  assigned: readonly AssignedReplica[];
  assignedKey: string;
  running: readonly string[];
}

// One log line per refusal reason per this long; the counter has every refusal.
const refusalLogIntervalMs = 10_000;
// A peer refused at hello is not answered for this long, doubled at each refusal up to the most: long
// enough that a misconfigured agent costs nothing, short enough that one fixed by listing its key (a
// config reload) joins within a minute.
const refusalBackoffMs = 1_000;
const refusalBackoffMaxMs = 60_000;

/** The gateway's view of the cluster: nodes, placement, ready replicas, and who may report what. */
export class ControlPlane {
  readonly #o: ControlPlaneOptions;
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #epoch = randomBytes(8).toString('hex');
  readonly #sessions = new Map<string, Session>();
  readonly #challenges = new Map<string, Challenge>();
  readonly #nodes = new Map<string, NodeState>();
  #owners = new Map<string, string>();
  #unplaced: Placement['unplaced'] = [];
  // Peers the last sweep found silent, with when each was last heard from then.
  #suspects = new Map<string, number>();
  readonly #listeners = new Set<() => void>();
  readonly #refusals: RefusalLog;
  // Peers refused at hello, and until when nothing they send is answered: an agent refused for its
  // proof sent a heartbeat every second, was challenged and refused again every time.
  readonly #backoff = new Map<string, { until: number; refusals: number }>();
  readonly stats: ControlPlaneStats;
  #placing: boolean;
  #placerEpoch = 0;

  constructor(o: ControlPlaneOptions) {
    this.#o = o;
    this.#log = o.log ?? silentLogger;
    this.#now = o.now ?? Date.now;
    this.#refusals = new RefusalLog({ log: this.#log, now: this.#now, intervalMs: refusalLogIntervalMs });
    this.stats = { refused: this.#refusals.counts, gaps: 0, silences: 0 };
    this.#placing = o.leased !== true;
    for (const n of o.nodes) this.#nodes.set(n.name, { inventory: undefined, peer: undefined, lastSeen: 0, ready: [], actors: [], assigned: [], assignedKey: '', running: [] });
  }

  /** This gateway run's id: agents see it change when the gateway restarts. */
  get epoch(): string {
    return this.#epoch;
  }

  /** Whether this gateway places replicas now, and the lease epoch it places under (0: a lone gateway). */
  get placer(): { readonly placing: boolean; readonly epoch: number } {
    return { placing: this.#placing, epoch: this.#placerEpoch };
  }

  /**
   * This gateway took the placer lease under `epoch`: it places from here, starting from what the
   * nodes reported they were assigned (each replica prefers the nodes it runs on, so the specs, and
   * the engines, stay), and sends every node its assignment under the new epoch.
   */
  takePlacement(epoch: number): void {
    if (this.#placing && this.#placerEpoch === epoch) return;
    this.#placing = true;
    this.#placerEpoch = epoch;
    this.#log.info({ epoch }, 'link.placer.took');
    for (const node of this.#nodes.values()) node.assignedKey = '';
    this.#replace();
    this.#changed();
  }

  /** The lease was lost (or not renewed in time): no more assignments from here; the nodes' word is learned again. */
  yieldPlacement(): void {
    if (!this.#placing) return;
    this.#placing = false;
    this.#log.warn({ epoch: this.#placerEpoch }, 'link.placer.yielded');
    this.#changed();
  }

  /** Counts one refusal and logs it, at most one line per reason per interval (the socket's refusals come here too). */
  refuse(reason: RefusalReason, fields: Record<string, unknown> = {}): void {
    this.#refusals.note(reason, fields);
  }

  /** Handles one message from `peer`. */
  receive(peer: string, seq: number, msg: AgentMessage): void {
    const b = this.#backoff.get(peer);
    if (b !== undefined && this.#now() < b.until) return;
    if (msg.type === 'hello') {
      this.#hello(peer, seq, msg);
      return;
    }
    const session = this.#sessions.get(peer);
    if (session === undefined || msg.type === 'rejoin') {
      if (session !== undefined) this.#drop(peer, session, 'rejoin');
      this.#challenge(peer);
      return;
    }
    if (seq !== session.expectedSeq) {
      // Something between the agent and us was lost: what we hold for its replicas may be wrong.
      this.stats.gaps++;
      this.#log.warn({ node: session.node, expected: session.expectedSeq, got: seq }, 'link.gap');
      this.#drop(peer, session, 'link-gap');
      this.#challenge(peer);
      return;
    }
    session.expectedSeq = seq + 1;
    const node = this.#nodes.get(session.node);
    if (node === undefined) return;
    node.lastSeen = this.#now();
    switch (msg.type) {
      case 'heartbeat':
        this.#o.send(peer, { type: 'heartbeat', epoch: this.#epoch });
        return;
      case 'replicas':
        this.#replicas(session.node, node, msg.ready, this.#ownActors(session.node, node, msg.actors, msg.at));
        return;
      case 'kv':
        // The writer refuses (and counts) a replica not placed on this node.
        this.#o.writer?.apply(session.node, msg.replicaId, msg.delta);
        return;
      case 'forget':
        if (this.#owners.get(msg.replicaId) === session.node) this.#o.writer?.reset(msg.replicaId, 'forgotten');
        return;
      case 'placed':
        // The placer knows what it assigned; the others learn it here.
        if (this.#placing) return;
        node.assigned = msg.replicas;
        this.#reown();
        this.#changed();
        return;
    }
  }

  // One challenge per peer until it is answered: an agent's rejoin and heartbeat can cross, and
  // two challenges would make its first answer look forged.
  #challenge(peer: string): void {
    const c = this.#challenges.get(peer) ?? newChallenge(randomBytes(32));
    this.#challenges.set(peer, c);
    this.#o.send(peer, { type: 'challenge', epoch: this.#epoch, key: c.key, nonce: c.nonce });
  }

  #refuseHello(peer: string, reason: RefusalReason, fields: Record<string, unknown>): void {
    const refusals = (this.#backoff.get(peer)?.refusals ?? 0) + 1;
    const backoffMs = Math.min(refusalBackoffMaxMs, refusalBackoffMs * 2 ** (refusals - 1));
    this.#backoff.set(peer, { until: this.#now() + backoffMs, refusals });
    this.refuse(reason, { ...fields, backoffMs });
    this.#o.send(peer, { type: 'refused', reason: `${reason}: ${JSON.stringify(fields)}` });
  }

  #hello(peer: string, seq: number, msg: Extract<AgentMessage, { type: 'hello' }>): void {
    const allowed = this.#o.nodes.find((n) => n.name === msg.node);
    const isLocal = this.#o.local !== undefined && this.#o.local.peer === peer && this.#o.local.node === msg.node;
    if (allowed === undefined) {
      this.#refuseHello(peer, 'unknown-node', { node: msg.node, have: this.#o.nodes.map((n) => n.name) });
      return;
    }
    // A challenge is spent by its answer, the trusted in-process agent's too: the agent takes a nonce
    // it answered for a repeat and ignores it, so a later session must be challenged afresh.
    const c = this.#challenges.get(peer);
    this.#challenges.delete(peer);
    if (!isLocal) {
      // A second answer to a challenge already answered: the session it opened stands.
      if (c === undefined && this.#sessions.get(peer)?.node === msg.node) return;
      if (c === undefined || allowed.publicKey === undefined || !c.verify(msg.node, allowed.publicKey, msg.proof)) {
        this.#refuseHello(peer, 'bad-proof', { node: msg.node, why: c === undefined ? 'no challenge was sent to this peer' : `not signed by the key cluster.nodes lists for ${msg.node}` });
        return;
      }
    }
    const node = this.#nodes.get(msg.node);
    if (node === undefined) return;
    if (msg.inventory.name !== msg.node) {
      this.#refuseHello(peer, 'bad-inventory', { node: msg.node, inventory: msg.inventory.name });
      return;
    }
    // A second agent of one node (the old one's connection not yet gone): the newer one wins.
    if (node.peer !== undefined && node.peer !== peer) {
      const old = this.#sessions.get(node.peer);
      if (old !== undefined) this.#sessions.delete(node.peer);
    }
    const prior = this.#sessions.get(peer);
    if (prior !== undefined) this.#sessions.delete(peer);
    this.#backoff.delete(peer);
    this.#sessions.set(peer, { node: msg.node, expectedSeq: seq + 1 });
    // Joined before in this gateway run: after a silence or a gap too, not only over a live session.
    const rejoined = node.inventory !== undefined;
    node.peer = peer;
    node.lastSeen = this.#now();
    node.inventory = msg.inventory;
    node.ready = [];
    // The last agent's word on its actors is not this one's: a phase shown until the new agent
    // reports its own (a publisher still "streaming" while the adopted engine's blocks are on
    // their way) told an operator, and the cluster test, that the index was current when it was not.
    node.actors = [];
    // What the node runs now, for placement: after a gateway restart nothing else remembers it.
    node.running = msg.running;
    // Whatever the index holds for this node's replicas is replaced by the full copy that follows.
    for (const [id, owner] of this.#owners) if (owner === msg.node) this.#o.writer?.reset(id, 'node-joined');
    this.#log.info({ node: msg.node, addr: msg.inventory.addr, devices: msg.inventory.devices.length, rejoined }, 'link.node.joined');
    // Placed before the welcome, so the replica states and blocks that follow it find their owners
    // (a gateway that does not place hears the node's own word on them first, in its `placed`).
    node.assignedKey = '';
    if (this.#placing) this.#replace();
    this.#o.send(peer, { type: 'welcome', epoch: this.#epoch });
    this.#assign(msg.node, node);
    this.#changed();
  }

  #replicas(name: string, node: NodeState, ready: readonly ReplicaState[], actors: readonly ActorPhase[]): void {
    const accepted: ReplicaState[] = [];
    for (const r of ready) {
      if (this.#owners.get(r.id) === name) accepted.push(r);
      else this.refuse('not-placed', { node: name, replica: r.id, placedOn: this.#owners.get(r.id) ?? null });
    }
    node.ready = accepted;
    node.actors = actors;
    this.#changed();
  }

  // A node's word on the actors of replicas placed on it, each `since` moved onto this clock by its
  // age when sent (clocks of two machines may disagree; an age across one message barely does).
  // Without the agent's clock, no `since` is believed: the board takes the time it first sees a phase.
  // A replica and its publisher are the leader's node's to report; a shard, its own node's.
  #ownActors(name: string, node: NodeState, actors: readonly ActorPhase[], at: number | undefined): ActorPhase[] {
    const now = this.#now();
    const replicas = new Set(node.assigned.flatMap((a) => (this.#owners.get(a.replicaId) === name ? [a.replicaId] : [])));
    const shards = new Set(node.assigned.flatMap((a) => a.shards.map((s) => s.shardId)));
    const own = (id: string): boolean => {
      const [kind, name] = [id.slice(0, id.indexOf(':')), id.slice(id.indexOf(':') + 1)];
      return kind === 'shard' ? shards.has(name) : (kind === 'replica' || kind === 'publisher') && replicas.has(name);
    };
    return actors.filter((a) => own(a.actor)).map((a) => ({ ...a, since: at === undefined || a.since === undefined ? undefined : now - Math.max(0, at - a.since) }));
  }

  #drop(peer: string, session: Session, reason: string): void {
    this.#sessions.delete(peer);
    const node = this.#nodes.get(session.node);
    if (node === undefined || node.peer !== peer) return;
    node.peer = undefined;
    node.ready = [];
    for (const [id, owner] of this.#owners) if (owner === session.node) this.#o.writer?.reset(id, reason);
    this.#changed();
  }

  /**
   * Takes nodes not heard from within silentAfterMs out of routing (a timer calls this), each once
   * a second sweep still has no word from it: when the gateway's own loop was blocked, its timer can
   * run before the messages that waited behind it are read, and every node would look silent.
   */
  sweep(): void {
    const now = this.#now();
    const suspects = new Map<string, number>();
    for (const [peer, s] of this.#sessions) {
      const node = this.#nodes.get(s.node);
      if (node === undefined || now - node.lastSeen <= this.#o.silentAfterMs) continue;
      if (this.#suspects.get(peer) !== node.lastSeen) {
        suspects.set(peer, node.lastSeen);
        continue;
      }
      this.stats.silences++;
      this.#log.warn({ node: s.node, silentMs: now - node.lastSeen }, 'link.node.silent');
      this.#drop(peer, s, 'node-silent');
    }
    this.#suspects = suspects;
  }

  // Placement over every node that ever joined (a silent node keeps its replicas: it may be back),
  // each replica trying the nodes it had first.
  #replace(): void {
    const known = this.#o.nodes.flatMap((n) => {
      const inv = this.#nodes.get(n.name)?.inventory;
      return inv === undefined ? [] : [inv];
    });
    // Where each replica runs: this gateway's own assignments, else what the nodes said they run
    // (a multi-node replica's nodes in rank order; a node's own word does not say its rank, so
    // such hints keep the nodes, and placement their order).
    const prefer = new Map<string, string[]>();
    for (const [name, node] of this.#nodes) {
      for (const a of node.assigned) {
        const list = prefer.get(a.replicaId) ?? [];
        const rank = Math.min(...a.shards.map((s) => s.rank));
        list[rank] = name;
        prefer.set(a.replicaId, list);
      }
    }
    const assigned = new Set(prefer.keys());
    for (const [name, node] of this.#nodes) {
      for (const id of node.running) {
        if (assigned.has(id)) continue;
        const list = prefer.get(id) ?? [];
        if (!list.includes(name)) list.push(name);
        prefer.set(id, list);
      }
    }
    const p = this.#o.place(known, new Map([...prefer].map(([k, v]) => [k, v.filter((x) => x !== undefined)])));
    if (JSON.stringify(p.unplaced) !== JSON.stringify(this.#unplaced) && p.unplaced.length > 0) this.#log.warn({ unplaced: p.unplaced }, 'link.placement.waiting');
    this.#unplaced = p.unplaced;
    for (const [name, node] of this.#nodes) node.assigned = p.byNode.get(name) ?? [];
    this.#reown();
    for (const [name, node] of this.#nodes) this.#assign(name, node);
  }

  // Who owns each replica (the node of its rank 0), from every node's assignment. On a gateway that
  // does not place, those are the nodes' own word: the first node in cluster.nodes order to claim a
  // replica keeps it, and a second claim is refused, so a node cannot take over another's blocks.
  #reown(): void {
    const owners = new Map<string, string>();
    for (const [name, node] of this.#nodes) {
      for (const a of node.assigned) {
        if (!a.shards.some((s) => s.rank === 0)) continue;
        const held = owners.get(a.replicaId);
        if (held === undefined) owners.set(a.replicaId, name);
        else this.refuse('not-placed', { node: name, replica: a.replicaId, placedOn: held });
      }
      this.#o.onAssigned?.(node.assigned);
    }
    for (const [id, owner] of this.#owners) {
      if (owners.get(id) !== owner) this.#o.writer?.forget(id);
    }
    this.#owners = owners;
  }

  #assign(name: string, node: NodeState): void {
    if (!this.#placing || node.peer === undefined || !this.#sessions.has(node.peer)) return;
    const key = JSON.stringify(node.assigned);
    if (key === node.assignedKey) return;
    node.assignedKey = key;
    this.#log.info({ node: name, replicas: node.assigned.map((a) => `${a.replicaId}:r${a.shards.map((s) => s.rank).join(',')}`) }, 'link.node.assigned');
    this.#o.send(node.peer, { type: 'assign', replicas: node.assigned, placerEpoch: this.#placerEpoch });
  }

  #changed(): void {
    for (const l of this.#listeners) l();
  }

  /** The node whose reports count for `replicaId`: its leader's. */
  ownerOf(replicaId: string): string | undefined {
    return this.#owners.get(replicaId);
  }

  /** Ready replicas serving `model` on nodes that are up (the gateway's ReplicaDirectory). */
  ready(model: string): RoutedReplica[] {
    const out: RoutedReplica[] = [];
    for (const [name, node] of this.#nodes) {
      if (node.peer === undefined) continue;
      for (const r of node.ready) if (r.model === model || r.adapters.includes(model)) out.push({ ...r, node: name, url: new URL(r.url) });
    }
    return out;
  }

  /** Every model the catalog serves. */
  models(): readonly string[] {
    return this.#o.models;
  }

  /** Calls `listener` whenever nodes or their ready replicas change; returns the unsubscribe. */
  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Replicas no known node has room for yet. */
  get unplaced(): Placement['unplaced'] {
    return this.#unplaced;
  }

  /** Every allowed node, joined or not. */
  nodes(): NodeStatus[] {
    const now = this.#now();
    return [...this.#nodes].map(([name, n]) => {
      const devices: Record<string, number> = {};
      for (const d of n.inventory?.devices ?? []) devices[d.gpuClass] = (devices[d.gpuClass] ?? 0) + 1;
      return {
        name,
        state: n.peer !== undefined ? 'up' : n.inventory !== undefined ? 'silent' : 'waiting',
        addr: n.inventory?.addr,
        devices,
        cpus: n.inventory?.cpus,
        lastSeenMsAgo: n.inventory === undefined ? undefined : now - n.lastSeen,
        assigned: n.assigned.map((a) => `${a.replicaId} (rank ${a.shards.map((s) => s.rank).join(',')})`),
        ready: n.ready.map((r) => r.id),
        actors: n.actors,
      };
    });
  }
}
