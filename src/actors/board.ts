// The live picture of every actor (nodes, replicas, shards, publishers) for the debug page and
// `llmgw ctl status`: fed the inspector's public records (and, at a gateway, what remote nodes report
// of theirs), it keeps each actor's current state, the phase it reports, since when, why, and its
// recent transitions with the events that caused them.
import { agentMachine } from './agent-machine.js';
import { chartOf, type Chart } from './chart.js';
import { drawnCharts } from './chart-thread.js';
import type { EventRecord, InspectRecord, SnapshotRecord } from './inspect.js';
import { publisherMachine } from './publisher-machine.js';
import { replicaMachine, replicaPhaseOf } from './replica-machine.js';
import { shardMachine, shardPhaseOf } from './shard-machine.js';

/** The kinds of actor llmgw runs; a node is the root of its replicas. */
export const actorKinds = ['node', 'replica', 'shard', 'publisher'] as const;

/** One kind of actor. */
export type ActorKind = (typeof actorKinds)[number];

/** The machine of each kind, as the runtime runs it: what `llmgw viz` and the page draw. */
export const machinesByKind = { node: agentMachine, replica: replicaMachine, shard: shardMachine, publisher: publisherMachine } as const;

/** The chart of every kind of machine, keyed by machine id. */
export function allCharts(): Chart[] {
  return actorKinds.map((k) => chartOf(machinesByKind[k]));
}

/** One change of phase, with the event that caused it and the reason the actor gave. */
export interface ActorTransition {
  readonly at: number;
  readonly from: string | undefined;
  readonly to: string;
  /** The state the machine entered (its full path), finer than the phase. */
  readonly state: string;
  readonly event: string | undefined;
  readonly reason: string | undefined;
}

/** An actor as the page and `ctl status` show it: plain data. */
export interface ActorView {
  /** System id: `node:<name>`, `replica:<id>`, `shard:<id>`, `publisher:<replica id>`. */
  readonly id: string;
  readonly kind: ActorKind;
  readonly machine: string;
  /** The actor this one belongs to (a shard's replica, a replica's node). */
  readonly parent: string | undefined;
  /** Every active state path, outermost first (`running`, `running.loading`, `running.loading.probing`). */
  readonly states: readonly string[];
  /** The state in ARCHITECTURE's words (`loading`), what tables show. */
  readonly phase: string;
  readonly status: SnapshotRecord['status'];
  /** When it entered this phase (ms since the epoch). */
  readonly since: number;
  /** Why it is in this phase, one short line; belongs to the phase and goes with it. */
  readonly reason: string | undefined;
  /** The rest of the reason (the command line, advice): what the details view and `ctl status -v` show. */
  readonly detail: string | undefined;
  /** Recent phase changes, oldest first. */
  readonly transitions: readonly ActorTransition[];
}

const MAX_TRANSITIONS = 20;

/** An actor another process runs, as its node reported it over the link. */
export interface ReportedActor {
  readonly id: string;
  readonly parent: string | undefined;
  readonly phase: string;
  /** When it entered this phase, on this process's clock; undefined: when this board first saw the phase. */
  readonly since: number | undefined;
  readonly reason: string | undefined;
}

/** The innermost state name of a state value ({ open: 'streaming' } is "streaming"). */
export function leafOf(v: unknown): string {
  if (typeof v === 'string') return v;
  if (typeof v !== 'object' || v === null) return String(v);
  const [first] = Object.entries(v);
  return first === undefined ? '' : leafOf(first[1]);
}

/** The phase an actor of `machine` reports for a state value: each machine's one list of phase names decides. */
export function phaseOf(machine: string, value: unknown): string {
  if (machine === shardMachine.id) return shardPhaseOf(value);
  if (machine === replicaMachine.id) return replicaPhaseOf(value);
  return leafOf(value);
}

/** Every active state path of a state value, outermost first. */
export function statePaths(v: unknown, prefix = ''): string[] {
  if (typeof v === 'string') return [prefix === '' ? v : `${prefix}.${v}`];
  if (typeof v !== 'object' || v === null) return [];
  return Object.entries(v).flatMap(([k, x]) => {
    const p = prefix === '' ? k : `${prefix}.${k}`;
    return [p, ...statePaths(x, p)];
  });
}

/** XState's internal event types in a reader's words: `after loadTimeout`, `done probeHealth`. */
export function eventWords(type: string): string {
  const after = /^xstate\.after\.([^.]+)\./.exec(type);
  if (after?.[1] !== undefined) return `after ${after[1]}`;
  const done = /^xstate\.(done|error)\.actor\.(?:\d+\.)?(.*)$/.exec(type);
  if (done?.[1] !== undefined) return `${done[1]} ${done[2] ?? ''}`.trim();
  return type;
}

/**
 * What caused a phase change, from the last event the actor received: a replica moves on the
 * `shards.<phase>` it raises itself when a shard's snapshot arrives, so that shard is named.
 */
function causeOf(last: string | undefined, first: boolean, phase: string): string | undefined {
  if (first) return 'start';
  if (last?.startsWith('xstate.snapshot.') === true) return `shards.${phase} (shard:${last.slice('xstate.snapshot.'.length)})`;
  return last;
}

const kindOf = (id: string): ActorKind | undefined => actorKinds.find((k) => id.startsWith(`${k}:`));

function field(o: unknown, key: string): unknown {
  if (typeof o !== 'object' || o === null || !(key in o)) return undefined;
  const v: unknown = Reflect.get(o, key);
  return v;
}

