// An actor source for debug-endpoint tests: one shard, and a way to announce changes of it.
import type { ActorSource, DebugActor } from '../../src/gateway/index.js';

/** A shard of replica r0 in `phase` (sub-state `sub` when given). */
export const actor = (id: string, phase: string, sub?: string): DebugActor => ({
  id,
  kind: 'shard',
  machine: 'shard',
  parent: 'replica:r0',
  states: ['running', `running.${phase}`, ...(sub === undefined ? [] : [`running.${phase}.${sub}`])],
  phase,
  status: 'active',
  since: 1,
  reason: undefined,
  detail: undefined,
  transitions: [],
});

/** The source, `emit` to announce a change, and its live listeners. */
export function fakeActors() {
  const listeners = new Set<(a: DebugActor) => void>();
  const source: ActorSource = {
    actors: () => [actor('shard:r0-s0', 'loading')],
    charts: () => Promise.resolve({ shard: '<svg xmlns="http://www.w3.org/2000/svg"><g class="state" data-state="running"></g></svg>' }),
    subscribe: (l) => {
      listeners.add(l);
      return () => listeners.delete(l);
    },
    tail: (id) => (id === 'shard:r0-s0' ? ['line 1', 'line 2'] : []),
  };
  return { source, emit: (a: DebugActor) => listeners.forEach((l) => l(a)), listeners };
}
