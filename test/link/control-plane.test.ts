// The control plane's rules, each a row that fails when the rule breaks: only listed nodes with the
// listed key's proof join; a node's block changes and replica states count only for replicas placed
// on it (others refused and counted); a lost message or a silent node starts the session over with
// the node's blocks cleared; a full copy precedes any delta. Messages go through the wire codec.
import { encode } from '@msgpack/msgpack';
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
  type AgentMessage,
  type AssignedReplica,
  type GatewayMessage,
  type NodeInventory,
} from '../../src/link/index.js';
import type { KvDelta } from '../../src/kv/index.js';
import { spec } from '../actors/scripted.js';

const inventory = (name: string): NodeInventory => ({ name, addr: '127.0.0.1', devices: [], ports: { httpBase: 8100, kvEventsBase: 5600 } });

const assigned = (replicaId: string): AssignedReplica => ({ replicaId, model: 'm', adapters: [], shards: [spec({ replicaId, shardId: `${replicaId}-r0` })], blockSizeTokens: 16, hashSeed: '0', dataParallelSize: 1, capacityBlocks: 100 });

/** A plane with nodes a and b (each placed one replica, ra and rb) and agents speaking over the codec. */
function setup(o: { now?: () => number } = {}) {
  const keys = { a: makeKeyPair(), b: makeKeyPair() };
  const applied: { node: string; id: string; d: KvDelta<bigint> }[] = [];
  const resets: string[] = [];
  const toAgent = new Map<string, (m: GatewayMessage) => void>();
  const plane = new ControlPlane({
    nodes: [
      { name: 'a', publicKey: keys.a.publicKey },
      { name: 'b', publicKey: keys.b.publicKey },
    ],
    place: (nodes) => ({
      byNode: new Map(nodes.map((n) => [n.name, [assigned(`r${n.name}`)]])),
      unplaced: [],
    }),
    writer: {
      apply: (node, id, d) => {
        if (plane.ownerOf(id) !== node) return false;
        applied.push({ node, id, d });
        return true;
      },
      reset: (id, why) => resets.push(`${id}:${why}`),
      forget: () => undefined,
    },
    models: ['m'],
    send: (peer, m) => toAgent.get(peer)?.(decodeGatewayMessage(encodeGatewayMessage(m))),
    silentAfterMs: 1_000,
    now: o.now,
  });
  const agent = (peer: string, node: string, secretKey: string | undefined, agentNow?: () => number) => {
    const s = new AgentSession({
      inventory: inventory(node),
      secretKey,
      now: agentNow,
      send: (seq, m: AgentMessage) => {
        const w = decodeAgentMessage(encodeAgentMessage(seq, m));
        plane.receive(peer, w.seq, w.msg);
      },
      onAssign: () => undefined,
    });
    toAgent.set(peer, (m) => s.receive(m));
    return s;
  };
  return { plane, keys, applied, resets, agent, toAgent };
}

const delta = (keys: bigint[]): KvDelta<bigint> => ({ added: keys, removed: [] });

void test('control plane: a listed node proving its key joins, gets its replicas, and its first blocks are a full copy', () => {
  const { plane, keys, applied, agent } = setup();
  const a = agent('pa', 'a', keys.a.secretKey);
  a.kvSink.delta('ra', delta([1n, 2n]));
  assert.equal(applied.length, 0, 'nothing is forwarded before the node joined');
  a.join();
  assert.equal(a.state, 'joined');
  assert.equal(plane.ownerOf('ra'), 'a');
  assert.deepEqual(applied.map((x) => [x.d.reset, [...x.d.added]]), [
    ['requested', []],
    [undefined, [1n, 2n]],
  ]);
  a.kvSink.delta('ra', delta([3n]));
  assert.deepEqual(applied.at(-1)?.d.added, [3n]);
});

void test('control plane: a node answering with another node\'s name is refused and counted (the proof is not of the listed key)', () => {
  const { plane, keys, agent } = setup();
  const liar = agent('px', 'a', keys.b.secretKey);
  liar.join();
  assert.equal(liar.state, 'refused');
  assert.equal(plane.stats.refused.get('bad-proof'), 1);
  assert.equal(plane.nodes().find((n) => n.name === 'a')?.state, 'waiting');
});

void test('control plane: a node not listed is refused by name', () => {
  const { plane, keys, agent } = setup();
  const c = agent('pc', 'c', keys.a.secretKey);
  c.join();
  assert.equal(c.state, 'refused');
  assert.equal(plane.stats.refused.get('unknown-node'), 1);
});

