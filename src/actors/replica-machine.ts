// One replica's shards on this node (its leader and workers) as one routable unit. Its state is
// derived from its shards' states: ready only when every shard is ready, failed while any is, so the
// router sees one answer per replica and never a half-started one.
import { assign, enqueueActions, setup, type SnapshotFrom } from 'xstate';
import { publisherMachine, type PublisherInput } from './publisher-machine.js';
import { shardMachine, shardPhase, type ShardInput, type ShardPhase } from './shard-machine.js';

/** What the agent decides for a replica: plain data. */
export interface ReplicaInput {
  readonly replicaId: string;
  /** The node that runs it, as the gateway knows it. */
  readonly node: string;
  /** The served model name clients ask for. */
  readonly model: string;
  readonly adapters: readonly string[];
  /** Base URL of the leader's OpenAI server; undefined when the leader runs on another node. */
  readonly url: string | undefined;
  /** The key the leader demands (its VLLM_API_KEY); the router sends it upstream. */
  readonly apiKey: string;
  readonly kvEvents: boolean;
  readonly blockSizeTokens: number;
  readonly hashSeed: string;
  readonly dataParallelSize: number;
  /** Its engine schedules by a request's priority. */
  readonly schedulesByPriority?: boolean | undefined;
  /** Fingerprint of the shards' specs and commands: a change means drain and start again. */
  readonly fingerprint: string;
  readonly shards: readonly ShardInput[];
  /** The leader's event stream, when it publishes KV events to this node. */
  readonly publisher: PublisherInput | undefined;
  /** Left running by a previous agent with a spec that has changed since: taken back only to be drained. */
  readonly retire: boolean;
}

/** What the replica keeps of each shard's snapshot. */
export interface ShardView {
  readonly phase: ShardPhase;
  readonly rank: number;
  readonly routable: boolean;
  readonly reason: string | undefined;
  readonly restarts: number;
  readonly adopted: boolean;
}

/** The replica's context. */
export interface ReplicaContext extends ReplicaInput {
  readonly shardViews: Readonly<Record<string, ShardView>>;
  /** Bumped every time the replica becomes ready, so the gateway forgets what a previous run cached. */
  readonly generation: number;
  /** What the shards add up to as last raised (`shards.<phase>`); the replica's state follows it except while draining. */
  readonly shardsPhase: ReplicaPhase;
}

/** Every phase a replica reports: its states, the shard phases it can be in collapsed. */
export const replicaPhases = ['starting', 'waiting-for-leader', 'loading', 'adopted', 'ready', 'cpu-fallback', 'failed', 'draining', 'stopped'] as const;

/** A replica's phase. */
export type ReplicaPhase = (typeof replicaPhases)[number];

/** Collapses shard phases: a failure or a drain anywhere is the replica's; ready needs every shard. */
export function replicaPhase(views: readonly ShardView[]): ReplicaPhase {
  const has = (...ps: ShardPhase[]): boolean => views.some((v) => ps.includes(v.phase));
  if (views.length === 0 || views.every((v) => v.phase === 'stopped')) return 'stopped';
  if (has('failed')) return 'failed';
  if (has('draining', 'stopping', 'stopped')) return 'draining';
  if (has('cpu-fallback')) return 'cpu-fallback';
  if (views.every((v) => v.phase === 'ready')) return 'ready';
  if (has('waiting-for-leader')) return 'waiting-for-leader';
  if (has('loading', 'checking-devices')) return 'loading';
  if (has('adopted')) return 'adopted';
  return 'starting';
}

type ShardSnapshotEvent = { readonly type: `xstate.snapshot.${string}`; readonly snapshot: SnapshotFrom<typeof shardMachine> };
type ShardDoneEvent = { readonly type: `xstate.done.actor.${string}` };

/** What the shards, taken together, have just become: raised by the replica itself when the collapsed phase changes. */
export type ShardsEvent = { readonly type: `shards.${ReplicaPhase}` };

/** Events: commands from the agent, the shards' snapshots relayed by XState, and what they add up to. */
export type ReplicaEvent =
  | { readonly type: 'drain' }
  | { readonly type: 'stop' }
  | { readonly type: 'restart' }
  | ShardSnapshotEvent
  | ShardDoneEvent
  | ShardsEvent;

const snapshotPrefix = 'xstate.snapshot.';
const donePrefix = 'xstate.done.actor.';

function viewOf(s: SnapshotFrom<typeof shardMachine>): ShardView {
  return {
    phase: shardPhase(s),
    rank: s.context.spec.rank,
    routable: s.hasTag('routable'),
    reason: s.context.reason,
    restarts: s.context.restarts,
    adopted: s.context.adopted,
  };
}

/**
 * The replica machine. Its chart is driven by `shards.<phase>` events, raised when a shard's
 * snapshot changes what the shards add up to (`replicaPhase`), and by the agent's commands: a
 * failure anywhere fails it, every shard ready makes it ready, drain ends in stopped.
 */
