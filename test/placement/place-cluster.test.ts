// Placement over several nodes: a nodes: N replica on N distinct nodes with its leader's address and
// distributed-init port, replicas kept on the nodes they ran on when another joins, and what does not
// fit yet listed rather than thrown (more nodes may join).
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { parseModels, parseReplicas, type Catalog } from '../../src/catalog/index.js';
import type { Issues } from '../../src/config/index.js';
import { Registry, defaultEnginesConfig, defaultKvEventsConfig } from '../../src/engines/index.js';
import { parseNodeConfig, placeCluster, type NodeConfig } from '../../src/placement/index.js';

const engines = new Registry(defaultEnginesConfig, defaultKvEventsConfig);

function catalogOf(replicas: unknown): Catalog {
  const issues: Issues = [];
  const profiles = [
    { name: 'one', engine: 'vllm', gpu_class: 'l4', tp: 1, model_path: '/m', kv_events: true },
    { name: 'two', engine: 'vllm', gpu_class: 'l4', tp: 2, gpus_per_node: 1, nodes: 2, model_path: '/m', kv_events: true },
  ];
  const c = { models: parseModels({ q: { profiles } }, 'models', issues), replicas: parseReplicas(replicas, 'replicas', issues) };
  assert.deepEqual(issues, []);
  return c;
}

function node(name: string, addr: string, gpus: number, httpBase: number): NodeConfig {
  const issues: Issues = [];
  const devices = Array.from({ length: gpus }, (_, i) => ({ index: i, name: 'L4', uuid: `GPU-${name}-${i}`, class: 'l4' }));
  const n = parseNodeConfig({ name, addr, devices, ports: { http_base: httpBase, kv_events_base: httpBase + 500 } }, 'node', issues);
  assert.deepEqual(issues, []);
  return n;
}

void test('placeCluster: a 2-node replica gets two nodes, the leader on the first, its init port from the leader node', () => {
  const p = placeCluster(catalogOf([{ model: 'q', profile: 'two', count: 1 }]), [node('a', '10.0.0.1', 1, 8100), node('b', '10.0.0.2', 1, 9100)], engines);
  assert.deepEqual(p.unplaced, []);
  const [lead, worker] = p.shards;
  assert.equal(lead?.node, 'a');
  assert.equal(worker?.node, 'b');
  assert.deepEqual([lead?.spec.rank, worker?.spec.rank], [0, 1]);
  assert.equal(lead?.spec.leaderAddr, '10.0.0.1');
  assert.equal(worker?.spec.leaderAddr, '10.0.0.1', "the worker reaches the leader's address");
  assert.equal(lead?.spec.leaderPort, 8100, "the init port comes from the leader's HTTP range");
  assert.equal(worker?.spec.leaderPort, 8100);
  assert.equal(lead?.spec.httpPort, 8101, 'and the leader serves on the next port');
  assert.equal(worker?.spec.bindAddr, '10.0.0.2', 'each shard listens on its own node');
  assert.ok((lead?.spec.kvEventsPort ?? 0) > 0, 'the leader publishes KV events');
  assert.equal(worker?.spec.kvEventsPort, 0, 'a worker has no scheduler to publish from');
  assert.deepEqual([lead?.spec.nNodes, worker?.spec.shardId], [2, 'q-two-0-r1']);
});

void test('placeCluster: a replica that spans more nodes than have room waits, listed with why', () => {
  const p = placeCluster(catalogOf([{ model: 'q', profile: 'two', count: 1 }]), [node('a', '10.0.0.1', 2, 8100)], engines);
  assert.deepEqual(p.shards, []);
  assert.match(p.unplaced[0]?.message ?? '', /spans 2 nodes .* 1 of the 1 known nodes have them/);
});

void test('placeCluster: a node joining later does not move a replica from the node it runs on', () => {
  const catalog = catalogOf([{ model: 'q', profile: 'one', count: 1 }]);
  const first = placeCluster(catalog, [node('b', '10.0.0.2', 1, 9100)], engines);
  assert.equal(first.shards[0]?.node, 'b');
  const unsticky = placeCluster(catalog, [node('a', '10.0.0.1', 1, 8100), node('b', '10.0.0.2', 1, 9100)], engines);
  assert.equal(unsticky.shards[0]?.node, 'a', 'without history, config order decides');
  const sticky = placeCluster(catalog, [node('a', '10.0.0.1', 1, 8100), node('b', '10.0.0.2', 1, 9100)], engines, new Map([['q-one-0', ['b']]]));
  assert.equal(sticky.shards[0]?.node, 'b');
});

void test('placeCluster: replicas fill nodes in order, one device each', () => {
  const p = placeCluster(catalogOf([{ model: 'q', profile: 'one', count: 3 }]), [node('a', '10.0.0.1', 2, 8100), node('b', '10.0.0.2', 1, 9100)], engines);
  assert.deepEqual(p.shards.map((s) => `${s.spec.replicaId}@${s.node}`), ['q-one-0@a', 'q-one-1@a', 'q-one-2@b']);
});

void test('placeCluster: the same replicas on the same nodes get the same specs whatever the order they were decided in', () => {
  const catalog = catalogOf([{ model: 'q', profile: 'one', count: 2 }]);
  const nodes = [node('a', '10.0.0.1', 2, 8100)];
  const plain = placeCluster(catalog, nodes, engines);
  // q-one-1 is known to run on a (a restarted gateway heard so first): it is decided first, and
  // still gets the devices and ports catalog order gives it, so its engine is not restarted.
  const hinted = placeCluster(catalog, nodes, engines, new Map([['q-one-1', ['a']]]));
  assert.deepEqual(hinted.shards, plain.shards);
});

void test('placeCluster: a replica known to run on a node keeps it even when an earlier replica would have taken it', () => {
  const catalog = catalogOf([{ model: 'q', profile: 'one', count: 2 }]);
  const p = placeCluster(catalog, [node('a', '10.0.0.1', 1, 8100)], engines, new Map([['q-one-1', ['a']]]));
  assert.deepEqual(p.shards.map((s) => `${s.spec.replicaId}@${s.node}`), ['q-one-1@a']);
  assert.match(p.unplaced[0]?.message ?? '', /replica 1 of 2/);
});
