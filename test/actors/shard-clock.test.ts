// Supervision stepped with a SimulatedClock alone: restart backoff and the restart window, health
// polling while loading and once ready, the adoption check, and draining's wait for in-flight
// requests. No process, no real waiting: a probe's answer is a resolved promise, let through with
// one turn of the event loop.
import * as assert from 'node:assert/strict';
import { setImmediate as turn } from 'node:timers/promises';
import { test } from 'node:test';
import { createActor, fromCallback, fromPromise, SimulatedClock } from 'xstate';
import {
  backoffMs,
  countInFlightWith,
  drawJitter,
  shardMachine,
  shardPhase,
  type ProcessesCommand,
  type ShardContext,
  type ShardEvent,
  type ShardInput,
} from '../../src/actors/index.js';
import { fastTiming, input } from './scripted.js';

const policy = { maxRestarts: 2, windowMs: 10_000, backoffBaseMs: 1_000, backoffMaxMs: 4_000 };
const crash: ShardEvent = {
  type: 'process.exited',
  exit: { name: 'engine', pid: 1, exitCode: 1, signal: undefined, message: 'engine exited with code 1', detail: 'Command failed with exit code 1: engine' },
  sidecar: false,
  tail: ['boom'],
};

/** A shard whose processes "start" at once and never touch the OS; crashes are sent by the test. */
function fakeShard() {
  const clock = new SimulatedClock();
  const starts: number[] = [];
  const machine = shardMachine.provide({
    actors: {
      superviseProcesses: fromCallback<ProcessesCommand, ShardContext, ShardEvent>(({ sendBack }) => {
        starts.push(clock.now());
        sendBack({ type: 'processes.started' });
      }),
    },
  });
  const shard = createActor(machine, { clock, input: input('/nonexistent', [], { servesHttp: false, healthUrl: undefined, policy }) });
  shard.start();
  return { shard, clock, starts };
}

const rows = [
  { why: 'the first restart waits between half the base and the base', restarts: 0, min: 500, max: 1_000 },
  { why: 'each restart inside the window doubles the step', restarts: 1, min: 1_000, max: 2_000 },
  { why: 'the step is capped at backoff_max_ms', restarts: 5, min: 2_000, max: 4_000 },
];
for (const r of rows) {
  void test(`backoffMs: ${r.why}`, () => {
    assert.equal(backoffMs(r.restarts, policy, 0), r.min);
    assert.equal(backoffMs(r.restarts, policy, 0.999999), r.max);
  });
}

void test('shard clock: a failed shard restarts only once its jittered backoff has passed', () => {
  const { shard, clock, starts } = fakeShard();
  assert.equal(shardPhase(shard.getSnapshot()), 'ready');
  shard.send(crash);
  const wait = shard.getSnapshot().context.backoffMs;
  assert.ok(wait >= 500 && wait <= 1_000, `first backoff ${wait} in [500, 1000]`);
  assert.ok(shard.getSnapshot().matches({ failed: 'backoff' }));
  clock.increment(wait - 1);
  assert.ok(shard.getSnapshot().matches({ failed: 'backoff' }), 'still backing off one ms before the wait ends');
  clock.increment(1);
  assert.equal(shardPhase(shard.getSnapshot()), 'ready');
  assert.equal(shard.getSnapshot().context.restarts, 1);
  assert.equal(starts.length, 2);
  shard.stop();
});

void test('shard clock: more restarts than max_restarts inside the window leaves it failed for good', () => {
  const { shard, clock, starts } = fakeShard();
  for (let i = 0; i < 2; i++) {
    shard.send(crash);
    clock.increment(shard.getSnapshot().context.backoffMs);
  }
  shard.send(crash);
  assert.ok(shard.getSnapshot().matches({ failed: 'given-up' }));
  assert.equal(shard.getSnapshot().context.reason, 'engine exited with code 1: boom', 'the engine\'s last words beside its exit');
  assert.deepEqual(shard.getSnapshot().context.tail, ['boom']);
  clock.increment(60_000);
  assert.ok(shard.getSnapshot().matches({ failed: 'given-up' }), 'given up is not left by time passing');
  assert.equal(starts.length, 3);
  shard.send({ type: 'stop' });
  assert.equal(shard.getSnapshot().status, 'done');
});

