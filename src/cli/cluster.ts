// Wiring of the agent link, shared by `serve` (the gateway, its control plane, and its own node's
// agent in process) and `agent` (a node's agent across the link). Both ends speak the same messages;
// only the transport differs: a queued direct call in process, the ZeroMQ link between nodes.
import { NodeAgent, planReplicas, type ActorBoard, type OpenKvStream, type ReplicaPlan, type ReportedActor } from '../actors/index.js';
import { kvIpcFits, type Host } from '../engines/index.js';
import type { KvDelta } from '../kv/index.js';
import { AgentSession, PlacerFence, type AgentMessage, type AssignedReplica, type NodeInventory, type NodeStatus, type Placer, type ReplicaState } from '../link/index.js';
import type { Logger } from '../log/index.js';
import { placeCluster, type NodeConfig } from '../placement/index.js';
import { registryOf, type Config } from './config.js';
import { kvIpcDirOf } from './kv-transport.js';

/** What a node offers, from its (discovered) node config and its host's cores. */
export function inventoryOf(node: NodeConfig, cpus: number): NodeInventory {
  return { name: node.name, addr: node.addr, devices: node.devices, ports: node.ports, cpus };
}

/**
 * Places the config's catalog over the nodes that joined, grouped into each node's replica plans.
 * In a cluster a node takes as many cpu replicas as its cluster.nodes entry's cpu_replicas, else as
 * it has cores; a lone node (no cluster.link) has nowhere else to put them and takes them all.
 */
export function clusterPlacer(config: Config): Placer {
  const engines = registryOf(config);
  const cluster = config.cluster.link !== '';
  const listed = new Map(config.cluster.nodes.map((n) => [n.name, n]));
  return (nodes, prefer) => {
    const p = placeCluster(
      config,
      nodes.map((n) => ({ ...n, discover: false, excluded: [], cpuReplicas: cluster ? (listed.get(n.name)?.cpuReplicas ?? n.cpus) : undefined })),
      engines,
      prefer,
    );
    const byNode = new Map<string, AssignedReplica[]>();
    for (const n of nodes) {
      const specs = p.shards.filter((s) => s.node === n.name).map((s) => s.spec);
      byNode.set(n.name, planReplicas(specs, { hashSeed: config.kvEvents.hashSeed, simBlockSize: config.engines.sim.blockSize }));
    }
    return { byNode, unplaced: p.unplaced };
  };
}

/**
 * The gateway places on ports; where vLLM allows it, this node's engine publishes on ipc:// in the
 * agent's own private directory instead (which only this node knows), as a lone agent's would.
 */
function withKvIpc(r: AssignedReplica, dir: string): ReplicaPlan {
  if (r.dataParallelSize > 1) return r; // vLLM refuses ipc:// for ranks above 0
  return { ...r, shards: r.shards.map((s) => (s.kvEventsPort > 0 && s.kvIpcDir === undefined && kvIpcFits(dir, s.kvEventsPort) ? { ...s, kvIpcDir: dir } : s)) };
}

/** Every ready replica of the agent, as the link's replica states. */
function readyStates(agent: NodeAgent): ReplicaState[] {
  const seen = new Map<string, ReplicaState>();
  for (const m of agent.models()) {
    for (const r of agent.ready(m)) {
      seen.set(r.id, {
        id: r.id,
        model: r.model,
        adapters: r.adapters,
        url: r.url.href,
        apiKey: r.apiKey,
        generation: r.generation,
        kvEvents: r.kvEvents,
        blockSizeTokens: r.blockSizeTokens,
        hashSeed: r.hashSeed,
        dataParallelSize: r.dataParallelSize,
        adapterAccess: r.adapterAccess,
        schedulesByPriority: r.schedulesByPriority,
        disagg: r.disagg,
        ...(r.embeds === true ? { embeds: true } : {}),
      });
    }
  }
  return [...seen.values()];
}

/**
 * A node's agent behind one link session per gateway: started by the placer's first assignment,
 * changed by later ones. Every gateway gets the node's replica states and blocks; an assignment
 * counts only if its placer epoch is not older than the last one taken.
 */
export interface LinkedAgent {
  readonly agent: NodeAgent;
  /** One session per gateway, in the order of `sends`. */
  readonly sessions: readonly AgentSession[];
  /** Sends a heartbeat and any change of actor phases; the owner's timer calls it. */
  tick(): void;
  close(): Promise<void>;
}