export const replicaMachine = setup({
  types: {
    context: {} as ReplicaContext,
    events: {} as ReplicaEvent,
    input: {} as ReplicaInput,
    tags: {} as 'routable',
  },
  actors: { shard: shardMachine, publisher: publisherMachine },
  guards: {
    isRetiring: ({ context }) => context.retire,
    isAdopting: ({ context }) => context.shardsPhase === 'adopted',
  },
  actions: {
    startShards: enqueueActions(({ context, enqueue }) => {
      for (const s of context.shards) {
        enqueue.spawnChild('shard', { id: s.spec.shardId, systemId: `shard:${s.spec.shardId}`, input: s, syncSnapshot: true });
      }
      if (context.publisher !== undefined) {
        enqueue.spawnChild('publisher', { id: 'publisher', systemId: `publisher:${context.replicaId}`, input: context.publisher });
      }
    }),
    recordShard: enqueueActions(({ context, event, enqueue }) => {
      let id: string;
      let view: ShardView;
      if (event.type.startsWith(snapshotPrefix) && 'snapshot' in event) {
        id = event.type.slice(snapshotPrefix.length);
        view = viewOf(event.snapshot);
      } else if (event.type.startsWith(donePrefix)) {
        id = event.type.slice(donePrefix.length);
        const before = context.shardViews[id];
        if (before === undefined) return; // the publisher, or a shard this replica does not know
        view = { ...before, phase: 'stopped', routable: false };
      } else {
        return;
      }
      const before = context.shardViews[id];
      if (before === undefined) return;
      // The leader's engine died: its event sequence will start over, and its blocks are gone now.
      if (view.rank === 0 && view.phase === 'failed' && before.phase !== 'failed' && context.publisher !== undefined) {
        enqueue.sendTo('publisher', { type: 'engine.restarted', detail: view.reason ?? 'leader shard failed' });
      }
      const shardViews = { ...context.shardViews, [id]: view };
      const phase = replicaPhase(Object.values(shardViews));
      enqueue.assign({ shardViews, shardsPhase: phase });
      if (phase !== context.shardsPhase) enqueue.raise({ type: `shards.${phase}` });
    }),
    drainShards: enqueueActions(({ context, enqueue }) => {
      for (const s of context.shards) enqueue.sendTo(s.spec.shardId, { type: 'drain' });
    }),
    stopShards: enqueueActions(({ context, enqueue }) => {
      for (const s of context.shards) enqueue.sendTo(s.spec.shardId, { type: 'stop' });
    }),
    restartShards: enqueueActions(({ context, enqueue }) => {
      for (const s of context.shards) enqueue.sendTo(s.spec.shardId, { type: 'restart' });
    }),
    bumpGeneration: assign({ generation: ({ context }) => context.generation + 1 }),
  },
}).createMachine({
  id: 'replica',
  initial: 'active',
  context: ({ input }) => {
    const shardViews = Object.fromEntries(
      input.shards.map((s): [string, ShardView] => [
        s.spec.shardId,
        { phase: s.adopt === undefined ? 'starting' : 'adopted', rank: s.spec.rank, routable: false, reason: undefined, restarts: 0, adopted: s.adopt !== undefined },
      ]),
    );
    return { ...input, shardViews, shardsPhase: replicaPhase(Object.values(shardViews)), generation: 0 };
  },
  entry: 'startShards',
  on: {
    'xstate.snapshot.*': { actions: 'recordShard' },
    'xstate.done.actor.*': { actions: 'recordShard' },
    'shards.stopped': { target: '.stopped' },
  },
  states: {
    // Up or on its way: whichever phase the shards reach, the replica follows.
    active: {
      initial: 'starting',
      on: {
        'shards.starting': { target: '.starting' },
        'shards.waiting-for-leader': { target: '.waiting-for-leader' },
        'shards.loading': { target: '.loading' },
        'shards.adopted': { target: '.adopted' },
        'shards.ready': { target: '.ready' },
        'shards.cpu-fallback': { target: '.cpu-fallback' },
        'shards.failed': { target: '.failed' },
        'shards.draining': { target: 'draining' },
        restart: { actions: 'restartShards' },
        drain: { target: 'draining', actions: 'drainShards' },
        stop: { target: 'draining', actions: 'stopShards' },
      },
      states: {
        starting: {
          // A replica taken back only to be retired drains at once; one adopted waits for its health.
          always: [
            { guard: 'isRetiring', target: '#replica.draining', actions: 'drainShards' },
            { guard: 'isAdopting', target: 'adopted' },
          ],
        },
        'waiting-for-leader': {},
        loading: {},
        adopted: {},
        // Bumped generation: the gateway forgets what a previous run of the engine had cached.
        ready: { tags: ['routable'], entry: 'bumpGeneration' },
        'cpu-fallback': {},
        failed: {},
      },
    },
    draining: {
      on: { drain: { actions: 'drainShards' }, stop: { actions: 'stopShards' } },
    },
    stopped: { type: 'final' },
  },
});

/** The phase of a replica state value, live or recorded: the state it is in, `active`'s child when active. */
export function replicaPhaseOf(value: unknown): ReplicaPhase {
  const key = typeof value === 'string' ? value : typeof value === 'object' && value !== null && 'active' in value ? value.active : undefined;
  return typeof key === 'string' && isReplicaPhase(key) ? key : 'starting';
}

const isReplicaPhase = (s: string): s is ReplicaPhase => (replicaPhases as readonly string[]).includes(s);
