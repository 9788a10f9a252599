// Placement over several nodes: a nodes: N replica on N distinct nodes with its leader's address and
// distributed-init port, replicas kept on the nodes they ran on when another joins, cpu replicas in
// node order up to each node's cpu room, and what does not fit yet listed rather than thrown (more
// nodes may join).
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { parseModels, parseReplicas, type Catalog } from '../../src/catalog/index.js';
import type { Issues } from '../../src/config/index.js';
import { Registry, defaultEnginesConfig, defaultKvEventsConfig } from '../../src/engines/index.js';
import { parseNodeConfig, placeCluster, type ClusterNodeConfig, type ClusterPlacement, type NodeConfig } from '../../src/placement/index.js';

const engines = new Registry(defaultEnginesConfig, defaultKvEventsConfig);

function catalogOf(replicas: unknown): Catalog {
  const issues: Issues = [];
  const profiles = [
    { name: 'one', engine: 'vllm', gpu_class: 'l4', tp: 1, model_path: '/m', kv_events: true },
    { name: 'two', engine: 'vllm', gpu_class: 'l4', tp: 2, gpus_per_node: 1, nodes: 2, model_path: '/m', kv_events: true },
    { name: 'cpu', engine: 'sim', gpu_class: 'cpu', model_path: 'qwen3', kv_events: true },
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

const cpuNode = (name: string, cpuReplicas: number | undefined, httpBase: number): ClusterNodeConfig => ({ ...node(name, `10.0.0.${httpBase / 1000}`, 0, httpBase), cpuReplicas });
const where = (p: ClusterPlacement): string[] => p.shards.map((s) => `${s.spec.replicaId}@${s.node}`);
// What the control plane hands the next placement: where each replica runs now.
const running = (p: ClusterPlacement): Map<string, string[]> => new Map(p.shards.map((s) => [s.spec.replicaId, [s.node]]));

void test('placeCluster: cpu replicas fill nodes in order, each node up to its cpu room', () => {
  const p = placeCluster(catalogOf([{ model: 'q', profile: 'cpu', count: 3 }]), [cpuNode('a', 2, 8000), cpuNode('b', 2, 9000)], engines);
  assert.deepEqual(p.unplaced, []);
  assert.deepEqual(where(p), ['q-cpu-0@a', 'q-cpu-1@a', 'q-cpu-2@b']);
  assert.deepEqual(
    p.shards.map((s) => s.spec.httpPort),
    [8000, 8001, 9000],
    'each node hands out its own ports',
  );
});

void test('placeCluster: a node with no cpu room takes no cpu replica; one with no bound takes the rest', () => {
  const p = placeCluster(catalogOf([{ model: 'q', profile: 'cpu', count: 3 }]), [cpuNode('a', 0, 8000), cpuNode('b', undefined, 9000)], engines);
  assert.deepEqual(where(p), ['q-cpu-0@b', 'q-cpu-1@b', 'q-cpu-2@b']);
});

void test('placeCluster: a cpu replica with no room on any joined node waits, saying which bound to raise', () => {
  const p = placeCluster(catalogOf([{ model: 'q', profile: 'cpu', count: 2 }]), [cpuNode('a', 1, 8000)], engines);
  assert.deepEqual(where(p), ['q-cpu-0@a']);
  assert.equal(p.unplaced[0]?.path, 'replicas[0]');
  assert.match(p.unplaced[0]?.message ?? '', /replica 2 of 2 of q\/cpu needs room for a cpu replica, and node a takes 1, all placed; raise its cluster\.nodes\[\]\.cpu_replicas/);
});

void test('placeCluster: one cpu replica a node, whichever joins first: each node ends with one, and the first keeps the one it runs', () => {
  const catalog = catalogOf([{ model: 'q', profile: 'cpu', count: 2 }]);
  const [a, b] = [cpuNode('a', 1, 8000), cpuNode('b', 1, 9000)];
  const aFirst = placeCluster(catalog, [a], engines);
  assert.deepEqual(where(aFirst), ['q-cpu-0@a'], 'the first node to join takes only its room');
  assert.deepEqual(where(placeCluster(catalog, [a, b], engines, running(aFirst))), ['q-cpu-0@a', 'q-cpu-1@b']);
  const bFirst = placeCluster(catalog, [b], engines);
  assert.deepEqual(where(bFirst), ['q-cpu-0@b']);
  assert.deepEqual(where(placeCluster(catalog, [a, b], engines, running(bFirst))), ['q-cpu-0@b', 'q-cpu-1@a'], 'the running replica is not moved to the node listed first');
});

void test('placeCluster: cpu replicas running on a later node stay there while it lives, though the first node has room', () => {
  const catalog = catalogOf([{ model: 'q', profile: 'cpu', count: 2 }]);
  const [a, b] = [cpuNode('a', 2, 8000), cpuNode('b', 2, 9000)];
  assert.deepEqual(where(placeCluster(catalog, [a, b], engines)), ['q-cpu-0@a', 'q-cpu-1@a'], 'without history, the order of cluster.nodes decides');
  const bFirst = placeCluster(catalog, [b], engines);
  assert.deepEqual(where(placeCluster(catalog, [a, b], engines, running(bFirst))), ['q-cpu-0@b', 'q-cpu-1@b']);
});
