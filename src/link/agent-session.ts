// The agent's end of the link, apart from any socket: answers the gateway's challenge, keeps its own
// copy of every replica's blocks (the net of the deltas it was handed), and on each accepted hello
// sends a full copy before any delta. Keeping the copy here means a link that drops, or a gateway
// that restarts, costs one snapshot from memory, not a restart of the engines' event streams.
import type { KvDelta } from '../kv/index.js';
import { silentLogger, type Logger } from '../log/index.js';
import { proveKey } from './keys.js';
import type { ActorPhase, AgentMessage, AssignedReplica, GatewayMessage, NodeInventory, ReplicaState } from './messages.js';

/** How an AgentSession is built. */
export interface AgentSessionOptions {
  readonly inventory: NodeInventory;
  /** The node's secret key (Z85); undefined for the in-process agent, which the gateway trusts. */
  readonly secretKey: string | undefined;
  /** Hands one message to the transport; `seq` numbers every message so the gateway sees a loss. */
  readonly send: (seq: number, msg: AgentMessage) => void;
  /**
   * The gateway's assignment for this node, each time it changes, with the placer lease's epoch it
   * was made under (0 from a lone gateway). The owner decides whether it stands and, if it does,
   * hands it back to every session with setAssigned.
   */
  readonly onAssign: (replicas: readonly AssignedReplica[], placerEpoch: number) => void;
  readonly log?: Logger;
  readonly now?: () => number;
}

// The rank of an unranked delta: the engine's only cache, or one merged over its ranks.
const unranked = -1;

interface RankCopy {
  readonly keys: Set<bigint>;
  readonly tiers: Map<bigint, string>;
}

/**
 * The newest placer epoch an agent took an assignment under. A placer that lost its lease while cut
 * off may still send what it last placed; taken, it would undo its successor's assignment. Epoch 0 is
 * a lone gateway, which holds no lease and has nobody to be fenced from.
 */
export class PlacerFence {
  #taken = 0;

  /** The epoch last taken. */
  get taken(): number {
    return this.#taken;
  }

  /** Whether an assignment under `epoch` stands; if it does, it is the one taken from now on. */
  admits(epoch: number): boolean {
    if (epoch !== 0 && epoch < this.#taken) return false;
    this.#taken = epoch;
    return true;
  }
}

/** Connection state of an agent's link, for logs and status. */
export type LinkState = 'joining' | 'joined' | 'refused';

/** One agent's side of the link protocol; the transport calls receive() and the agent's sinks feed it. */
export class AgentSession {
  readonly #o: AgentSessionOptions;
  readonly #log: Logger;
  readonly #blocks = new Map<string, Map<number, RankCopy>>();
  #ready: readonly ReplicaState[] = [];
  #actors: readonly ActorPhase[] = [];
  #seq = 0;
  #state: LinkState = 'joining';
  #epoch = '';
  #answered: Buffer | undefined;
  #assigned: readonly AssignedReplica[] = [];
  #placerEpoch = 0;
  #refusedFor = '';

  constructor(o: AgentSessionOptions) {
    this.#o = o;
    this.#log = o.log ?? silentLogger;
  }

  /** Where the session stands. */
  get state(): LinkState {
    return this.#state;
  }

  /** The gateway run this session joined (changes when the gateway restarts). */
  get epoch(): string {
    return this.#epoch;
  }

  #send(msg: AgentMessage): void {
    this.#o.send(this.#seq++, msg);
  }

  /** Asks the gateway to (re)admit this node: it answers with a challenge, then a full copy follows. */
  join(): void {
    this.#state = 'joining';
    this.#send({ type: 'rejoin' });
  }

  /** A heartbeat, which also tells a gateway that does not know this node to challenge it. */
  heartbeat(): void {
    this.#send({ type: 'heartbeat' });
  }

