// Restart backoff and the restart window, stepped with a SimulatedClock: no process, no real waiting.
import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { createActor, fromCallback, SimulatedClock } from 'xstate';
import { backoffMs, shardMachine, shardPhase, type ProcessesCommand, type ShardContext, type ShardEvent } from '../../src/actors/index.js';
import { input } from './scripted.js';

const policy = { maxRestarts: 2, windowMs: 10_000, backoffBaseMs: 1_000, backoffMaxMs: 4_000 };
const crash: ShardEvent = {
  type: 'process.exited',
  exit: { name: 'engine', pid: 1, exitCode: 1, signal: undefined, message: 'engine exited with code 1' },
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
  assert.equal(shard.getSnapshot().context.reason, 'engine exited with code 1');
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