/** Builds a node's agent whose replicas come from the gateway and whose reports go to `send`. */
export function linkedAgent(o: {
  config: Config;
  node: NodeConfig;
  host: Host;
  secretKey: string | undefined;
  /** One transport per gateway this node joins. */
  sends: readonly ((seq: number, msg: AgentMessage) => void)[];
  inFlight?: (replicaId: string) => number;
  /** How each replica's KV event stream is built: with the pool's hasher, and metrics in serve. */
  openKvStream?: OpenKvStream | undefined;
  log: Logger;
  /** Where every actor's state is shown (serve's /debug/actors); none for a remote agent. */
  board?: ActorBoard | undefined;
}): LinkedAgent {
  const { config, node, host, log } = o;
  let started = false;
  const fence = new PlacerFence();
  const onAssign = (replicas: readonly AssignedReplica[], epoch: number): void => {
    if (!fence.admits(epoch)) {
      log.warn({ epoch, taken: fence.taken }, 'agent.assign.stale');
      return;
    }
    for (const s of sessions) s.setAssigned(replicas, epoch);
    const plans: ReplicaPlan[] = replicas.map((r) => withKvIpc(r, kvIpcDirOf(config)));
    log.info({ replicas: plans.map((p) => p.replicaId), placerEpoch: epoch }, 'agent.assigned');
    // The first assignment starts the agent, which then adopts engines a previous agent left
    // running: started before it, with nothing to run, it would retire them.
    if (!started) {
      started = true;
      agent.start(plans);
    } else agent.setDesired(plans);
  };
  const sessions = o.sends.map(
    (send, i) =>
      new AgentSession({
        inventory: inventoryOf(node, host.cpus),
        secretKey: o.secretKey,
        send,
        log: log.child({ subsystem: 'link', gateway: i }),
        onAssign,
      }),
  );
  // The engines' blocks go to every gateway: each builds the same index from them.
  const kvSink = {
    delta: (replicaId: string, d: KvDelta<bigint>): void => {
      for (const s of sessions) s.kvSink.delta(replicaId, d);
    },
    forget: (replicaId: string): void => {
      for (const s of sessions) s.kvSink.forget(replicaId);
    },
  };
  const agent = new NodeAgent({
    node: node.name,
    advertiseAddr: node.addr,
    config: config.agent,
    engines: registryOf(config),
    host,
    kvSink,
    inFlight: o.inFlight,
    openKvStream: o.openKvStream,
    log: log.child({ subsystem: 'agent' }),
    board: o.board,
  });
  let last = '';
  const report = (): void => {
    const ready = readyStates(agent);
    // The root actor's phase says nothing an operator needs; the shards, streams and replicas do.
    const actors = agent.board
      .actors()
      .filter((a) => a.kind !== 'node')
      .map((a) => ({ actor: a.id, phase: a.phase, reason: a.reason, since: a.since, parent: a.parent }));
    const key = JSON.stringify([ready, actors]);
    if (key === last) return;
    last = key;
    for (const s of sessions) s.setReplicas(ready, actors);
  };
  const unsubscribe = agent.onChange(report);
  return {
    agent,
    sessions,
    tick: () => {
      for (const s of sessions) s.heartbeat();
      report();
    },
    close: async () => {
      unsubscribe();
      if (started) await agent.close();
    },
  };
}

/** An in-order, asynchronous hand-over between the two ends in one process: like the link, a reply
 * never runs inside the call that caused it. */
export function inProcessPipe<M>(deliver: (m: M) => void): (m: M) => void {
  return (m) => queueMicrotask(() => deliver(m));
}

/**
 * What a node of the cluster runs, as the gateway's actor board shows it: the node, by its link
 * state, and while it is up each actor it reported (a silent node's last word may be stale).
 */
export function reportedActors(n: NodeStatus): ReportedActor[] {
  const why = n.state === 'up' ? undefined : n.state === 'waiting' ? 'not joined yet' : 'no word within cluster.silent_after_ms: its replicas are out of routing';
  const node: ReportedActor = { id: `node:${n.name}`, parent: undefined, phase: n.state, since: undefined, reason: why };
  if (n.state !== 'up') return [node];
  return [node, ...n.actors.map((a) => ({ id: a.actor, parent: a.parent, phase: a.phase, since: a.since, reason: a.reason }))];
}
