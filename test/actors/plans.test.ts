// Replica plans from placement's shard specs: grouped by replica, KV facts read from the same args.
import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { planReplicas } from '../../src/actors/index.js';
import { spec } from './scripted.js';

const profile = spec().profile;
const facts = { hashSeed: '7', simBlockSize: 32 };

void test('planReplicas: shards of one replica are one plan, in placement order', () => {
  const plans = planReplicas([spec({ replicaId: 'a', shardId: 'a0' }), spec({ replicaId: 'b', shardId: 'b0' }), spec({ replicaId: 'a', shardId: 'a1', rank: 1 })], facts);
  assert.deepEqual(plans.map((p) => [p.replicaId, p.shards.map((s) => s.shardId)]), [['a', ['a0', 'a1']], ['b', ['b0']]]);
  assert.equal(plans[0]?.hashSeed, '7');
});

const rows = [
  { why: 'the sim hashes at engines.sim.block_size', engine: 'sim', args: [], block: 32, dp: 1, capacity: 4096 },
  { why: "the sim's capacity flag bounds its mirror", engine: 'sim', args: ['--kv-capacity-blocks', '100'], block: 32, dp: 1, capacity: 100 },
  { why: "vLLM's default block size is 16", engine: 'vllm', args: [], block: 16, dp: 1, capacity: 262_144 },
  { why: 'a --block-size in the profile wins, as it does for the engine', engine: 'vllm', args: ['--block-size=64'], block: 64, dp: 1, capacity: 262_144 },
  { why: 'data-parallel ranks come from the same args', engine: 'vllm', args: ['--data-parallel-size', '2'], block: 16, dp: 2, capacity: 262_144 },
];
for (const r of rows) {
  void test(`planReplicas: ${r.why}`, () => {
    const [p] = planReplicas([spec({ profile: { ...profile, engine: r.engine, args: r.args } })], facts);
    assert.equal(p?.blockSizeTokens, r.block);
    assert.equal(p?.dataParallelSize, r.dp);
    assert.equal(p?.capacityBlocks, r.capacity);
  });
}
