// One shard of one replica: its processes from spawn to stop, as an XState machine. The processes
// are one resource invoked on `running`, so moving between starting, loading, ready and draining
// never touches them; only leaving `running` (failure, stop) ends them. Every wait the shard makes
// (health polling, the adoption check, backoff, idle polling) is a named delay of this chart, so a
// SimulatedClock drives all of it; every effect is an invoked actor.
import { closeSync } from 'node:fs';
import { assign, enqueueActions, fromCallback, fromPromise, not, raise, sendTo, setup, type SnapshotFrom } from 'xstate';
import type { Command, ShardSpec } from '../engines/index.js';
import { backoffMs, drawJitter } from './backoff.js';
import type { RestartPolicy, ShardTiming } from './config.js';
import {
  exitReason,
  isAlive,
  openLog,
  probeOnce,
  readTail,
  runForOutput,
  signalAndWait,
  signalGroup,
  spawnCommand,
  waitForTcp,
  type ProcessExit,
  type ProcessRecord,
} from './processes.js';

/** What the agent decides for a shard before it starts: plain data, so it persists and inspects. */
export interface ShardInput {
  readonly spec: ShardSpec;
  readonly commands: readonly Command[];
  /** Only ranks that answer the API are health-checked: probing a Ray worker's port fails a healthy replica. */
  readonly servesHttp: boolean;
  /** Full URL of the health path; undefined for a rank that does not serve HTTP. */
  readonly healthUrl: string | undefined;
  /** The engine's device listing, run once it answers, for an engine that can silently fall back to the CPU. */
  readonly deviceCheck: Command | undefined;
  readonly logPath: string;
  readonly policy: RestartPolicy;
  readonly timing: ShardTiming;
  readonly tailLines: number;
  /** Processes left running by a previous agent, taken back instead of started. */
  readonly adopt: readonly ProcessRecord[] | undefined;
  /** Seed of the restart jitter: drawn once by the agent, so the machine itself draws nothing. */
  readonly jitterSeed: number;
}

/** The shard machine's context: the input plus what it learned. No handles: it serializes. */
export interface ShardContext extends ShardInput {
  readonly processes: readonly ProcessRecord[];
  /** Whether the running processes were adopted rather than started by this agent. */
  readonly adopted: boolean;
  /** Restarts still inside the restart window. */
  readonly restarts: number;
  readonly backoffMs: number;
  /** State of the jitter generator: advances with every backoff drawn. */
  readonly jitter: number;
  /** Failed health probes of a ready shard in a row. */
  readonly healthFailures: number;
  /**
   * Why the shard is failed or in cpu-fallback, in one short line (what died, how, the engine's last
   * output line); cleared when it moves on, so a starting shard shows no old failure.
   */
  readonly reason: string | undefined;
  /** The rest of the reason for the details view: the command line and the error as it came. */
  readonly detail: string | undefined;
  /** The last lines of the shard's output when it failed. */
  readonly tail: readonly string[];
  /** GPUs the engine's device listing named; undefined until listed. */
  readonly devices: readonly string[] | undefined;
}

/** Events: facts as `subject.past`, commands as verbs. */
export type ShardEvent =
  | { readonly type: 'process.spawned'; readonly record: ProcessRecord }
  | { readonly type: 'processes.started' }
  | { readonly type: 'leader.awaited' }
  | { readonly type: 'process.exited'; readonly exit: ProcessExit; readonly sidecar: boolean; readonly tail: readonly string[] }
  | { readonly type: 'restart.expired' }
  /** Time to look whether adopted processes still run (they are not our children: no exit event comes). */
  | { readonly type: 'adoption.check' }
  | { readonly type: 'drain' }
  | { readonly type: 'stop' }
  /** An operator's retry of a shard that gave up; ignored in every other state. */
  | { readonly type: 'restart' };

/** What the shard machine tells its processes actor. */
export type ProcessesCommand = { readonly type: 'leader.reachable' } | { readonly type: 'processes.check' };

const LIST_DEVICES_TIMEOUT_MS = 60_000;

