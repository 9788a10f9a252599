// The node agent as the root machine: it owns the replicas placed on this node and starts, drains
// and replaces them as the desired set changes. A replica whose fingerprint changed is drained
// first and its successor started only once it has stopped, so the two never fight over ports.
import { assign, enqueueActions, setup } from 'xstate';
import { replicaMachine, type ReplicaInput } from './replica-machine.js';

/** The agent's context: which replica runs under which fingerprint, and successors waiting for a drain. */
export interface AgentContext {
  readonly node: string;
  readonly running: Readonly<Record<string, { readonly fingerprint: string; readonly draining: boolean }>>;
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

const donePrefix = 'xstate.done.actor.';

/** The node agent machine. */
export const agentMachine = setup({
  types: { context: {} as AgentContext, events: {} as AgentEvent, input: {} as { node: string } },
  actors: { replica: replicaMachine },
  guards: { nothingRunning: ({ context }) => Object.keys(context.running).length === 0 },
  actions: {
    reconcile: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== 'replicas.desired') return;
      const running: Record<string, { fingerprint: string; draining: boolean }> = { ...context.running };
      const next: Record<string, ReplicaInput> = { ...context.next };
      const start = (r: ReplicaInput): void => {
        enqueue.spawnChild('replica', { id: r.replicaId, systemId: `replica:${r.replicaId}`, input: r });
        running[r.replicaId] = { fingerprint: r.fingerprint, draining: r.retire };
      };
      for (const r of event.retiring) if (running[r.replicaId] === undefined) start(r);
      const wanted = new Set(event.replicas.map((r) => r.replicaId));
      for (const r of event.replicas) {
        const now = running[r.replicaId];
        if (now === undefined) start(r);
        else if (now.fingerprint !== r.fingerprint || now.draining) {
          next[r.replicaId] = r;
          if (!now.draining) {
            enqueue.sendTo(r.replicaId, { type: 'drain' });
            running[r.replicaId] = { ...now, draining: true };
          }
        } else delete next[r.replicaId];
      }
      for (const [id, now] of Object.entries(running)) {
        if (wanted.has(id)) continue;
        delete next[id];
        if (!now.draining) {
          enqueue.sendTo(id, { type: 'drain' });
          running[id] = { ...now, draining: true };
        }
      }
      enqueue.assign({ running, next });
    }),
    replicaEnded: enqueueActions(({ context, event, enqueue }) => {
      const id = event.type.startsWith(donePrefix) ? event.type.slice(donePrefix.length) : undefined;
      if (id === undefined || context.running[id] === undefined) return;
      const running = { ...context.running };
      const next = { ...context.next };
      delete running[id];
      enqueue.stopChild(id);
      const successor = next[id];
      if (successor !== undefined) {
        delete next[id];
        enqueue.spawnChild('replica', { id, systemId: `replica:${id}`, input: successor });
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
  id: 'agent',
  initial: 'running',
  context: ({ input }) => ({ node: input.node, running: {}, next: {} }),
  on: { 'xstate.done.actor.*': { actions: 'replicaEnded' } },
  states: {
    running: {
      on: {
        'replicas.desired': { actions: 'reconcile' },
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
