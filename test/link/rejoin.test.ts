// A node that goes silent and is heard from again rejoins, over both transports serve and agent use:
// the in-process pipe (serve's own node, which only looks silent when the gateway's own process
// stalls, as when a tokenizer loads on its loop) and the ZeroMQ link. The gateway's clock is a fake
// one, moved past silent_after_ms while the agent sends nothing; the agent then speaks again as its
// timer would. A stall of the gateway itself, whose sweep runs before the word waiting behind it is
// read, drops nobody; a node still silent at the next sweep is dropped, and each time it speaks
// again it is back up, its ready replica routable, its blocks one full copy from the agent's memory
// (a silent node's blocks are cleared on drop).
import { strict as assert } from 'node:assert';
import { test, type TestContext } from 'node:test';
import { inProcessPipe } from '../../src/cli/cluster.js';
import type { KvDelta } from '../../src/kv/index.js';
import { AgentSession, ControlPlane, LinkClient, LinkServer, makeKeyPair, type AgentMessage, type GatewayMessage, type ReplicaState } from '../../src/link/index.js';
import { createLogger } from '../../src/log/index.js';
import { spec } from '../actors/scripted.js';
import { waitFor } from '../support/wait.js';

const ra: ReplicaState = { id: 'ra', model: 'm', adapters: [], url: 'http://127.0.0.1:1/', apiKey: undefined, generation: 1, kvEvents: true, blockSizeTokens: 16, hashSeed: '0', dataParallelSize: 1 };

interface Transport {
  /** The node's public key as cluster.nodes lists it; none for serve's own node. */
  readonly publicKey: string | undefined;
  readonly secretKey: string | undefined;
  /** Wires the plane and the agent together; returns the agent's peer id as the plane sees it. */
  connect(t: TestContext, plane: () => ControlPlane, agent: () => AgentSession): Promise<string>;
  send(peer: string, msg: GatewayMessage): void;
  agentSend(seq: number, msg: AgentMessage): void;
}

function inProcess(): Transport {
  const late: { plane?: ControlPlane; agent?: AgentSession } = {};
  const toAgent = inProcessPipe((m: GatewayMessage) => late.agent?.receive(m));
  const toPlane = inProcessPipe((m: { seq: number; msg: AgentMessage }) => late.plane?.receive('local', m.seq, m.msg));
  return {
    publicKey: undefined,
    secretKey: undefined,
    connect: (_t, plane, agent) => {
      late.plane = plane();
      late.agent = agent();
      return Promise.resolve('local');
    },
    send: (_peer, msg) => toAgent(msg),
    agentSend: (seq, msg) => toPlane({ seq, msg }),
  };
}

function zeromq(): Transport {
  const gatewayKeys = makeKeyPair();
  const nodeKeys = makeKeyPair();
  const late: { server?: LinkServer; client?: LinkClient } = {};
  return {
    publicKey: nodeKeys.publicKey,
    secretKey: nodeKeys.secretKey,
    connect: async (t, plane, agent) => {
      const server = new LinkServer({
        endpoint: 'tcp://127.0.0.1:*',
        keys: gatewayKeys,
        allowed: () => new Map([[nodeKeys.publicKey, 'a']]),
        onMessage: (peer, seq, msg) => plane().receive(peer, seq, msg),
        onRefused: (reason, fields) => plane().refuse(reason, fields),
        maxMessageBytes: 1024 * 1024,
      });
      late.server = server;
      t.after(() => server.close());
      const endpoint = await server.start();
      const client = new LinkClient({
        endpoint,
        serverKey: gatewayKeys.publicKey,
        keys: nodeKeys,
        onMessage: (m) => agent().receive(m),
        onConnect: () => agent().heartbeat(),
        onOverflow: () => agent().join(),
        maxMessageBytes: 1024 * 1024,
      });
      late.client = client;
      t.after(() => client.close());
      client.start();
      return '';
    },
    send: (peer, msg) => late.server?.send(peer, msg),
    agentSend: (seq, msg) => late.client?.send(seq, msg),
  };
}

