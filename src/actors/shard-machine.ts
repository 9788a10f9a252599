// One shard of one replica: its processes from spawn to stop, as an XState machine. The processes
// are one resource invoked on `running`, so moving between starting, loading, ready and draining
// never touches them; only leaving `running` (failure, stop) ends them.
import { closeSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { assign, fromCallback, fromPromise, not, raise, sendTo, setup, type SnapshotFrom } from 'xstate';
import type { Command, ShardSpec } from '../engines/index.js';
import { backoffMs } from './backoff.js';
import type { RestartPolicy, ShardTiming } from './config.js';
import {
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
}

/** The shard machine's context: the input plus what it learned. No handles: it serializes. */
export interface ShardContext extends ShardInput {
  readonly processes: readonly ProcessRecord[];
  /** Whether the running processes were adopted rather than started by this agent. */
  readonly adopted: boolean;
  /** Restarts still inside the restart window. */
  readonly restarts: number;
  readonly backoffMs: number;
  /** Why the shard last failed, or why it is in cpu-fallback. */
  readonly reason: string | undefined;
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
  | { readonly type: 'drain' }
  | { readonly type: 'stop' }
  /** An operator's retry of a shard that gave up; ignored in every other state. */
  | { readonly type: 'restart' };

/** What the shard machine tells its processes actor. */
export type ProcessesCommand = { readonly type: 'leader.reachable' };

const LIST_DEVICES_TIMEOUT_MS = 60_000;
const ADOPT_POLL_MS = 500;
const IDLE_POLL_MS = 100;

/** Spawns the shard's Commands in order (or watches adopted ones) and reports their ends; cleanup kills the groups. */
export const superviseProcesses = fromCallback<ProcessesCommand, ShardContext, ShardEvent>(({ input, sendBack, receive }) => {
  let ended = false;
  const groups: ProcessRecord[] = [];
  let release: (() => void) | undefined;
  receive((e) => {
    if (e.type === 'leader.reachable') release?.();
  });
  const holdForLeader = (): Promise<void> =>
    new Promise<void>((resolve) => {
      release = resolve;
      sendBack({ type: 'leader.awaited' });
    });

  let timer: NodeJS.Timeout | undefined;
  if (input.adopt !== undefined) {
    groups.push(...input.adopt);
    const adopt = input.adopt;
    timer = setInterval(() => {
      const gone = adopt.find((p) => !isAlive(p));
      if (gone === undefined || ended) return;
      ended = true;
      clearInterval(timer);
      const exit: ProcessExit = { name: gone.name, pid: gone.pid, exitCode: undefined, signal: undefined, message: `${gone.name} (pid ${gone.pid}) is no longer running` };
      sendBack({ type: 'process.exited', exit, sidecar: gone !== adopt.at(-1), tail: readTail(input.logPath, input.tailLines) });
    }, ADOPT_POLL_MS);
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
            if (!ended) sendBack({ type: 'process.exited', exit, sidecar: !last, tail: readTail(input.logPath, input.tailLines) });
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
      const exit: ProcessExit = { name: 'spawn', pid: -1, exitCode: undefined, signal: undefined, message: e instanceof Error ? e.message : String(e) };
      sendBack({ type: 'process.exited', exit, sidecar: false, tail: readTail(input.logPath, input.tailLines) });
    });
  }
  return () => {
    ended = true;
    clearInterval(timer);
    release?.();
    // Whatever is still running when the shard leaves `running` dies with it: nothing is orphaned.
    for (const p of groups) if (isAlive(p) || input.adopt === undefined) signalGroup(p.pid, 'SIGKILL');
  };
});

/** Resolves once leaderAddr:leaderPort accepts a connection; the state's `leaderTimeout` bounds it. */
export const waitForLeaderPort = fromPromise<void, { host: string; port: number }>(async ({ input, signal }) => {
  await waitForTcp(input.host, input.port, { signal });
});

/** Polls the health URL until it answers 200: 503 (llama.cpp, vLLM loading) and refused both mean not yet. */
export const awaitHealthy = fromPromise<void, { url: string | undefined; intervalMs: number }>(async ({ input, signal }) => {
  if (input.url === undefined) return;
  for (;;) {
    if ((await probeOnce(input.url, { signal, timeoutMs: Math.max(1_000, input.intervalMs) })) === 200) return;
    await sleep(input.intervalMs, undefined, { signal });
  }
});