void test('control plane: blocks and replica states for a replica placed on another node are refused and counted', () => {
  const { plane, keys, applied, agent } = setup();
  const a = agent('pa', 'a', keys.a.secretKey);
  const b = agent('pb', 'b', keys.b.secretKey);
  a.join();
  b.join();
  const before = applied.length;
  b.kvSink.delta('ra', delta([9n]));
  assert.equal(applied.length, before, "b's blocks for a's replica never reach the index");
  b.setReplicas([{ id: 'ra', model: 'm', adapters: [], url: 'http://127.0.0.1:1/', apiKey: undefined, generation: 1, kvEvents: true, blockSizeTokens: 16, hashSeed: '0', dataParallelSize: 1 }], []);
  assert.equal(plane.stats.refused.get('not-placed'), 1);
  assert.deepEqual(plane.ready('m'), []);
});

void test('control plane: a lost message starts the session over, with the node\'s blocks cleared and a full copy sent again', () => {
  const { plane, keys, applied, resets, agent } = setup();
  let drop = false;
  const a = agent('pa', 'a', keys.a.secretKey);
  a.join();
  a.kvSink.delta('ra', delta([1n]));
  // Lose one message on the way: the next one arrives out of sequence.
  const receive = plane.receive.bind(plane);
  plane.receive = (peer, seq, msg) => {
    if (drop) {
      drop = false;
      return;
    }
    receive(peer, seq, msg);
  };
  drop = true;
  a.kvSink.delta('ra', delta([2n]));
  a.kvSink.delta('ra', delta([3n]));
  assert.equal(plane.stats.gaps, 1);
  assert.ok(resets.includes('ra:link-gap'));
  const copies = applied.filter((x) => x.d.reset === 'requested');
  assert.equal(copies.length, 1, 'a full copy after the gap (at join the agent held nothing yet)');
  assert.deepEqual([...(applied.at(-1)?.d.added ?? [])].sort(), [1n, 2n, 3n], 'the copy holds what the agent has, the lost delta included');
});

void test('control plane: a silent node leaves routing with its blocks cleared; on return a full copy precedes any delta', () => {
  let now = 0;
  const { plane, keys, applied, resets, agent } = setup({ now: () => now });
  const a = agent('pa', 'a', keys.a.secretKey);
  a.join();
  a.setReplicas([{ id: 'ra', model: 'm', adapters: [], url: 'http://127.0.0.1:1/', apiKey: undefined, generation: 1, kvEvents: true, blockSizeTokens: 16, hashSeed: '0', dataParallelSize: 1 }], []);
  assert.equal(plane.ready('m').length, 1);
  now = 5_000;
  plane.sweep();
  assert.equal(plane.ready('m').length, 1, 'a first finding waits for the word that may be queued behind the sweep');
  plane.sweep();
  assert.equal(plane.ready('m').length, 0);
  assert.ok(resets.includes('ra:node-silent'));
  assert.equal(plane.nodes().find((n) => n.name === 'a')?.state, 'silent');
  a.kvSink.delta('ra', delta([7n]));
  const afterReturn = applied.slice(applied.findIndex((x) => x.d.added.includes(7n)) - 1);
  // The delta itself was the message that told the plane the node is back: it was not applied; the
  // challenge, hello and full copy came first.
  assert.equal(afterReturn[0]?.d.reset, 'requested');
  assert.equal(plane.nodes().find((n) => n.name === 'a')?.state, 'up');
});

