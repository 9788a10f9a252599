// Time to consistency of the agent link: after a link drop, a gateway restart and an agent restart,
// how long until the gateway's shared index holds exactly the blocks the agents' engines hold. Two
// agents, two replicas each, real CURVE sockets on loopback; the engines' block sets are the agents'
// copies (what their mirrors hold). Beside each figure: the same full copy through the in-process
// path of `llmgw serve` (no sockets), measured in the same run, and the ratio.
// Run: npx tsc -p . && node dist/bench/cluster.js   (writes bench/results/cluster.json)
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { IndexWriter } from '../src/kv/index.js';
import { ClusterIndex, IndexReader, MAX_SLOTS } from '../src/kv/index.js';
import { spec } from '../test/actors/scripted.js';
import { AgentSession, ControlPlane, defaultClusterConfig, LinkClient, LinkServer, makeKeyPair, type AssignedReplica, type GatewayMessage, type KeyPair } from '../src/link/index.js';

const BLOCKS = Number(process.env.BLOCKS ?? 20_000);
const RUNS = Number(process.env.RUNS ?? 5);
const HEARTBEAT_MS = 100;
const nodes = ['a', 'b'] as const;
const replicasOf = { a: ['a-0', 'a-1'], b: ['b-0', 'b-1'] } as const;

const assigned = (id: string): AssignedReplica => ({ replicaId: id, model: 'm', adapters: [], shards: [spec({ replicaId: id, shardId: `${id}-r0` })], blockSizeTokens: 16, hashSeed: '0', dataParallelSize: 1, capacityBlocks: BLOCKS * 2 });

// The engines' block sets: random 64-bit keys, distinct across replicas.
const engineBlocks = new Map<string, bigint[]>();
for (const n of nodes) for (const id of replicasOf[n]) engineBlocks.set(id, [...new BigUint64Array(randomBytes(8 * BLOCKS).buffer)]);

interface GatewaySide {
  readonly plane: ControlPlane;
  readonly writer: IndexWriter;
  readonly reader: IndexReader;
  readonly index: ClusterIndex;
  close(): Promise<void>;
}

function gatewaySide(send: (plane: ControlPlane) => (peer: string, m: GatewayMessage) => void, keys: Readonly<Record<'a' | 'b', KeyPair>>): GatewaySide {
  const index = new ClusterIndex({ capacityBlocks: BLOCKS * 8 });
  const late: { plane?: ControlPlane } = {};
  const writer = new IndexWriter({ index, slotCount: MAX_SLOTS, ownerOf: (id) => late.plane?.ownerOf(id), predictionTtlMs: 0, sweepIntervalMs: 0 });
  const plane = new ControlPlane({
    nodes: nodes.map((name) => ({ name, publicKey: keys[name].publicKey })),
    local: undefined,
    place: (known) => ({ byNode: new Map(known.map((k) => [k.name, (k.name === 'a' ? replicasOf.a : replicasOf.b).map(assigned)])), unplaced: [] }),
    writer,
    models: ['m'],
    send: (peer, m) => sender(peer, m),
    silentAfterMs: 10 * HEARTBEAT_MS,
  });
  late.plane = plane;
  const sender = send(plane);
  const timer = setInterval(() => plane.sweep(), HEARTBEAT_MS);
  return {
    plane,
    writer,
    index,
    reader: new IndexReader(index.buffer),
    close: () => {
      clearInterval(timer);
      writer.close();
      return Promise.resolve();
    },
  };
}

// The index holds exactly the engines' blocks: every key of every replica in that replica's slot,
// and nothing else.
function consistent(g: GatewaySide): boolean {
  let total = 0;
  for (const [id, keys] of engineBlocks) {
    const slot = g.writer.slotsOf(id)?.held.find((h) => !h.offload)?.slot;
    if (slot === undefined) return false;
    const bit = 1n << BigInt(slot);
    for (const k of keys) if ((g.reader.holds(k) & bit) === 0n) return false;
    total += keys.length;
  }
  return g.index.size === total;
}

async function waitUntil(pred: () => boolean, timeoutMs = 30_000): Promise<void> {
  const t0 = performance.now();
  while (!pred()) {
    if (performance.now() - t0 > timeoutMs) throw new Error('condition not reached within the bound');
    await sleep(2);
  }
}