function parentOf(kind: ActorKind, context: unknown): string | undefined {
  const text = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
  if (kind === 'shard') {
    const id = text(field(field(context, 'spec'), 'replicaId'));
    return id === undefined ? undefined : `replica:${id}`;
  }
  if (kind === 'publisher') {
    const id = text(field(context, 'replicaId'));
    return id === undefined ? undefined : `replica:${id}`;
  }
  if (kind === 'replica') {
    const node = text(field(context, 'node'));
    return node === undefined ? undefined : `node:${node}`;
  }
  return undefined;
}

/** The board: `record` every public inspection record; read `actors()`, or `subscribe` to changes. */
export class ActorBoard {
  readonly #actors = new Map<string, ActorView>();
  readonly #lastEvent = new Map<string, string>();
  readonly #listeners = new Set<(a: ActorView) => void>();
  // Actors other processes run: the node that reported each.
  readonly #reportedBy = new Map<string, string>();
  readonly #tail: (shardId: string) => readonly string[];

  constructor(o: { tail?: (shardId: string) => readonly string[] } = {}) {
    this.#tail = o.tail ?? (() => []);
  }

  /** Takes one record (already public: secrets removed). */
  record(r: InspectRecord): void {
    if (r.kind === 'event') this.#onEvent(r);
    else this.#onSnapshot(r);
  }

  #onEvent(r: EventRecord): void {
    const type = r.event.type;
    if (typeof type === 'string' && kindOf(r.actor) !== undefined) this.#lastEvent.set(r.actor, eventWords(type));
  }

  #onSnapshot(r: SnapshotRecord): void {
    const kind = kindOf(r.actor);
    if (kind === undefined) return;
    const before = this.#actors.get(r.actor);
    const phase = r.status === 'done' || r.status === 'stopped' ? 'stopped' : phaseOf(r.machine, r.value);
    const reason = field(r.context, 'reason');
    const detail = field(r.context, 'detail');
    this.#show({
      id: r.actor,
      kind,
      machine: r.machine,
      parent: parentOf(kind, r.context) ?? before?.parent,
      states: statePaths(r.value),
      phase,
      status: r.status,
      reason: typeof reason === 'string' ? reason : undefined,
      detail: typeof detail === 'string' ? detail : undefined,
      at: r.at,
      event: causeOf(this.#lastEvent.get(r.actor), before === undefined, phase),
    });
  }

  #show(v: Omit<ActorView, 'since' | 'transitions'> & { readonly at: number; readonly event: string | undefined }): void {
    const before = this.#actors.get(v.id);
    const moved = before?.phase !== v.phase;
    const transitions = moved
      ? [...(before?.transitions ?? []), { at: v.at, from: before?.phase, to: v.phase, state: v.states.at(-1) ?? v.phase, event: v.event, reason: v.reason }].slice(-MAX_TRANSITIONS)
      : (before?.transitions ?? []);
    const view: ActorView = {
      id: v.id,
      kind: v.kind,
      machine: v.machine,
      parent: v.parent,
      states: v.states,
      phase: v.phase,
      status: v.status,
      since: moved ? v.at : (before?.since ?? v.at),
      reason: v.reason,
      detail: v.detail,
      transitions,
    };
    const same = before !== undefined && !moved && before.reason === view.reason && before.detail === view.detail && before.states.join() === view.states.join() && before.status === view.status;
    this.#actors.set(v.id, view);
    if (same) return;
    for (const l of this.#listeners) l(view);
  }

  /**
   * Shows what `node` runs in another process, as it reported it: replaces its previous report, and
   * an actor it no longer reports (its node went silent, or dropped it) turns `unknown`. A node's
   * report never replaces an actor this process runs or another node reported (while not unknown).
   */
  report(node: string, actors: readonly ReportedActor[], at = Date.now()): void {
    const nodeId = `node:${node}`;
    const reported = new Set(actors.map((a) => a.id));
    const shown = new Set<string>();
    for (const a of actors) {
      const kind = kindOf(a.id);
      const owner = this.#reportedBy.get(a.id);
      const held = owner === undefined ? this.#actors.has(a.id) : owner !== node && this.#actors.get(a.id)?.phase !== 'unknown';
      if (kind === undefined || held) continue;
      this.#reportedBy.set(a.id, node);
      shown.add(a.id);
      const parent = a.parent !== undefined && a.parent !== a.id && (reported.has(a.parent) || this.#actors.has(a.parent)) ? a.parent : kind === 'node' ? undefined : nodeId;
      this.#show({ id: a.id, kind, machine: machinesByKind[kind].id, parent, states: [a.phase], phase: a.phase, status: 'active', reason: a.reason, detail: undefined, at: a.since ?? at, event: `reported by ${nodeId}` });
    }
    for (const [id, owner] of this.#reportedBy) {
      const before = this.#actors.get(id);
      if (owner !== node || shown.has(id) || before === undefined || before.phase === 'unknown') continue;
      this.#show({ ...before, states: ['unknown'], phase: 'unknown', reason: `${nodeId} no longer reports it`, at, event: `reported by ${nodeId}` });
    }
  }

  /** Every actor known, nodes first, then by id. */
  actors(): ActorView[] {
    const rank = (a: ActorView): number => actorKinds.indexOf(a.kind);
    return [...this.#actors.values()].sort((a, b) => rank(a) - rank(b) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  /** One actor, if known. */
  get(id: string): ActorView | undefined {
    return this.#actors.get(id);
  }

  /** Calls `listener` with each actor whose state, phase or reason changed; returns the unsubscribe. */
  subscribe(listener: (a: ActorView) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Each machine drawn as SVG, keyed by machine id (drawn once, off the event loop: the definitions do not change). */
  charts(): Promise<Readonly<Record<string, string>>> {
    return drawnCharts();
  }

  /** The last lines of a shard's log (`shard:<id>`); nothing for other actors. */
  tail(actor: string): readonly string[] {
    return actor.startsWith('shard:') ? this.#tail(actor.slice('shard:'.length)) : [];
  }
}
