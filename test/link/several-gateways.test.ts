// Several gateways' control planes over one node, each rule a test: a leased plane assigns nothing
// until it takes the lease, then under its epoch; a plane that does not place learns who owns which
// replica from the node's own report, so its blocks and ready states count there too; a plane taking
// over places from what the node reported (the same specs) under a higher epoch; the node's fence
// ignores an older placer's assignment. Messages go through the wire codec.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import {
  AgentSession,
  ControlPlane,
  decodeAgentMessage,
  decodeGatewayMessage,
  encodeAgentMessage,
  encodeGatewayMessage,
  makeKeyPair,
  PlacerFence,
  type AgentMessage,
  type AssignedReplica,
  type GatewayMessage,
  type Placer,
} from '../../src/link/index.js';
import type { KvDelta } from '../../src/kv/index.js';
import { spec } from '../actors/scripted.js';

const key = makeKeyPair();

const assigned = (replicaId: string, port: number): AssignedReplica => ({
  replicaId,
  model: 'm',
  adapters: [],
  shards: [spec({ replicaId, shardId: `${replicaId}-r0`, httpPort: port })],
  blockSizeTokens: 16,
  hashSeed: '0',
  dataParallelSize: 1,
  capacityBlocks: 100,
});

// Keeps r1 where the node said it runs it, with the port it had; a fresh placement picks `port`.
const placerWith =
  (port: number): Placer =>
  (nodes, prefer) => ({
    byNode: new Map(nodes.map((n) => [n.name, prefer.get('r1')?.includes(n.name) === true || prefer.size === 0 ? [assigned('r1', prefer.size === 0 ? port : 8100)] : []])),
    unplaced: [],
  });

const replica = { id: 'r1', model: 'm', adapters: [], url: 'http://127.0.0.1:8100/', apiKey: undefined, generation: 1, kvEvents: true, blockSizeTokens: 16, hashSeed: '0', dataParallelSize: 1 };

/** One gateway's plane (leased, as one of several) and what its writer was handed. */
function gateway(port: number) {
  const applied: { node: string; id: string; added: bigint[] }[] = [];
  const toAgent = new Map<string, (m: GatewayMessage) => void>();
  const plane: ControlPlane = new ControlPlane({
    nodes: [{ name: 'a', publicKey: key.publicKey }],
    place: placerWith(port),
    leased: true,
    writer: {
      apply: (node, id, d: KvDelta<bigint>) => {
        if (plane.ownerOf(id) !== node) return false;
        applied.push({ node, id, added: [...d.added] });
        return true;
      },
      reset: () => undefined,
      forget: () => undefined,
    },
    models: ['m'],
    send: (peer, m) => toAgent.get(peer)?.(decodeGatewayMessage(encodeGatewayMessage(m))),
    silentAfterMs: 1_000,
  });
  return { plane, applied, toAgent };
}

/** Node a's agent with one session per gateway and linkedAgent's fence; `runs` is what it was assigned. */
function node(gateways: readonly ReturnType<typeof gateway>[]) {
  const fence = new PlacerFence();
  const runs: { replicas: readonly AssignedReplica[]; epoch: number }[] = [];
  const stale: number[] = [];
  const sessions: AgentSession[] = gateways.map(
    (g, i) =>
      new AgentSession({
        inventory: { name: 'a', addr: '127.0.0.2', devices: [], ports: { httpBase: 8100, kvEventsBase: 5600 } },
        secretKey: key.secretKey,
        send: (seq, m: AgentMessage) => {
          const w = decodeAgentMessage(encodeAgentMessage(seq, m));
          g.plane.receive(`p${i}`, w.seq, w.msg);
        },
        onAssign: (replicas, epoch) => {
          if (!fence.admits(epoch)) {
            stale.push(epoch);
            return;
          }
          runs.push({ replicas, epoch });
          for (const s of sessions) s.setAssigned(replicas, epoch);
        },
      }),
  );
  gateways.forEach((g, i) => g.toAgent.set(`p${i}`, (m) => sessions[i]?.receive(m)));
  return { sessions, runs, stale };
}

void test('several gateways: a leased plane assigns nothing before it holds the lease, then assigns under its epoch', () => {
  const g = gateway(8100);
  const a = node([g]);
  a.sessions[0]?.join();
  assert.equal(a.sessions[0]?.state, 'joined');
  assert.equal(a.runs.length, 0, 'no lease, no assignment');
  assert.equal(g.plane.ownerOf('r1'), undefined);
  g.plane.takePlacement(3);
  assert.deepEqual(
    a.runs.map((r) => [r.epoch, r.replicas.map((x) => x.replicaId)]),
    [[3, ['r1']]],
  );
  assert.deepEqual(g.plane.placer, { placing: true, epoch: 3 });
});

void test('several gateways: a gateway that does not place learns the owners from the node, so its blocks and ready state count there', () => {
  const placer = gateway(8100);
  const other = gateway(8100);
  const a = node([placer, other]);
  for (const s of a.sessions) s.join();
  placer.plane.takePlacement(1);
  assert.equal(other.plane.ownerOf('r1'), 'a', 'the node told the other gateway what it was assigned');
  assert.deepEqual(other.plane.placer, { placing: false, epoch: 0 });
  for (const s of a.sessions) {
    s.kvSink.delta('r1', { added: [7n], removed: [] });
    s.setReplicas([replica], []);
  }
  assert.deepEqual(other.applied.at(-1), { node: 'a', id: 'r1', added: [7n] });
  assert.deepEqual(
    other.plane.ready('m').map((r) => `${r.id}@${r.node}`),
    ['r1@a'],
  );
  assert.deepEqual(
    placer.plane.ready('m').map((r) => `${r.id}@${r.node}`),
    ['r1@a'],
  );
});

void test('several gateways: a new placer places from what the node reported (same specs), and the deposed one is fenced off', () => {
  // The first placer would put r1 on port 8100, the second on 9100 had it no word from the node.
  const first = gateway(8100);
  const second = gateway(9100);
  const a = node([first, second]);
  for (const s of a.sessions) s.join();
  first.plane.takePlacement(1);
  const before = a.runs.at(-1)?.replicas;
  second.plane.takePlacement(2);
  assert.equal(a.runs.at(-1)?.epoch, 2);
  assert.deepEqual(a.runs.at(-1)?.replicas, before, 'the running replica keeps its spec: nothing restarts');
  // The first placer, cut off and not yet aware, places anew: the node ignores it.
  first.plane.takePlacement(1);
  assert.equal(a.stale.length, 0);
  first.plane.yieldPlacement();
  first.plane.takePlacement(1);
  assert.ok(a.stale.includes(1), 'an assignment under an older epoch is ignored');
  assert.equal(a.runs.at(-1)?.epoch, 2);
});

void test('placer fence: epochs never go back, and a lone gateway (epoch 0) is always heard', () => {
  const f = new PlacerFence();
  const rows = [
    { epoch: 1, want: true },
    { epoch: 2, want: true },
    { epoch: 1, want: false },
    { epoch: 2, want: true },
    { epoch: 0, want: true },
    { epoch: 1, want: true },
  ];
  for (const r of rows) assert.equal(f.admits(r.epoch), r.want, `epoch ${r.epoch} after ${f.taken}`);
});