void test("control plane: a node's actor phases count for its own replicas only, each since moved onto the gateway's clock by its age; an agent without a clock gives none", () => {
  const now = 1_000_000;
  const { plane, keys, agent } = setup({ now: () => now });
  // The agent's clock is an hour ahead: its since values mean nothing here, their ages do.
  const a = agent('pa', 'a', keys.a.secretKey, () => now + 3_600_000);
  a.join();
  a.setReplicas(
    [],
    [
      { actor: 'replica:ra', phase: 'ready', reason: undefined, since: now + 3_600_000 - 5_000, parent: 'node:a' },
      { actor: 'shard:ra-r0', phase: 'ready', reason: 'probed', since: now + 3_600_000 - 7_000, parent: 'replica:ra' },
      { actor: 'publisher:rb', phase: 'streaming', reason: undefined, since: now, parent: 'replica:rb' },
      { actor: 'shard:rb-r0', phase: 'ready', reason: undefined },
    ],
  );
  const actors = plane.nodes().find((n) => n.name === 'a')?.actors;
  assert.deepEqual(actors, [
    { actor: 'replica:ra', phase: 'ready', reason: undefined, since: now - 5_000, parent: 'node:a' },
    { actor: 'shard:ra-r0', phase: 'ready', reason: 'probed', since: now - 7_000, parent: 'replica:ra' },
  ]);
  // An agent of before `since` and `at`: its phases still show, since unknown.
  const old = { type: 'replicas', ready: [], actors: [{ actor: 'shard:ra-r0', phase: 'loading' }] };
  const w = decodeAgentMessage(encode({ seq: 5, msg: old }));
  assert.equal(w.msg.type === 'replicas' ? w.msg.at : 'not replicas', undefined);
  plane.receive('pa', w.seq, w.msg);
  assert.deepEqual(plane.nodes().find((n) => n.name === 'a')?.actors, [{ actor: 'shard:ra-r0', phase: 'loading', reason: undefined, since: undefined, parent: undefined }]);
  // A since that is not a number does not decode.
  assert.throws(() => decodeAgentMessage(encode({ seq: 5, msg: { ...old, at: 1, actors: [{ actor: 'shard:ra-r0', phase: 'ready', since: 'yesterday' }] } })), /msg\.actors\[0\]\.since: not a number/);
});

void test('control plane: a node refused for its proof is not answered for a backoff that doubles, then is challenged again', () => {
  let now = 0;
  const { plane, keys, agent } = setup({ now: () => now });
  const liar = agent('px', 'a', keys.b.secretKey, () => now);
  liar.join();
  assert.equal(plane.stats.refused.get('bad-proof'), 1);
  // Heartbeats inside the first second's backoff: no challenge, no second refusal.
  for (let i = 0; i < 5; i++) {
    now += 100;
    liar.heartbeat();
  }
  assert.equal(plane.stats.refused.get('bad-proof'), 1);
  now += 1_000;
  liar.heartbeat();
  assert.equal(plane.stats.refused.get('bad-proof'), 2, 'challenged and refused again after the backoff');
  now += 1_500;
  liar.heartbeat();
  assert.equal(plane.stats.refused.get('bad-proof'), 2, 'the second backoff is two seconds');
  now += 600;
  liar.heartbeat();
  assert.equal(plane.stats.refused.get('bad-proof'), 3);
});

void test("control plane: a new agent's hello clears what the last agent said of its actors and ready replicas, until the new one reports its own", () => {
  const { plane, keys, agent, toAgent } = setup();
  const before = agent('pa', 'a', keys.a.secretKey);
  before.join();
  before.setReplicas(
    [{ id: 'ra', model: 'm', adapters: [], url: 'http://127.0.0.1:1/', apiKey: undefined, generation: 1, kvEvents: true, blockSizeTokens: 16, hashSeed: '0', dataParallelSize: 1 }],
    [{ actor: 'publisher:ra', phase: 'streaming', reason: undefined, parent: 'replica:ra' }],
  );
  assert.deepEqual(plane.nodes().find((n) => n.name === 'a')?.actors.map((a) => a.phase), ['streaming']);
  // The node's agent restarted: its messages reach the plane only when this test hands them over,
  // so the plane is seen between the new agent's hello and its first report.
  const queued: { seq: number; msg: AgentMessage }[] = [];
  const after = new AgentSession({ inventory: inventory('a'), secretKey: keys.a.secretKey, send: (seq, msg) => queued.push({ seq, msg }), onAssign: () => undefined });
  toAgent.set('pa2', (m) => after.receive(m));
  const deliver = (type: AgentMessage['type']): void => {
    const i = queued.findIndex((q) => q.msg.type === type);
    const [q] = queued.splice(i, 1);
    if (q === undefined) throw new Error(`the new agent sent no ${type}`);
    plane.receive('pa2', q.seq, q.msg);
  };
  after.join();
  deliver('rejoin');
  deliver('hello');
  assert.equal(after.state, 'joined');
  const a = plane.nodes().find((n) => n.name === 'a');
  assert.deepEqual([a?.actors, a?.ready], [[], []], 'nothing the last agent said stands');
  deliver('placed');
  deliver('replicas');
  assert.deepEqual(plane.nodes().find((n) => n.name === 'a')?.actors, []);
});