/** Probes a ready shard; resolves with the reason once `failures` probes in a row failed. */
export const watchHealth = fromPromise<string, { url: string | undefined; intervalMs: number; failures: number }>(
  async ({ input, signal }) => {
    let bad = 0;
    let last = '';
    for (;;) {
      await sleep(input.intervalMs, undefined, { signal });
      if (input.url === undefined) continue; // a worker rank has nothing to probe; its process exit is its health
      const status = await probeOnce(input.url, { signal, timeoutMs: Math.max(1_000, input.intervalMs) });
      if (status === 200) {
        bad = 0;
        continue;
      }
      bad++;
      last = status === undefined ? 'no answer' : `status ${status}`;
      if (bad >= input.failures) return `health check ${input.url} failed ${bad} times in a row (last: ${last})`;
    }
  },
);

/** Runs the engine's device listing; which lines are devices is the engine's business, so the agent provides the parser. */
export function listDevicesWith(parse: (engine: string, output: string) => readonly string[]) {
  return fromPromise<readonly string[], { engine: string; command: Command | undefined }>(async ({ input, signal }) => {
    if (input.command === undefined) return [];
    return parse(input.engine, await runForOutput(input.command, { signal, timeoutMs: LIST_DEVICES_TIMEOUT_MS }));
  });
}