for (const [name, make] of [
  ['the in-process pipe', inProcess],
  ['the ZeroMQ link', zeromq],
] as const) {
  void test(`rejoin: a stall of the gateway itself drops nobody; a node silent past silent_after_ms and heard from again is back in routing with a full copy of its blocks, each time (${name})`, { timeout: 60_000 }, async (t) => {
    const transport = make();
    let now = 0;
    const applied: KvDelta<bigint>[] = [];
    const resets: string[] = [];
    const lines: string[] = [];
    const plane: ControlPlane = new ControlPlane({
      nodes: [{ name: 'a', publicKey: transport.publicKey }],
      local: transport.publicKey === undefined ? { peer: 'local', node: 'a' } : undefined,
      place: (nodes) => ({
        byNode: new Map(nodes.map((n) => [n.name, [{ replicaId: 'ra', model: 'm', adapters: [], shards: [spec({ replicaId: 'ra', shardId: 'ra-r0' })], blockSizeTokens: 16, hashSeed: '0', dataParallelSize: 1, capacityBlocks: 100 }]])),
        unplaced: [],
      }),
      writer: {
        apply: (node, id, d) => {
          if (plane.ownerOf(id) !== node) return false;
          applied.push(d);
          return true;
        },
        reset: (id, why) => resets.push(`${id}:${why}`),
        forget: () => undefined,
      },
      models: ['m'],
      send: (peer, msg) => transport.send(peer, msg),
      silentAfterMs: 1_000,
      log: createLogger({ sink: (l) => lines.push(l) }),
      now: () => now,
    });
    const agent = new AgentSession({
      inventory: { name: 'a', addr: '127.0.0.1', devices: [], ports: { httpBase: 8100, kvEventsBase: 5600 } },
      secretKey: transport.secretKey,
      send: (seq, msg) => transport.agentSend(seq, msg),
      onAssign: () => undefined,
    });
    await transport.connect(t, () => plane, () => agent);
    const up = (): boolean => plane.nodes()[0]?.state === 'up' && plane.ready('m').length === 1;
    agent.join();
    agent.setReplicas([ra], []);
    agent.kvSink.delta('ra', { added: [1n], removed: [] });
    await waitFor(() => up() && applied.some((d) => d.added.includes(1n)), { what: 'the node up with its replica and first block' });

    // The gateway's own loop blocked past silent_after_ms: its timer ran first, before the word that
    // waited behind it was read. That word, read before the next sweep, keeps the node up.
    now += 5_000;
    plane.sweep();
    assert.ok(up(), 'one sweep after a stall drops nobody');
    agent.heartbeat();
    await waitFor(() => plane.nodes()[0]?.lastSeenMsAgo === 0, { what: 'the heartbeat that waited to be read' });
    plane.sweep();
    assert.ok(up());
    assert.deepEqual([plane.stats.silences, resets], [0, []]);

    for (const round of [1, 2]) {
      now += 5_000;
      plane.sweep();
      plane.sweep();
      assert.equal(plane.stats.silences, round);
      assert.equal(plane.nodes()[0]?.state, 'silent');
      assert.deepEqual(plane.ready('m'), []);
      const before = applied.length;
      // Kept by the agent while the gateway does not listen: it is in the full copy that follows.
      agent.kvSink.delta('ra', { added: [BigInt(round + 1)], removed: [] });
      agent.heartbeat();
      await waitFor(() => up() && applied.length >= before + 2, { what: `round ${round}: the node back up with its replica and a full copy (state ${plane.nodes()[0]?.state}, agent ${agent.state})` });
      const copy = applied.slice(before);
      assert.equal(copy[0]?.reset, 'requested', 'the copy starts with a reset of the whole replica');
      assert.deepEqual(
        copy.slice(1).flatMap((d) => d.added),
        Array.from({ length: round + 1 }, (_, i) => BigInt(i + 1)),
      );
    }
    assert.equal(resets.filter((r) => r === 'ra:node-silent').length, 2);
    const joins = lines.map((l) => JSON.parse(l) as { msg: string; rejoined?: boolean }).filter((l) => l.msg === 'link.node.joined');
    assert.deepEqual(joins.map((l) => l.rejoined), [false, true, true], 'the log tells a node back from silence from a first join');
  });
}