/**
 * Spawns the shard's Commands in order, or watches adopted ones, and reports their ends; cleanup
 * kills the groups. An adopted process is not our child, so nothing tells us it ended: the machine
 * asks (`processes.check`) on its `adoptionPoll` delay and this actor looks.
 */
export const superviseProcesses = fromCallback<ProcessesCommand, ShardContext, ShardEvent>(({ input, sendBack, receive }) => {
  let ended = false;
  const groups: ProcessRecord[] = [];
  let release: (() => void) | undefined;
  const tail = (): readonly string[] => readTail(input.logPath, input.tailLines);
  receive((e) => {
    if (e.type === 'leader.reachable') release?.();
    if (e.type !== 'processes.check' || input.adopt === undefined || ended) return;
    const gone = input.adopt.find((p) => !isAlive(p));
    if (gone === undefined) return;
    ended = true;
    const message = `${gone.name} (pid ${gone.pid}) is no longer running`;
    const exit: ProcessExit = { name: gone.name, pid: gone.pid, exitCode: undefined, signal: undefined, message, detail: `${message}; it was adopted, so its exit code is its old parent's to see` };
    sendBack({ type: 'process.exited', exit, sidecar: gone !== input.adopt.at(-1), tail: tail() });
  });
  const holdForLeader = (): Promise<void> =>
    new Promise<void>((resolve) => {
      release = resolve;
      sendBack({ type: 'leader.awaited' });
    });

  if (input.adopt !== undefined) {
    groups.push(...input.adopt);
  } else {
    const isLeader = input.spec.rank === 0;
    const run = async (): Promise<void> => {
      const fd = openLog(input.logPath);
      try {
        for (const [i, cmd] of input.commands.entries()) {
          const last = i === input.commands.length - 1;
          // A Ray worker dials the head: starting it before the head listens makes it give up.
          if (cmd.waitForLeaderPort && !isLeader) await holdForLeader();
          if (ended) return;
          const s = spawnCommand(cmd, fd);
          groups.push(s.record);
          sendBack({ type: 'process.spawned', record: s.record });
          void s.exited.then((exit) => {
            // Once the shard is leaving `running` an exit is expected, not a failure.
            if (!ended) sendBack({ type: 'process.exited', exit, sidecar: !last, tail: tail() });
          });
          // The head must listen before the server can claim GPUs through it.
          if (cmd.waitForLeaderPort && isLeader && !last) await holdForLeader();
          if (ended) return;
        }
        sendBack({ type: 'processes.started' });
      } finally {
        closeSync(fd);
      }
    };
    run().catch((e: unknown) => {
      if (ended) return;
      const message = `could not start: ${e instanceof Error ? e.message : String(e)}`;
      const exit: ProcessExit = { name: 'spawn', pid: -1, exitCode: undefined, signal: undefined, message, detail: message };
      sendBack({ type: 'process.exited', exit, sidecar: false, tail: tail() });
    });
  }
  return () => {
    ended = true;
    release?.();
    // Whatever is still running when the shard leaves `running` dies with it: nothing is orphaned.
    for (const p of groups) if (isAlive(p) || input.adopt === undefined) signalGroup(p.pid, 'SIGKILL');
  };
});

/** Resolves once leaderAddr:leaderPort accepts a connection; the state's `leaderTimeout` bounds it. */
export const waitForLeaderPort = fromPromise<void, { host: string; port: number }>(async ({ input, signal }) => {
  await waitForTcp(input.host, input.port, { signal });
});

/** One health probe: the HTTP status, 0 when nothing answered. The chart decides when to probe again. */
export const probeHealth = fromPromise<number, { url: string | undefined; timeoutMs: number }>(async ({ input, signal }) => {
  if (input.url === undefined) return 200; // a rank that serves no HTTP: its process staying up is its health
  return (await probeOnce(input.url, { signal, timeoutMs: input.timeoutMs })) ?? 0;
});

/** The last lines of the shard's log, read once it failed, for the operator. */
export const readLogTail = fromPromise<readonly string[], { path: string; lines: number }>(async ({ input }) => readTail(input.path, input.lines));

