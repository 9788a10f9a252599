// The replica's chart driven by its shards' phases alone: shards stand in as tiny machines the test
// moves, so every transition is the `shards.<phase>` event or agent command the chart names.
import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { assign, createActor, setup } from 'xstate';
import { replicaMachine, replicaPhaseOf, type ShardInput } from '../../src/actors/index.js';
import { input, replicaInput, spec } from './scripted.js';

type Move = 'starting' | 'loading' | 'ready' | 'failed';

// The parts of a shard snapshot the replica reads: its value, spec, reason, restarts, adopted and tag.
const fakeShard = setup({
  types: { context: {} as ShardInput & { reason: string | undefined; restarts: number; adopted: boolean }, events: {} as { type: Move | 'drain' | 'stop' | 'restart' }, input: {} as ShardInput },
}).createMachine({
  id: 'shard',
  initial: 'running',
  context: ({ input: i }) => ({ ...i, reason: undefined, restarts: 0, adopted: false }),
  on: { drain: '.stopped', stop: '.stopped' },
  states: {
    running: {
      initial: 'starting',
      on: { failed: { target: 'failed', actions: assign({ reason: () => 'engine exited with code 1' }) } },
      states: { starting: { on: { loading: 'loading' } }, loading: { on: { ready: 'ready' } }, ready: { tags: ['routable'] } },
    },
    failed: { on: { starting: 'running' } },
    stopped: { type: 'final' },
  },
});

void test('replica chart: it follows what the shards add up to, event by event, and ends stopped after drain', () => {
  const shards = [input('/nonexistent', [], { spec: spec({ shardId: 'r0-s0' }) }), input('/nonexistent', [], { spec: spec({ shardId: 'r0-s1', rank: 1 }) })];
  // @ts-expect-error the stand-in has only the parts of a shard the replica reads
  const replica = createActor(replicaMachine.provide({ actors: { shard: fakeShard } }), { input: replicaInput(shards) });
  replica.start();
  const send = (id: string, type: Move): void => replica.system.get(`shard:${id}`)?.send({ type });
  const phase = (): string => replicaPhaseOf(replica.getSnapshot().value);
  send('r0-s0', 'loading');
  assert.equal(phase(), 'loading');
  send('r0-s0', 'ready');
  assert.equal(phase(), 'starting', 'one shard still starting: the replica is not ready');
  send('r0-s1', 'loading');
  send('r0-s1', 'ready');
  assert.equal(phase(), 'ready');
  assert.ok(replica.getSnapshot().hasTag('routable'));
  assert.equal(replica.getSnapshot().context.generation, 1);
  send('r0-s1', 'failed');
  assert.equal(phase(), 'failed', 'a worker failing fails the replica');
  assert.ok(!replica.getSnapshot().hasTag('routable'));
  send('r0-s1', 'starting');
  assert.equal(phase(), 'starting');
  send('r0-s1', 'loading');
  send('r0-s1', 'ready');
  assert.equal(phase(), 'ready');
  assert.equal(replica.getSnapshot().context.generation, 2, 'a new run: the gateway forgets what the old one cached');
  replica.send({ type: 'drain' });
  assert.equal(replica.getSnapshot().status, 'done');
  assert.ok(replica.getSnapshot().matches('stopped'));
});
