// The node agent as the root machine: it owns the replicas placed on this node and starts, drains
// and replaces them as the desired set changes. A replica whose fingerprint changed is drained
// first and its successor started only once it has stopped, so the two never fight over ports.
// What to start and drain is decided by `reconcile`, a pure function; the actions only carry it out.
import { assign, enqueueActions, setup } from 'xstate';
import { replicaMachine, type ReplicaInput } from './replica-machine.js';

/** A replica the agent runs: the fingerprint it was started with, and whether it was told to drain. */
export interface RunningReplica {
  readonly fingerprint: string;
  readonly draining: boolean;
}

/** The agent's context: which replica runs under which fingerprint, and successors waiting for a drain. */
export interface AgentContext {
  readonly node: string;
  readonly running: Readonly<Record<string, RunningReplica>>;
  readonly next: Readonly<Record<string, ReplicaInput>>;
}

/** Events: the desired set and lifecycle commands, and replicas ending. */
export type AgentEvent =
  | {
      readonly type: 'replicas.desired';
      readonly replicas: readonly ReplicaInput[];
      /** Left running by a previous agent under a spec that changed: taken back to be drained. */
      readonly retiring: readonly ReplicaInput[];
    }
  | { readonly type: 'drain' }
  | { readonly type: 'stop' }
  /** Retry the shards of a replica that gave up after too many restarts. */
  | { readonly type: 'restart'; readonly replicaId: string }
  | { readonly type: `xstate.done.actor.${string}` };

/** What reconciling a desired set decides: replicas to start now, to drain, and the new bookkeeping. */
export interface Reconciled {
  readonly start: readonly ReplicaInput[];
  readonly drain: readonly string[];
  readonly running: Readonly<Record<string, RunningReplica>>;
  readonly next: Readonly<Record<string, ReplicaInput>>;
}

/**
 * Compares the desired replicas with the running ones: new ones start; a changed or draining one
 * drains and its successor waits in `next`; one no longer wanted drains with no successor.
 */
export function reconcile(
  now: Pick<AgentContext, 'running' | 'next'>,
  desired: readonly ReplicaInput[],
  retiring: readonly ReplicaInput[],
): Reconciled {
  const running: Record<string, RunningReplica> = { ...now.running };
  const next: Record<string, ReplicaInput> = { ...now.next };
  const start: ReplicaInput[] = [];
  const drain: string[] = [];
  const startOne = (r: ReplicaInput): void => {
    start.push(r);
    running[r.replicaId] = { fingerprint: r.fingerprint, draining: r.retire };
  };
  const drainOne = (id: string, r: RunningReplica): void => {
    if (r.draining) return;
    drain.push(id);
    running[id] = { ...r, draining: true };
  };
  for (const r of retiring) if (running[r.replicaId] === undefined) startOne(r);
  const wanted = new Set(desired.map((r) => r.replicaId));
  for (const r of desired) {
    const was = running[r.replicaId];
    if (was === undefined) startOne(r);
    else if (was.fingerprint !== r.fingerprint || was.draining) {
      next[r.replicaId] = r;
      drainOne(r.replicaId, was);
    } else delete next[r.replicaId];
  }
  for (const [id, was] of Object.entries(running)) {
    if (wanted.has(id)) continue;
    delete next[id];
    drainOne(id, was);
  }
  return { start, drain, running, next };
}

const donePrefix = 'xstate.done.actor.';
const spawnReplica = (r: ReplicaInput) => ['replica', { id: r.replicaId, systemId: `replica:${r.replicaId}`, input: r }] as const;

/** The node agent machine: its actor is the node, with system id `node:<name>`. */
export const agentMachine = setup({
  types: { context: {} as AgentContext, events: {} as AgentEvent, input: {} as { node: string } },
  actors: { replica: replicaMachine },
  guards: { nothingRunning: ({ context }) => Object.keys(context.running).length === 0 },
  actions: {
    applyDesired: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== 'replicas.desired') return;
      const r = reconcile(context, event.replicas, event.retiring);
      for (const s of r.start) enqueue.spawnChild(...spawnReplica(s));
      for (const id of r.drain) enqueue.sendTo(id, { type: 'drain' });
      enqueue.assign({ running: r.running, next: r.next });
    }),
    // A replica ended: forget it, and start the successor that waited for its ports.
    replaceEnded: enqueueActions(({ context, event, enqueue }) => {
      const id = event.type.startsWith(donePrefix) ? event.type.slice(donePrefix.length) : undefined;
      if (id === undefined || context.running[id] === undefined) return;
      const running = { ...context.running };
      const next = { ...context.next };
      delete running[id];
      enqueue.stopChild(id);
      const successor = next[id];
      if (successor !== undefined) {
        delete next[id];
        enqueue.spawnChild(...spawnReplica(successor));
        running[id] = { fingerprint: successor.fingerprint, draining: false };
      }
      enqueue.assign({ running, next });
    }),
    drainAll: enqueueActions(({ context, enqueue }) => {
      for (const id of Object.keys(context.running)) enqueue.sendTo(id, { type: 'drain' });
    }),
    stopAll: enqueueActions(({ context, enqueue }) => {
      for (const id of Object.keys(context.running)) enqueue.sendTo(id, { type: 'stop' });
    }),
    forgetSuccessors: assign({ next: () => ({}) }),
    restartReplica: enqueueActions(({ context, event, enqueue }) => {
      if (event.type === 'restart' && context.running[event.replicaId] !== undefined) enqueue.sendTo(event.replicaId, { type: 'restart' });
    }),
  },
}).createMachine({
  id: 'node',
  initial: 'running',
  context: ({ input }) => ({ node: input.node, running: {}, next: {} }),
  on: { 'xstate.done.actor.*': { actions: 'replaceEnded' } },
  states: {
    running: {
      on: {
        'replicas.desired': { actions: 'applyDesired' },
        restart: { actions: 'restartReplica' },
        drain: { target: 'draining' },
        stop: { target: 'draining', actions: 'stopAll' },
      },
    },
    // Shutting down: no replica starts again; a second signal stops everything at once.
    draining: {
      entry: ['forgetSuccessors', 'drainAll'],
      always: { guard: 'nothingRunning', target: 'stopped' },
      on: { stop: { actions: 'stopAll' }, drain: { actions: 'stopAll' } },
    },
    stopped: { type: 'final' },
  },
});