  /** The sink the agent's publishers write to (actors' KvSink): kept here, forwarded once joined. */
  readonly kvSink = {
    delta: (replicaId: string, d: KvDelta<bigint>): void => {
      this.#keep(replicaId, d);
      if (this.#state === 'joined') this.#send({ type: 'kv', replicaId, delta: d });
    },
    forget: (replicaId: string): void => {
      this.#blocks.delete(replicaId);
      if (this.#state === 'joined') this.#send({ type: 'forget', replicaId });
    },
  };

  /** The agent's ready replicas and actor phases changed. */
  setReplicas(ready: readonly ReplicaState[], actors: readonly ActorPhase[]): void {
    this.#ready = ready;
    this.#actors = actors;
    if (this.#state === 'joined') this.#send({ type: 'replicas', ready, actors, at: (this.#o.now ?? Date.now)() });
  }

  /** The assignment the node runs (from whichever gateway places): told to this gateway, and said in every hello. */
  setAssigned(replicas: readonly AssignedReplica[], placerEpoch: number): void {
    this.#assigned = replicas;
    this.#placerEpoch = placerEpoch;
    if (this.#state === 'joined') this.#send({ type: 'placed', replicas, placerEpoch });
  }

  /** Every key this agent holds for `replicaId`, over all ranks (for tests and the bench). */
  keysOf(replicaId: string): bigint[] {
    return [...new Set([...(this.#blocks.get(replicaId)?.values() ?? [])].flatMap((r) => [...r.keys]))];
  }

  /** Handles one message from the gateway. */
  receive(msg: GatewayMessage): void {
    switch (msg.type) {
      case 'challenge': {
        // The gateway repeats a challenge until it is answered; one answer is enough.
        if (this.#answered !== undefined && Buffer.from(msg.nonce).equals(this.#answered)) return;
        this.#answered = Buffer.from(msg.nonce);
        this.#state = 'joining';
        this.#epoch = msg.epoch;
        const node = this.#o.inventory.name;
        const proof = this.#o.secretKey === undefined ? new Uint8Array(0) : proveKey(this.#o.secretKey, msg.key, msg.nonce, node);
        this.#send({ type: 'hello', node, proof, inventory: this.#o.inventory, running: this.#assigned.map((r) => r.replicaId) });
        return;
      }
      case 'welcome':
        this.#state = 'joined';
        this.#epoch = msg.epoch;
        this.#log.info({ epoch: msg.epoch }, 'link.joined');
        // First, so a gateway that does not place knows which replicas are this node's before their
        // states and blocks arrive.
        this.#send({ type: 'placed', replicas: this.#assigned, placerEpoch: this.#placerEpoch });
        this.#send({ type: 'replicas', ready: this.#ready, actors: this.#actors, at: (this.#o.now ?? Date.now)() });
        for (const d of this.#fullCopies()) this.#send(d);
        return;
      case 'refused':
        this.#state = 'refused';
        // The node keeps asking (an operator may list its key meanwhile); the reason is logged once.
        if (msg.reason !== this.#refusedFor) this.#log.error({ reason: msg.reason }, 'link.refused');
        this.#refusedFor = msg.reason;
        return;
      case 'assign':
        this.#o.onAssign(msg.replicas, msg.placerEpoch ?? 0);
        return;
      case 'heartbeat':
        // A gateway that restarted answers our next message with a challenge; nothing to do here.
        return;
    }
  }

  #keep(replicaId: string, d: KvDelta<bigint>): void {
    let ranks = this.#blocks.get(replicaId);
    if (ranks === undefined) {
      ranks = new Map();
      this.#blocks.set(replicaId, ranks);
    }
    const rank = d.rank ?? unranked;
    if (d.reset !== undefined) {
      if (d.rank === undefined) ranks.clear();
      else ranks.delete(rank);
    }
    let copy = ranks.get(rank);
    if (copy === undefined) {
      copy = { keys: new Set(), tiers: new Map() };
      ranks.set(rank, copy);
    }
    for (const k of d.removed) {
      copy.keys.delete(k);
      copy.tiers.delete(k);
    }
    for (const k of d.added) copy.keys.add(k);
    for (const t of d.tiers ?? []) {
      if (t.medium === 'GPU') copy.tiers.delete(t.key);
      else copy.tiers.set(t.key, t.medium);
    }
  }

  // A full copy: one reset of the whole replica (what the gateway held from before, from another
  // gateway run or a previous agent, goes), then each rank's keys under that rank.
  #fullCopies(): AgentMessage[] {
    const out: AgentMessage[] = [];
    for (const [replicaId, ranks] of this.#blocks) {
      out.push({ type: 'kv', replicaId, delta: { added: [], removed: [], reset: 'requested' } });
      for (const [rank, copy] of ranks) {
        const tiers = [...copy.tiers].map(([key, medium]) => ({ key, medium }));
        out.push({ type: 'kv', replicaId, delta: { added: [...copy.keys], removed: [], tiers: tiers.length > 0 ? tiers : undefined, rank: rank === unranked ? undefined : rank } });
      }
    }
    return out;
  }
}