async function untilConsistent(g: GatewaySide, t0: number, timeoutMs = 30_000): Promise<number> {
  for (;;) {
    if (consistent(g)) return performance.now() - t0;
    if (performance.now() - t0 > timeoutMs) throw new Error('no consistency within the bound');
    await sleep(2);
  }
}

/** One node's agent: its session (the engine's blocks as its mirror hands them over) and its link. */
function agentSide(node: 'a' | 'b', keys: KeyPair, serverKey: string, endpoint: string): { session: AgentSession; reconnect(): Promise<void>; drop(): Promise<void>; close(): Promise<void> } {
  const late: { client?: LinkClient } = {};
  const session = new AgentSession({
    inventory: { name: node, addr: '127.0.0.1', devices: [], ports: { httpBase: 1, kvEventsBase: 2 } },
    secretKey: keys.secretKey,
    send: (seq, m) => late.client?.send(seq, m),
    onAssign: () => undefined,
  });
  // What a publisher does on start: a reset and every key its mirror holds.
  for (const id of replicasOf[node]) session.kvSink.delta(id, { added: engineBlocks.get(id) ?? [], removed: [], reset: 'requested' });
  const connect = (): LinkClient => {
    const c = new LinkClient({ endpoint, serverKey, keys, onMessage: (m) => session.receive(m), onConnect: () => session.heartbeat(), onOverflow: () => session.join(), maxMessageBytes: defaultClusterConfig.maxMessageBytes });
    late.client = c;
    c.start();
    return c;
  };
  let client = connect();
  const timer = setInterval(() => session.heartbeat(), HEARTBEAT_MS);
  session.join();
  return {
    session,
    // The connection goes; the agent and its engines stay.
    drop: () => client.close(),
    // A new connection: the session asks to be admitted again and sends its full copy.
    reconnect: () => {
      client = connect();
      session.join();
      return Promise.resolve();
    },
    close: async () => {
      clearInterval(timer);
      await client.close();
    },
  };
}

async function linkedGateway(serverKeys: KeyPair, keys: Readonly<Record<'a' | 'b', KeyPair>>, endpoint: string): Promise<{ g: GatewaySide; server: LinkServer; at: string }> {
  const late: { server?: LinkServer } = {};
  const g = gatewaySide(() => (peer, m) => late.server?.send(peer, m), keys);
  const server = new LinkServer({
    endpoint,
    keys: serverKeys,
    allowed: () => new Map(nodes.map((n) => [keys[n].publicKey, n])),
    onMessage: (peer, seq, msg) => g.plane.receive(peer, seq, msg),
    onRefused: (r, fields) => g.plane.refuse(r, fields),
    maxMessageBytes: defaultClusterConfig.maxMessageBytes,
  });
  late.server = server;
  const at = await server.start();
  return { g, server, at };
}

// The same full copies through the in-process path (serve's own node): no sockets, no encoding.
async function inProcess(keys: Readonly<Record<'a' | 'b', KeyPair>>): Promise<number> {
  const sessions = new Map<string, AgentSession>();
  const g = gatewaySide(() => (peer, m) => queueMicrotask(() => sessions.get(peer)?.receive(m)), keys);
  const t0 = performance.now();
  for (const n of nodes) {
    const s = new AgentSession({
      inventory: { name: n, addr: '127.0.0.1', devices: [], ports: { httpBase: 1, kvEventsBase: 2 } },
      secretKey: keys[n].secretKey,
      send: (seq, m) => queueMicrotask(() => g.plane.receive(n, seq, m)),
      onAssign: () => undefined,
    });
    for (const id of replicasOf[n]) s.kvSink.delta(id, { added: engineBlocks.get(id) ?? [], removed: [], reset: 'requested' });
    sessions.set(n, s);
    s.join();
  }
  const ms = await untilConsistent(g, t0);
  await g.close();
  return ms;
}

const stats = (xs: number[]): { medianMs: number; minMs: number; maxMs: number } => {
  const s = [...xs].sort((x, y) => x - y);
  return { medianMs: s[Math.floor(s.length / 2)] ?? 0, minMs: s[0] ?? 0, maxMs: s.at(-1) ?? 0 };
};

