// The publisher machine's states, driven by the facts its stream actor reports (the real stream is
// exercised against the sim in sim-agent.test.ts); rebinding after a failure is stepped in time.
import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { createActor, fromCallback, SimulatedClock } from 'xstate';
import { publisherMachine, type PublisherContext, type PublisherEvent } from '../../src/actors/index.js';

const input = { replicaId: 'r0', port: 1, replayPort: 2, topic: 'kv-events', dataParallelSize: 1, blockSizeTokens: 16, seed: '0', capacityBlocks: 10, rebindMs: 1_000 };

function publisher() {
  const clock = new SimulatedClock();
  let told: ((e: PublisherEvent) => void) | undefined;
  const restarts: string[] = [];
  let binds = 0;
  const machine = publisherMachine.provide({
    actors: {
      streamEvents: fromCallback<{ type: 'engine.restarted'; detail: string }, PublisherContext, PublisherEvent>(({ sendBack, receive }) => {
        binds++;
        told = sendBack;
        receive((e) => restarts.push(e.detail));
      }),
    },
  });
  const actor = createActor(machine, { clock, input }).start();
  const say = (e: PublisherEvent): void => {
    if (told === undefined) throw new Error('stream not started');
    told(e);
  };
  const state = (): unknown => actor.getSnapshot().value;
  return { actor, clock, say, state, restarts, binds: () => binds };
}

void test('publisher: binding, waiting, streaming, resyncing after a gap and back, reset to waiting', () => {
  const p = publisher();
  assert.deepEqual(p.state(), { open: 'binding' });
  p.say({ type: 'stream.bound' });
  assert.deepEqual(p.state(), { open: 'waiting' });
  p.say({ type: 'stream.flowing' });
  assert.ok(p.actor.getSnapshot().hasTag('streaming'));
  p.say({ type: 'stream.gapped', rank: 0, expected: 3, got: 5 });
  assert.deepEqual(p.state(), { open: 'resyncing' });
  p.say({ type: 'stream.resynced', rank: 0 });
  assert.deepEqual(p.state(), { open: 'streaming' });
  p.say({ type: 'stream.reset', rank: 0, reason: 'all-blocks-cleared', detail: 'AllBlocksCleared' });
  assert.deepEqual(p.state(), { open: 'waiting' });
  assert.equal(p.actor.getSnapshot().context.resets, 1);
  assert.equal(p.actor.getSnapshot().context.lastReset, 'all-blocks-cleared: AllBlocksCleared');
  p.actor.stop();
});

void test('publisher: an engine restart is passed to the stream and resets it', () => {
  const p = publisher();
  p.say({ type: 'stream.bound' });
  p.say({ type: 'stream.flowing' });
  p.actor.send({ type: 'engine.restarted', detail: 'engine exited with code 1' });
  assert.deepEqual(p.restarts, ['engine exited with code 1']);
  assert.deepEqual(p.state(), { open: 'waiting' });
  p.actor.stop();
});

void test('publisher: hashes that do not match ours are reported in context', () => {
  const p = publisher();
  p.say({ type: 'hashes.mismatched', reason: 'seed differs' });
  assert.equal(p.actor.getSnapshot().context.verification, 'mismatch');
  assert.equal(p.actor.getSnapshot().context.reason, 'seed differs');
  p.actor.stop();
});

void test('publisher: a port that cannot be bound is retried after the rebind delay', () => {
  const p = publisher();
  p.say({ type: 'stream.failed', reason: 'EADDRINUSE' });
  assert.equal(p.state(), 'failed');
  p.clock.increment(999);
  assert.equal(p.state(), 'failed');
  p.clock.increment(1);
  assert.deepEqual(p.state(), { open: 'binding' });
  assert.equal(p.binds(), 2);
  p.actor.stop();
});