/** Runs the engine's device listing; which lines are devices is the engine's business, so the agent provides the parser. */
export function listDevicesWith(parse: (engine: string, output: string) => readonly string[]) {
  return fromPromise<readonly string[], { engine: string; command: Command | undefined }>(async ({ input, signal }) => {
    if (input.command === undefined) return [];
    return parse(input.engine, await runForOutput(input.command, { signal, timeoutMs: LIST_DEVICES_TIMEOUT_MS }));
  });
}

/** Counts the replica's requests in flight (the router's count); draining asks again on its `idlePoll` delay. */
export function countInFlightWith(inFlight: (replicaId: string) => number) {
  return fromPromise<number, { replicaId: string }>(async ({ input }) => inFlight(input.replicaId));
}

/** Signals every process group of the shard and waits until all are gone. */
export const signalProcesses = fromPromise<void, { processes: readonly ProcessRecord[]; signal: NodeJS.Signals }>(
  async ({ input, signal }) => {
    await signalAndWait(input.processes, input.signal, { signal });
  },
);

function initialContext(input: ShardInput): ShardContext {
  return {
    ...input,
    processes: input.adopt ?? [],
    adopted: input.adopt !== undefined,
    restarts: 0,
    backoffMs: 0,
    // A record written by an older agent has no seed; any non-zero start will do.
    jitter: (input.jitterSeed >>> 0) || 1,
    healthFailures: 0,
    reason: undefined,
    detail: undefined,
    tail: [],
    devices: undefined,
  };
}

const probeInput = ({ context }: { context: ShardContext }) => ({ url: context.healthUrl, timeoutMs: Math.max(1_000, context.timing.healthIntervalMs) });