const keys = { a: makeKeyPair(), b: makeKeyPair() };
const serverKeys = makeKeyPair();
const runs = { inProcess: [] as number[], linkDrop: [] as number[], gatewayRestart: [] as number[], agentRestart: [] as number[] };
for (let r = 0; r < RUNS; r++) {
  runs.inProcess.push(await inProcess(keys));
  let gw = await linkedGateway(serverKeys, keys, 'tcp://127.0.0.1:*');
  const endpoint = gw.at;
  const agents = { a: agentSide('a', keys.a, serverKeys.publicKey, endpoint), b: agentSide('b', keys.b, serverKeys.publicKey, endpoint) };
  await untilConsistent(gw.g, performance.now());

  // Link drop: node a's connection goes for longer than the silence bound, so the gateway clears
  // its blocks; the link comes back and the full copy rebuilds them.
  await agents.a.drop();
  await waitUntil(() => gw.g.plane.nodes().find((n) => n.name === 'a')?.state === 'silent');
  let t0 = performance.now();
  await agents.a.reconnect();
  runs.linkDrop.push(await untilConsistent(gw.g, t0));

  // Gateway restart: a new gateway with an empty index on the same port; the agents reconnect by themselves.
  await gw.server.close();
  await gw.g.close();
  t0 = performance.now();
  gw = await linkedGateway(serverKeys, keys, endpoint);
  runs.gatewayRestart.push(await untilConsistent(gw.g, t0));

  // Agent restart: node b's agent is replaced; its new mirror hands over the engine's blocks. The
  // index is still right until the new agent's hello clears b's replicas: time from the new start.
  await agents.b.close();
  const joined = gw.g.writer.stats.resets.get('node-joined') ?? 0;
  t0 = performance.now();
  const b2 = agentSide('b', keys.b, serverKeys.publicKey, endpoint);
  await waitUntil(() => (gw.g.writer.stats.resets.get('node-joined') ?? 0) > joined);
  runs.agentRestart.push(await untilConsistent(gw.g, t0));

  await agents.a.close();
  await b2.close();
  await gw.server.close();
  await gw.g.close();
}

const base = stats(runs.inProcess);
const row = (xs: number[]) => {
  const s = stats(xs);
  return { ...s, ratioToInProcess: Number((s.medianMs / Math.max(0.001, base.medianMs)).toFixed(2)) };
};
const result = {
  date: new Date().toISOString(),
  node: process.version,
  cpu: cpus()[0]?.model ?? 'unknown',
  cores: availableParallelism(),
  loadAverage1m: loadavg()[0] ?? 0,
  shape: `2 agents x 2 replicas x ${BLOCKS} blocks (${4 * BLOCKS} keys), CURVE link on loopback, heartbeat ${HEARTBEAT_MS} ms, ${RUNS} runs, consistency polled every 2 ms`,
  target: { underMs: 1000 },
  inProcessFullCopy: base,
  linkDrop: row(runs.linkDrop),
  gatewayRestart: row(runs.gatewayRestart),
  agentRestart: row(runs.agentRestart),
  runs,
};
console.log(`cluster: ${result.shape} (${result.cpu}, ${result.cores} cores, load ${result.loadAverage1m.toFixed(2)})`);
const line = (name: string, s: { medianMs: number; minMs: number; maxMs: number; ratioToInProcess?: number }): void =>
  console.log(`  ${name.padEnd(30)} median ${s.medianMs.toFixed(1).padStart(7)} ms  (min ${s.minMs.toFixed(1)}, max ${s.maxMs.toFixed(1)})${s.ratioToInProcess === undefined ? '' : `  x${s.ratioToInProcess} of in-process`}`);
line('in-process full copy', base);
line('link drop -> consistent', result.linkDrop);
line('gateway restart -> consistent', result.gatewayRestart);
line('agent restart -> consistent', result.agentRestart);
console.log(`  target: < ${result.target.underMs} ms on loopback`);
const dir = new URL('../../bench/results/', import.meta.url);
mkdirSync(dir, { recursive: true });
writeFileSync(new URL('cluster.json', dir), `${JSON.stringify(result, null, 2)}\n`);