/** Waits until the replica has no request in flight, polling `inFlight` (the router's count). */
export function awaitIdleWith(inFlight: (replicaId: string) => number) {
  return fromPromise<void, { replicaId: string }>(async ({ input, signal }) => {
    while (inFlight(input.replicaId) > 0) await sleep(IDLE_POLL_MS, undefined, { signal });
  });
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
    reason: undefined,
    tail: [],
    devices: undefined,
  };
}

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
    awaitHealthy,
    watchHealth,
    listDevices: listDevicesWith((engine) => {
      throw new Error(`engine ${engine} has no device listing parser; the agent provides one for engines that fall back to the CPU`);
    }),
    // Without the router's count nothing is known to be in flight: drain goes straight to stopping.
    awaitIdle: awaitIdleWith(() => 0),
    signalProcesses,
  },
  guards: {
    isAdopted: ({ context }) => context.adopt !== undefined,
    servesHttp: ({ context }) => context.servesHttp,
    needsDeviceCheck: ({ context }) => context.deviceCheck !== undefined,
    sawNoDevices: (_, p: { devices: readonly string[] }) => p.devices.length === 0,
    restartsLeft: ({ context }) => context.restarts < context.policy.maxRestarts,
  },
  actions: {
    recordProcess: assign({
      processes: ({ context, event }) => (event.type === 'process.spawned' ? [...context.processes, event.record] : context.processes),
    }),
    recordExit: assign({
      reason: ({ event }) =>
        event.type === 'process.exited'
          ? event.sidecar
            ? `sidecar ${event.exit.message}; a sidecar lives as long as its shard`
            : event.exit.message
          : undefined,
      tail: ({ context, event }) => (event.type === 'process.exited' ? event.tail : context.tail),
    }),
    recordLeaderTimeout: assign({
      reason: ({ context: c }) =>
        `leader ${c.spec.leaderAddr}:${c.spec.leaderPort} did not accept a connection within ${c.timing.leaderTimeoutMs} ms; ` +
        'check the leader shard is running and the port is open between the nodes',
    }),
    recordLoadTimeout: assign({
      reason: ({ context: c }) => `${c.healthUrl ?? 'health'} did not answer 200 within ${c.timing.loadTimeoutMs} ms`,
    }),
    recordUnhealthy: assign((_, p: { reason: string }) => ({ reason: p.reason })),
    recordDevices: assign((_, p: { devices: readonly string[] }) => ({ devices: p.devices })),
    recordCpuFallback: assign({
      reason: ({ context }) =>
        `placed on GPUs ${context.spec.gpuIndices.join(',')} but the engine lists no GPU device: it is serving on the CPU; ` +
        'install a GPU build of the engine (or the libraries its GPU backend links)',
    }),
    recordDeviceCheckError: assign((_, p: { error: unknown }) => ({
      reason: `device listing failed: ${p.error instanceof Error ? p.error.message : String(p.error)}`,
    })),
    captureTail: assign({ tail: ({ context }) => readTail(context.logPath, context.tailLines) }),
    releaseNextCommand: sendTo('processes', { type: 'leader.reachable' } satisfies ProcessesCommand),
    drawBackoff: assign({ backoffMs: ({ context }) => backoffMs(context.restarts, context.policy, Math.random()) }),
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
    clearReason: assign({ reason: () => undefined, tail: () => [] }),
  },
  delays: {
    leaderTimeout: ({ context }) => context.timing.leaderTimeoutMs,
    loadTimeout: ({ context }) => context.timing.loadTimeoutMs,
    drainTimeout: ({ context }) => context.timing.drainTimeoutMs,
    killAfter: ({ context }) => context.timing.killAfterMs,
    restartBackoff: ({ context }) => context.backoffMs,
    restartWindow: ({ context }) => context.policy.windowMs,
  },
}).createMachine({
  id: 'shard',
  initial: 'running',
  context: ({ input }) => initialContext(input),
  on: { 'restart.expired': { actions: 'forgetRestart' } },
  states: {
    running: {
      initial: 'starting',
      invoke: { id: 'processes', src: 'superviseProcesses', input: ({ context }) => context },
      on: {
        'process.spawned': { actions: 'recordProcess' },
        'process.exited': { target: 'failed', actions: 'recordExit' },
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
            src: 'waitForLeaderPort',
            input: ({ context }) => ({ host: context.spec.leaderAddr, port: context.spec.leaderPort }),
            onDone: { target: 'starting', actions: 'releaseNextCommand' },
          },
          after: { leaderTimeout: { target: '#shard.failed', actions: ['recordLeaderTimeout', 'captureTail'] } },
          on: { drain: { target: 'stopping' } },
        },
        loading: {
          invoke: {
            src: 'awaitHealthy',
            input: ({ context }) => ({ url: context.healthUrl, intervalMs: context.timing.healthIntervalMs }),
            onDone: [{ guard: 'needsDeviceCheck', target: 'checking-devices' }, { target: 'ready' }],
          },
          after: { loadTimeout: { target: '#shard.failed', actions: ['recordLoadTimeout', 'captureTail'] } },
          on: { drain: { target: 'stopping' } },
        },
        'checking-devices': {
          invoke: {
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
            onError: { target: '#shard.failed', actions: [{ type: 'recordDeviceCheckError', params: ({ event }) => ({ error: event.error }) }, 'captureTail'] },
          },
          on: { drain: { target: 'stopping' } },
        },
        adopted: {
          // Taken back from a previous agent: routable again once it answers, never restarted for it.
          invoke: {
            src: 'awaitHealthy',
            input: ({ context }) => ({ url: context.healthUrl, intervalMs: context.timing.healthIntervalMs }),
            onDone: { target: 'ready' },
          },
          after: { loadTimeout: { target: '#shard.failed', actions: ['recordLoadTimeout', 'captureTail'] } },
          on: { drain: { target: 'draining' } },
        },
        ready: {
          tags: ['routable'],
          entry: 'clearReason',
          invoke: {
            src: 'watchHealth',
            input: ({ context }) => ({ url: context.healthUrl, intervalMs: context.timing.healthIntervalMs, failures: context.timing.healthFailures }),
            onDone: { target: '#shard.failed', actions: [{ type: 'recordUnhealthy', params: ({ event }) => ({ reason: event.output }) }, 'captureTail'] },
          },
          on: { drain: { target: 'draining' } },
        },
        'cpu-fallback': {
          on: { drain: { target: 'draining' } },
        },
        draining: {
          // Out of routing now (no 'routable' tag); requests already sent get `drainTimeout` to finish.
          invoke: { src: 'awaitIdle', input: ({ context }) => ({ replicaId: context.spec.replicaId }), onDone: { target: 'stopping' } },
          after: { drainTimeout: { target: 'stopping' } },
          on: { 'process.exited': { target: 'stopping' } },
        },
        stopping: {
          initial: 'terminating',
          // Exits are what stopping is for: none of them is a failure.
          on: { 'process.exited': {}, drain: {} },
          states: {
            terminating: {
              invoke: {
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
      on: { drain: { target: 'stopped' }, stop: { target: 'stopped' } },
      states: {
        backoff: {
          always: { guard: not('restartsLeft'), target: 'given-up' },
          after: { restartBackoff: { target: '#shard.running', actions: ['countRestart', 'forgetRestartLater'] } },
        },
        // Too many restarts inside the window: the reason and tail stay for the operator, who may retry.
        'given-up': { on: { restart: { target: '#shard.running', actions: 'forgetAllRestarts' } } },
      },
    },
    stopped: { type: 'final' },
  },
});

/** A shard's state as one word of ARCHITECTURE's vocabulary, for reports and the replica. */
export type ShardPhase =
  | 'starting'
  | 'waiting-for-leader'
  | 'loading'
  | 'checking-devices'
  | 'adopted'
  | 'ready'
  | 'cpu-fallback'
  | 'draining'
  | 'stopping'
  | 'failed'
  | 'stopped';

/** The phase of a shard snapshot. */
export function shardPhase(s: SnapshotFrom<typeof shardMachine>): ShardPhase {
  const v = s.value;
  if (typeof v === 'string') return v;
  if ('failed' in v) return 'failed';
  const r = v.running;
  return typeof r === 'string' ? r : 'stopping';
}