/** The shard machine; see ARCHITECTURE "Actors" for what each state means. */
export const shardMachine = setup({
  types: {
    context: {} as ShardContext,
    events: {} as ShardEvent,
    input: {} as ShardInput,
    tags: {} as 'routable',
  },
  actors: {
    superviseProcesses,
    waitForLeaderPort,
    probeHealth,
    readLogTail,
    listDevices: listDevicesWith((engine) => {
      throw new Error(`engine ${engine} has no device listing parser; the agent provides one for engines that fall back to the CPU`);
    }),
    // Without the router's count nothing is known to be in flight: drain goes straight to stopping.
    countInFlight: countInFlightWith(() => 0),
    signalProcesses,
  },
  guards: {
    isAdopted: ({ context }) => context.adopt !== undefined,
    servesHttp: ({ context }) => context.servesHttp,
    needsDeviceCheck: ({ context }) => context.deviceCheck !== undefined,
    sawNoDevices: (_, p: { devices: readonly string[] }) => p.devices.length === 0,
    restartsLeft: ({ context }) => context.restarts < context.policy.maxRestarts,
    answered200: (_, p: { status: number }) => p.status === 200,
    notYet200: (_, p: { status: number }) => p.status !== 200,
    failuresLeft: ({ context }) => context.healthFailures + 1 < context.timing.healthFailures,
    isIdle: (_, p: { inFlight: number }) => p.inFlight === 0,
  },
  actions: {
    recordProcess: assign({
      processes: ({ context, event }) => (event.type === 'process.spawned' ? [...context.processes, event.record] : context.processes),
    }),
    recordExit: assign({
      reason: ({ event }) => (event.type === 'process.exited' ? `${event.sidecar ? 'sidecar ' : ''}${exitReason(event.exit.message, event.tail)}` : undefined),
      detail: ({ event }) =>
        event.type === 'process.exited' ? `${event.exit.detail}${event.sidecar ? '\na sidecar lives as long as its shard: its exit fails the shard' : ''}` : undefined,
      tail: ({ context, event }) => (event.type === 'process.exited' ? event.tail : context.tail),
    }),
    recordLeaderTimeout: assign({
      reason: ({ context: c }) => `leader ${c.spec.leaderAddr}:${c.spec.leaderPort} did not accept a connection within ${c.timing.leaderTimeoutMs} ms`,
      detail: () => 'check the leader shard is running and the port is open between the nodes',
    }),
    recordLoadTimeout: assign({
      reason: ({ context: c }) => `${c.healthUrl ?? 'health'} did not answer 200 within ${c.timing.loadTimeoutMs} ms`,
    }),
    countHealthFailure: assign({ healthFailures: ({ context }) => context.healthFailures + 1 }),
    resetHealthFailures: assign({ healthFailures: () => 0 }),
    recordUnhealthy: assign(({ context: c }, p: { status: number }) => ({
      reason: `health check ${c.healthUrl ?? ''} failed ${c.healthFailures} times in a row (last: ${p.status === 0 ? 'no answer' : `status ${p.status}`})`,
    })),
    recordTail: assign((_, p: { tail: readonly string[] }) => ({ tail: p.tail })),
    recordDevices: assign((_, p: { devices: readonly string[] }) => ({ devices: p.devices })),
    recordCpuFallback: assign({
      reason: ({ context }) => `serving on the CPU: placed on GPUs ${context.spec.gpuIndices.join(',')}, the engine lists no GPU device`,
      detail: () => 'install a GPU build of the engine (or the libraries its GPU backend links)',
    }),
    recordDeviceCheckError: assign((_, p: { error: unknown }) => ({
      reason: `device listing failed: ${p.error instanceof Error ? p.error.message : String(p.error)}`,
    })),
    releaseNextCommand: sendTo('processes', { type: 'leader.reachable' } satisfies ProcessesCommand),
    checkAdopted: sendTo('processes', { type: 'processes.check' } satisfies ProcessesCommand),
    scheduleAdoptionCheck: enqueueActions(({ context, enqueue }) => {
      if (context.adopt !== undefined) enqueue.raise({ type: 'adoption.check' }, { delay: 'adoptionPoll' });
    }),
    drawBackoff: assign(({ context }) => {
      const d = drawJitter(context.jitter);
      return { backoffMs: backoffMs(context.restarts, context.policy, d.random), jitter: d.state };
    }),
    countRestart: assign({
      restarts: ({ context }) => context.restarts + 1,
      processes: () => [],
      adopt: () => undefined,
      adopted: () => false,
      devices: () => undefined,
    }),
    forgetRestartLater: raise({ type: 'restart.expired' }, { delay: 'restartWindow' }),
    forgetRestart: assign({ restarts: ({ context }) => Math.max(0, context.restarts - 1) }),
    forgetAllRestarts: assign({ restarts: () => 0, processes: () => [], adopt: () => undefined, adopted: () => false, devices: () => undefined }),
    clearReason: assign({ reason: () => undefined, detail: () => undefined, tail: () => [] }),
  },
  delays: {
    leaderTimeout: ({ context }) => context.timing.leaderTimeoutMs,
    loadTimeout: ({ context }) => context.timing.loadTimeoutMs,
    drainTimeout: ({ context }) => context.timing.drainTimeoutMs,
    killAfter: ({ context }) => context.timing.killAfterMs,
    healthInterval: ({ context }) => context.timing.healthIntervalMs,
    restartBackoff: ({ context }) => context.backoffMs,
    restartWindow: ({ context }) => context.policy.windowMs,
    // Adopted processes are not our children: nothing reports their end, so we look this often.
    adoptionPoll: 500,
    idlePoll: 100,
  },
}).createMachine({
  id: 'shard',
  initial: 'running',
  context: ({ input }) => initialContext(input),
  on: { 'restart.expired': { actions: 'forgetRestart' } },
  states: {
    running: {
      initial: 'starting',
      entry: 'scheduleAdoptionCheck',
      invoke: { id: 'processes', src: 'superviseProcesses', input: ({ context }) => context },
      on: {
        'process.spawned': { actions: 'recordProcess' },
        'process.exited': { target: 'failed', actions: 'recordExit' },
        'adoption.check': { guard: 'isAdopted', actions: ['checkAdopted', 'scheduleAdoptionCheck'] },
        stop: { target: '.stopping' },
      },
      states: {
        starting: {
          always: { guard: 'isAdopted', target: 'adopted' },
          on: {
            'leader.awaited': { target: 'waiting-for-leader' },
            'processes.started': [{ guard: 'servesHttp', target: 'loading' }, { target: 'ready' }],
            drain: { target: 'stopping' },
          },
        },
        'waiting-for-leader': {
          invoke: {
            id: 'waitForLeaderPort',
            src: 'waitForLeaderPort',
            input: ({ context }) => ({ host: context.spec.leaderAddr, port: context.spec.leaderPort }),
            onDone: { target: 'starting', actions: 'releaseNextCommand' },
          },
          after: { leaderTimeout: { target: '#shard.failed', actions: 'recordLeaderTimeout' } },
          on: { drain: { target: 'stopping' } },
        },
        // Probe, and if the answer is not 200 yet (503 while the weights load, or nothing), rest one
        // health interval and probe again, until `loadTimeout`.
        loading: {
          initial: 'probing',
          after: { loadTimeout: { target: '#shard.failed', actions: 'recordLoadTimeout' } },
          on: { drain: { target: 'stopping' } },
          states: {
            probing: {
              invoke: {
                id: 'probeHealth',
                src: 'probeHealth',
                input: probeInput,
                onDone: [
                  { guard: { type: 'notYet200', params: ({ event }) => ({ status: event.output }) }, target: 'resting' },
                  { guard: 'needsDeviceCheck', target: '#shard.running.checking-devices' },
                  { target: '#shard.running.ready' },
                ],
              },
            },
            resting: { after: { healthInterval: { target: 'probing' } } },
          },
        },
        'checking-devices': {
          invoke: {
            id: 'listDevices',
            src: 'listDevices',
            input: ({ context }) => ({ engine: context.spec.profile.engine, command: context.deviceCheck }),
            onDone: [
              {
                guard: { type: 'sawNoDevices', params: ({ event }) => ({ devices: event.output }) },
                target: 'cpu-fallback',
                actions: [{ type: 'recordDevices', params: ({ event }) => ({ devices: event.output }) }, 'recordCpuFallback'],
              },
              { target: 'ready', actions: { type: 'recordDevices', params: ({ event }) => ({ devices: event.output }) } },
            ],
            onError: { target: '#shard.failed', actions: { type: 'recordDeviceCheckError', params: ({ event }) => ({ error: event.error }) } },
          },
          on: { drain: { target: 'stopping' } },
        },
        // Taken back from a previous agent: routable again once it answers, never restarted for it.
        adopted: {
          initial: 'probing',
          after: { loadTimeout: { target: '#shard.failed', actions: 'recordLoadTimeout' } },
          on: { drain: { target: 'draining' } },
          states: {
            probing: {
              invoke: {
                id: 'probeHealth',
                src: 'probeHealth',
                input: probeInput,
                onDone: [{ guard: { type: 'notYet200', params: ({ event }) => ({ status: event.output }) }, target: 'resting' }, { target: '#shard.running.ready' }],
              },
            },
            resting: { after: { healthInterval: { target: 'probing' } } },
          },
        },
        // Probed every health interval; `health_failures` bad answers in a row fail it.
        ready: {
          tags: ['routable'],
          entry: ['clearReason', 'resetHealthFailures'],
          initial: 'resting',
          on: { drain: { target: 'draining' } },
          states: {
            resting: { after: { healthInterval: { guard: 'servesHttp', target: 'probing' } } },
            probing: {
              invoke: {
                id: 'probeHealth',
                src: 'probeHealth',
                input: probeInput,
                onDone: [
                  { guard: { type: 'answered200', params: ({ event }) => ({ status: event.output }) }, target: 'resting', actions: 'resetHealthFailures' },
                  { guard: 'failuresLeft', target: 'resting', actions: 'countHealthFailure' },
                  { target: '#shard.failed', actions: ['countHealthFailure', { type: 'recordUnhealthy', params: ({ event }) => ({ status: event.output }) }] },
                ],
              },
            },
          },
        },
        'cpu-fallback': {
          on: { drain: { target: 'draining' } },
        },
        // Out of routing now (no 'routable' tag); requests already sent get `drainTimeout` to finish.
        draining: {
          initial: 'counting',
          after: { drainTimeout: { target: 'stopping' } },
          on: { 'process.exited': { target: 'stopping' } },
          states: {
            counting: {
              invoke: {
                id: 'countInFlight',
                src: 'countInFlight',
                input: ({ context }) => ({ replicaId: context.spec.replicaId }),
                onDone: [{ guard: { type: 'isIdle', params: ({ event }) => ({ inFlight: event.output }) }, target: '#shard.running.stopping' }, { target: 'waiting' }],
              },
            },
            waiting: { after: { idlePoll: { target: 'counting' } } },
          },
        },
        stopping: {
          initial: 'terminating',
          // Exits are what stopping is for: none of them is a failure.
          on: { 'process.exited': {}, drain: {} },
          states: {
            terminating: {
              invoke: {
                id: 'signalProcesses',
                src: 'signalProcesses',
                input: ({ context }) => ({ processes: context.processes, signal: 'SIGTERM' as const }),
                onDone: { target: '#shard.stopped' },
              },
              after: { killAfter: { target: 'killing' } },
              // A second stop does not wait for a graceful exit.
              on: { stop: { target: 'killing' } },
            },
            killing: {
              invoke: {
                id: 'signalProcesses',
                src: 'signalProcesses',
                input: ({ context }) => ({ processes: context.processes, signal: 'SIGKILL' as const }),
                onDone: { target: '#shard.stopped' },
              },
              on: { stop: {} },
            },
          },
        },
      },
    },
    failed: {
      initial: 'backoff',
      entry: 'drawBackoff',
      // The log's last lines, for the operator; read here, as a failure may come from a timeout of ours.
      invoke: {
        id: 'readLogTail',
        src: 'readLogTail',
        input: ({ context }) => ({ path: context.logPath, lines: context.tailLines }),
        onDone: { actions: { type: 'recordTail', params: ({ event }) => ({ tail: event.output }) } },
      },
      on: { drain: { target: 'stopped' }, stop: { target: 'stopped' } },
      states: {
        backoff: {
          always: { guard: not('restartsLeft'), target: 'given-up' },
          after: { restartBackoff: { target: '#shard.running', actions: ['countRestart', 'forgetRestartLater', 'clearReason'] } },
        },
        // Too many restarts inside the window: the reason and tail stay for the operator, who may retry.
        'given-up': { on: { restart: { target: '#shard.running', actions: ['forgetAllRestarts', 'clearReason'] } } },
      },
    },
    stopped: { type: 'final' },
  },
});