void test('shard clock: an operator restart retries a shard that gave up, with a fresh restart count', () => {
  const { shard, clock, starts } = fakeShard();
  for (let i = 0; i < 2; i++) {
    shard.send(crash);
    clock.increment(shard.getSnapshot().context.backoffMs);
  }
  shard.send(crash);
  assert.ok(shard.getSnapshot().matches({ failed: 'given-up' }));
  shard.send({ type: 'restart' });
  assert.equal(shardPhase(shard.getSnapshot()), 'ready');
  assert.equal(shard.getSnapshot().context.restarts, 0);
  assert.equal(starts.length, 4);
  shard.send({ type: 'restart' });
  assert.equal(starts.length, 4, 'restart means nothing to a running shard');
  shard.stop();
});

void test('shard clock: restarts older than the window are forgotten, so a later crash is restarted again', () => {
  const { shard, clock } = fakeShard();
  for (let i = 0; i < 2; i++) {
    shard.send(crash);
    clock.increment(shard.getSnapshot().context.backoffMs);
  }
  assert.equal(shard.getSnapshot().context.restarts, 2);
  clock.increment(policy.windowMs);
  assert.equal(shard.getSnapshot().context.restarts, 0);
  shard.send(crash);
  assert.ok(shard.getSnapshot().matches({ failed: 'backoff' }));
  assert.ok(shard.getSnapshot().context.backoffMs <= policy.backoffBaseMs, 'backoff starts over from the base');
  shard.stop();
});

void test('shard clock: drain while backing off stops without restarting', () => {
  const { shard, starts } = fakeShard();
  shard.send(crash);
  shard.send({ type: 'drain' });
  assert.equal(shard.getSnapshot().status, 'done');
  assert.equal(starts.length, 1);
});

void test('drawJitter: the same seed draws the same waits, and every draw is in [0, 1)', () => {
  const draws = (seed: number): number[] => {
    const out: number[] = [];
    let state = seed;
    for (let i = 0; i < 100; i++) {
      const d = drawJitter(state);
      out.push(d.random);
      state = d.state;
    }
    return out;
  };
  assert.deepEqual(draws(7), draws(7));
  assert.notDeepEqual(draws(7), draws(8), 'two agents draw different waits, so their engines do not restart in lockstep');
  assert.ok(draws(7).every((r) => r >= 0 && r < 1));
});

const interval = fastTiming.healthIntervalMs;

/** A shard whose health probes answer from `answers` in order (200 once they run out), stepped by `clock`. */
function probedShard(answers: number[], over: Partial<ShardInput> = {}, o: { alive?: () => boolean; inFlight?: () => number } = {}) {
  const clock = new SimulatedClock();
  const probes: number[] = [];
  const checks: number[] = [];
  const machine = shardMachine.provide({
    actors: {
      superviseProcesses: fromCallback<ProcessesCommand, ShardContext, ShardEvent>(({ input: i, sendBack, receive }) => {
        receive((e) => {
          if (e.type !== 'processes.check') return;
          checks.push(clock.now());
          if (!(o.alive?.() ?? true)) {
            sendBack({ type: 'process.exited', exit: { name: 'engine', pid: 9, exitCode: undefined, signal: undefined, message: 'engine (pid 9) is no longer running' }, sidecar: false, tail: [] });
          }
        });
        if (i.adopt === undefined) sendBack({ type: 'processes.started' });
      }),
      probeHealth: fromPromise<number, { url: string | undefined; timeoutMs: number }>(async () => {
        probes.push(clock.now());
        return answers.shift() ?? 200;
      }),
      readLogTail: fromPromise<readonly string[], { path: string; lines: number }>(async () => ['last line']),
      countInFlight: countInFlightWith(() => o.inFlight?.() ?? 0),
    },
  });
  const shard = createActor(machine, { clock, input: input('/nonexistent', [], { policy, ...over }) });
  shard.start();
  return { shard, clock, probes, checks };
}

void test('shard clock: loading probes health once per health interval until it answers 200', async () => {
  const { shard, clock, probes } = probedShard([503, 0, 503]);
  await turn();
  assert.equal(shardPhase(shard.getSnapshot()), 'loading');
  assert.deepEqual(probes, [0], 'the first probe goes at once');
  for (let i = 1; i <= 3; i++) {
    clock.increment(interval - 1);
    await turn();
    assert.equal(probes.length, i, 'no probe before the interval has passed');
    clock.increment(1);
    await turn();
  }
  assert.deepEqual(probes, [0, interval, 2 * interval, 3 * interval]);
  assert.equal(shardPhase(shard.getSnapshot()), 'ready');
  shard.stop();
});

