// The gateway's placer as serve wires it: a node's cpu room is its cluster.nodes cpu_replicas, else
// the cores its hello reports, and cpu replicas fill the nodes in cluster.nodes order within it;
// nodes join through the control plane and the wire codec, in either order.
import { encode } from '@msgpack/msgpack';
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { clusterPlacer, inventoryOf } from '../../src/cli/cluster.js';
import { loadConfig } from '../../src/cli/config.js';
import { AgentSession, ControlPlane, decodeAgentMessage, decodeGatewayMessage, encodeAgentMessage, encodeGatewayMessage, makeKeyPair, type GatewayMessage } from '../../src/link/index.js';
import { defaultNodeConfig } from '../../src/placement/index.js';

const keys = { a: makeKeyPair(), b: makeKeyPair() };

/** A config of `count` sim cpu replicas; `cluster: false` leaves out the link (serve's lone node). */
function configOf(o: { count: number; cluster?: boolean; a?: string }) {
  const cluster = o.cluster === false ? '' : `cluster:
  link: tcp://127.0.0.1:5555
  key_file: /k
  nodes:
    - { name: a, public_key: "${keys.a.publicKey}"${o.a ?? ''} }
    - { name: b, public_key: "${keys.b.publicKey}" }
`;
  return loadConfig(
    `models:
  q: { profiles: [ { name: cpu, engine: sim, gpu_class: cpu, model_path: qwen3, kv_events: true } ] }
replicas: [ { model: q, profile: cpu, count: ${o.count} } ]
${cluster}`,
    'test.yaml',
  );
}

/** A control plane with serve's placer, and agents of nodes a and b reporting `cpus` cores each. */
function planeOf(config: ReturnType<typeof configOf>, cpus: number) {
  const toAgent = new Map<string, (m: GatewayMessage) => void>();
  const plane = new ControlPlane({
    nodes: config.cluster.nodes,
    place: clusterPlacer(config),
    writer: undefined,
    models: ['q'],
    send: (peer, m) => toAgent.get(peer)?.(decodeGatewayMessage(encodeGatewayMessage(m))),
    silentAfterMs: 1_000,
  });
  const join = (name: 'a' | 'b'): void => {
    const s = new AgentSession({
      inventory: inventoryOf({ ...defaultNodeConfig, name }, cpus),
      secretKey: keys[name].secretKey,
      send: (seq, m) => {
        const w = decodeAgentMessage(encodeAgentMessage(seq, m));
        plane.receive(name, w.seq, w.msg);
      },
      onAssign: () => undefined,
    });
    toAgent.set(name, (m) => s.receive(m));
    s.join();
  };
  const placed = (): string[] => plane.nodes().flatMap((n) => n.assigned.map((a) => `${a.replace(/ \(rank 0\)$/, '')}@${n.name}`)).sort();
  return { plane, join, placed };
}

void test('cluster placement: a node takes as many cpu replicas as its hello reports cores, the rest wait for the next node', () => {
  const { plane, join, placed } = planeOf(configOf({ count: 2 }), 1);
  join('a');
  assert.deepEqual(placed(), ['q-cpu-0@a'], 'the first node to join does not take both');
  assert.equal(plane.nodes().find((n) => n.name === 'a')?.cpus, 1, 'the views show the cores placement went by');
  assert.match(plane.unplaced[0]?.message ?? '', /replica 2 of 2 of q\/cpu needs room for a cpu replica, and node a takes 1, all placed/);
  join('b');
  assert.deepEqual(placed(), ['q-cpu-0@a', 'q-cpu-1@b']);
  assert.deepEqual(plane.unplaced, []);
});

void test('cluster placement: nodes joining in the other order end with one cpu replica each, the first keeping its own', () => {
  const { join, placed } = planeOf(configOf({ count: 2 }), 1);
  join('b');
  assert.deepEqual(placed(), ['q-cpu-0@b']);
  join('a');
  assert.deepEqual(placed(), ['q-cpu-0@b', 'q-cpu-1@a']);
});

void test('cluster placement: cluster.nodes[].cpu_replicas bounds a node in place of its cores', () => {
  const { join, placed } = planeOf(configOf({ count: 3, a: ', cpu_replicas: 1' }), 8);
  join('a');
  join('b');
  assert.deepEqual(placed(), ['q-cpu-0@a', 'q-cpu-1@b', 'q-cpu-2@b'], 'a takes one; b, with 8 cores, the rest');
});

void test('cluster placement: without cluster.link the lone node takes every cpu replica, whatever its cores', () => {
  const config = configOf({ count: 3, cluster: false });
  const p = clusterPlacer(config)([inventoryOf({ ...defaultNodeConfig, name: 'local' }, 1)], new Map());
  assert.deepEqual(p.unplaced, []);
  assert.deepEqual(p.byNode.get('local')?.map((r) => r.replicaId), ['q-cpu-0', 'q-cpu-1', 'q-cpu-2']);
});

void test('cluster placement: an agent that does not report its cores has no cpu bound; a count that is not one does not decode', () => {
  const config = configOf({ count: 3 });
  const { cpus: _, ...older } = inventoryOf({ ...defaultNodeConfig, name: 'a' }, 4);
  const hello = (inventory: unknown) => encode({ seq: 0, msg: { type: 'hello', node: 'a', proof: new Uint8Array(32), inventory, running: [] } });
  const w = decodeAgentMessage(hello(older));
  assert.ok(w.msg.type === 'hello');
  assert.equal(w.msg.inventory.cpus, undefined);
  assert.deepEqual(clusterPlacer(config)([w.msg.inventory], new Map()).byNode.get('a')?.length, 3);
  for (const cpus of [0, 2.5, -1]) assert.throws(() => decodeAgentMessage(hello({ ...older, cpus })), new RegExp(`msg\\.inventory\\.cpus: ${cpus} is not a count of cores`));
});