/** Every phase a shard reports, in ARCHITECTURE's words: the states of `running`, then failed and stopped. */
export const shardPhases = [
  'starting',
  'waiting-for-leader',
  'loading',
  'checking-devices',
  'adopted',
  'ready',
  'cpu-fallback',
  'draining',
  'stopping',
  'failed',
  'stopped',
] as const;

/** A shard's state as one word of ARCHITECTURE's vocabulary, for reports and the replica. */
export type ShardPhase = (typeof shardPhases)[number];

const isShardPhase = (s: string): s is ShardPhase => (shardPhases as readonly string[]).includes(s);

/**
 * The phase of a shard state value, live (`snapshot.value`) or recorded by the inspector: the
 * child of `running` it is in, else its top state. Sub-states (probing, resting) are not phases.
 */
export function shardPhaseOf(value: unknown): ShardPhase {
  if (typeof value === 'string') return isShardPhase(value) ? value : 'starting';
  if (typeof value !== 'object' || value === null) return 'starting';
  if ('failed' in value) return 'failed';
  if (!('running' in value)) return 'starting';
  const r = value.running;
  const key = typeof r === 'string' ? r : typeof r === 'object' && r !== null ? Object.keys(r)[0] : undefined;
  return key !== undefined && isShardPhase(key) ? key : 'starting';
}

/** The phase of a shard snapshot. */
export function shardPhase(s: SnapshotFrom<typeof shardMachine>): ShardPhase {
  return shardPhaseOf(s.value);
}