void test('shard clock: loading that never answers 200 fails at load_timeout_ms with the reason', async () => {
  const { shard, clock } = probedShard(Array.from({ length: 1_000 }, () => 503), { timing: { ...fastTiming, loadTimeoutMs: 10 * interval } });
  await turn();
  for (let i = 0; i < 10; i++) {
    clock.increment(interval);
    await turn();
  }
  assert.ok(shard.getSnapshot().matches('failed'));
  assert.match(shard.getSnapshot().context.reason ?? '', /did not answer 200 within/);
  assert.deepEqual(shard.getSnapshot().context.tail, ['last line'], 'the log tail is read once the shard failed');
  shard.stop();
});

void test('shard clock: a ready shard fails after health_failures bad probes in a row, and a good one in between resets the count', async () => {
  const { shard, clock } = probedShard([200, 500, 500, 200, 500, 0, 500]);
  await turn();
  assert.equal(shardPhase(shard.getSnapshot()), 'ready');
  for (let i = 0; i < 5; i++) {
    clock.increment(interval);
    await turn();
    assert.equal(shardPhase(shard.getSnapshot()), 'ready', `still ready after probe ${i + 2}`);
  }
  clock.increment(interval);
  await turn();
  assert.equal(shardPhase(shard.getSnapshot()), 'failed');
  assert.match(shard.getSnapshot().context.reason ?? '', /failed 3 times in a row \(last: status 500\)/);
  shard.stop();
});

void test('shard clock: an adopted shard is ready once it answers, and is failed when its process is found gone on the adoption check', async () => {
  let alive = true;
  const adopt = [{ name: 'engine', pid: 9, startTime: 1 }];
  const { shard, clock, checks } = probedShard([503], { adopt }, { alive: () => alive });
  await turn();
  assert.equal(shardPhase(shard.getSnapshot()), 'adopted');
  clock.increment(interval);
  await turn();
  assert.equal(shardPhase(shard.getSnapshot()), 'ready');
  assert.ok(shard.getSnapshot().context.adopted);
  clock.increment(500 - interval);
  assert.deepEqual(checks, [500], 'the adopted processes are looked at every 500 ms from adoption on');
  alive = false;
  clock.increment(499);
  assert.equal(shardPhase(shard.getSnapshot()), 'ready');
  clock.increment(1);
  assert.equal(shardPhase(shard.getSnapshot()), 'failed');
  assert.match(shard.getSnapshot().context.reason ?? '', /no longer running/);
  // Restarted by this agent, it is no longer adopted and nothing polls it.
  clock.increment(shard.getSnapshot().context.backoffMs);
  assert.equal(shard.getSnapshot().context.adopted, false);
  const before = checks.length;
  clock.increment(5_000);
  assert.equal(checks.length, before);
  shard.stop();
});

void test('shard clock: draining waits, polling every 100 ms, until no request is in flight', async () => {
  let inFlight = 2;
  const { shard, clock } = probedShard([], {}, { inFlight: () => inFlight });
  await turn();
  shard.send({ type: 'drain' });
  await turn();
  assert.equal(shardPhase(shard.getSnapshot()), 'draining');
  clock.increment(100);
  await turn();
  assert.equal(shardPhase(shard.getSnapshot()), 'draining', 'two requests still in flight');
  inFlight = 0;
  clock.increment(100);
  await turn();
  await turn();
  assert.equal(shard.getSnapshot().status, 'done', 'idle: stopped (no processes to signal)');
});

void test('shard clock: a failure\'s reason is one short line with the engine\'s last words, its command in the detail, and gone once the shard starts again', () => {
  const clock = new SimulatedClock();
  let starts = 0;
  // The second start never finishes, so the shard sits in `starting` after its restart.
  const machine = shardMachine.provide({
    actors: {
      superviseProcesses: fromCallback<ProcessesCommand, ShardContext, ShardEvent>(({ sendBack }) => {
        if (starts++ === 0) sendBack({ type: 'processes.started' });
      }),
    },
  });
  const shard = createActor(machine, { clock, input: input('/nonexistent', [], { servesHttp: false, healthUrl: undefined, policy }) });
  shard.start();
  const command = `Command failed with exit code 1: /usr/bin/python3 -m vllm.entrypoints.openai.api_server --kv-events-config '{"enable_kv_cache_events":true}'`;
  shard.send({ ...crash, exit: { ...crash.exit, detail: command }, tail: ['INFO loading', 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB', ''] });
  const failed = shard.getSnapshot().context;
  assert.equal(failed.reason, 'engine exited with code 1: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB');
  assert.equal(failed.detail, command);
  clock.increment(failed.backoffMs);
  assert.equal(shardPhase(shard.getSnapshot()), 'starting');
  assert.equal(shard.getSnapshot().context.reason, undefined, 'the old failure does not follow the shard into starting');
  assert.equal(shard.getSnapshot().context.detail, undefined);
  shard.stop();
});
