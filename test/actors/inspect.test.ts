// The inspector: plain JSON-safe records of every machine actor, secrets removed before they leave.
import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { createActor, fromCallback } from 'xstate';
import { createInspector, publicRecord, shardMachine, type InspectRecord, type ProcessesCommand, type ShardContext, type ShardEvent } from '../../src/actors/index.js';
import { input, script } from './scripted.js';

void test('inspector: shard snapshots and events become plain records; the public copy hides the API key', () => {
  const records: InspectRecord[] = [];
  const machine = shardMachine.provide({
    actors: { superviseProcesses: fromCallback<ProcessesCommand, ShardContext, ShardEvent>(({ sendBack }) => sendBack({ type: 'processes.started' })) },
  });
  const shard = createActor(machine, {
    systemId: 'shard:r0-s0',
    input: input('/nonexistent', [script('engine', 'exits.mjs', [], { env: { VLLM_API_KEY: 'sekrit' } })], { servesHttp: false, healthUrl: undefined }),
    inspect: createInspector((r) => records.push(r), () => 42),
  });
  shard.start();
  shard.send({ type: 'stop' });
  const snaps = records.filter((r) => r.kind === 'snapshot' && r.actor === 'shard:r0-s0');
  assert.ok(snaps.length >= 2);
  assert.ok(records.some((r) => r.kind === 'event' && r.event.type === 'stop'));
  const last = snaps.at(-1);
  assert.ok(last?.kind === 'snapshot');
  assert.equal(last.machine, 'shard');
  assert.equal(last.at, 42);
  assert.doesNotThrow(() => JSON.stringify(records), 'records are JSON-safe');
  assert.ok(JSON.stringify(last).includes('sekrit'), 'the agent itself sees the key (it hands it to the router)');
  const shown = JSON.stringify(records.map(publicRecord));
  assert.ok(!shown.includes('sekrit') && !shown.includes('test-key'), 'no key leaves through a public record');
  assert.ok(shown.includes('VLLM_API_KEY'), 'the variable is named, its value hidden');
});
