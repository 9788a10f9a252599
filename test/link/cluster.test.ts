// A gateway and node agents as separate processes, each agent on its own loopback address, with sim
// engines: placement over the nodes that joined, precise routing to a replica on another node,
// refusal of an unlisted key, refusal (counted) of blocks a node sends for a replica it does not run,
// precise routing again after an agent and a gateway restart, and `ctl status` showing every node's actors.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { AgentSession, LinkClient, readKeyFile } from '../../src/link/index.js';
import { waitFor } from '../support/wait.js';
import { loggedEvent } from '../support/serve.js';
import { ask, cluster, metric, nodesView, routedPrecise, run } from './cluster-harness.js';

const catalog = `models:
  qwen3:
    profiles:
      - { name: one, engine: sim, gpu_class: t4, tp: 1, model_path: qwen3, kv_events: true, args: [--tokenizer, bytes] }
replicas:
  - { model: qwen3, profile: one, count: 2 }`;

const prompt = (i: number): string => `node routing ${i}: tell me about the gateway. `.repeat(30);

void test('cluster: replicas placed over two agents, routed precise across nodes, unlisted key refused, restarts of either side resume precise routing', { timeout: 240_000 }, async (t) => {
  const c = await cluster(t, ['a', 'b', 'rogue', 'mallory']);
  const [a, b, rogue, mallory] = c.nodes;
  if (a === undefined || b === undefined || rogue === undefined || mallory === undefined) throw new Error('four nodes');
  // The rogue node's key is not listed. Mallory's is, but it has no devices, so nothing is placed there.
  let gw = run(t, ['serve', '--config', c.gatewayConfig(catalog, [a, b, mallory])], c.dir);
  await waitFor(() => loggedEvent(gw.err, 'serve.listening', { nodes: ['a', 'b', 'mallory'] }), { timeoutMs: 20_000, what: `the gateway to bind its link (stderr: ${gw.err.slice(-400)})` });
  const agentA = run(t, ['agent', '--config', c.agentConfig(a)], a.dir);
  let agentB = run(t, ['agent', '--config', c.agentConfig(b)], b.dir);
  const unlisted = run(t, ['agent', '--config', c.agentConfig(rogue)], rogue.dir);
  await waitFor(() => loggedEvent(gw.err, 'serve.ready', { replicas: 2 }), { timeoutMs: 60_000, what: `both replicas ready (gateway: ${gw.err.slice(-800)})` });
  const nodes = await nodesView(c.gatewayPort);
  assert.deepEqual([...nodes.keys()], ['a', 'b', 'mallory']);
  assert.equal(nodes.get('a')?.state, 'up');
  // One replica on each node (which is which depends on who joined first; placement then keeps it).
  assert.equal(nodes.get('a')?.ready.length, 1);
  assert.deepEqual([...(nodes.get('a')?.ready ?? []), ...(nodes.get('b')?.ready ?? [])].sort(), ['qwen3-one-0', 'qwen3-one-1']);

  // `ctl status` shows every node: each remote node, its replica under it, that replica's shard under that.
  const onA = nodes.get('a')?.ready[0] ?? '';
  const status = run(t, ['ctl', 'status', '--url', `http://127.0.0.1:${c.gatewayPort}`], c.dir);
  await waitFor(() => status.child.exitCode !== null && status.child.stdout.readableEnded, { timeoutMs: 20_000, what: `ctl status to answer (stderr: ${status.err})` });
  assert.equal(status.child.exitCode, 0, status.err);
  const lines = status.out.split('\n');
  const lineOf = (re: RegExp): number => lines.findIndex((l) => re.test(l));
  const nodeA = lineOf(/^node:a\s+up\b/);
  const replicaA = lineOf(new RegExp(`^  replica:${onA}\\s+ready\\b`));
  const shardA = lineOf(new RegExp(`^    shard:${onA}-r0\\s+ready\\b`));
  const nodeB = lineOf(/^node:b\s+up\b/);
  assert.ok(nodeA >= 0 && nodeB >= 0 && replicaA > nodeA && shardA > replicaA && (nodeB < nodeA || nodeB > shardA), status.out);

  // Every replica runs on another process's node; the blocks its engine stored came over the link.
  const hit = await routedPrecise(c.gatewayPort, 'a precise hit on a replica of a remote node', prompt(1));
  assert.match(hit.route, /^precise/);

  // The unlisted node never got past the handshake: refused, logged with its key, counted.
  await waitFor(() => gw.err.includes('"reason":"unlisted-key"'), { timeoutMs: 10_000, what: 'the refusal of the unlisted key in the log' });
  assert.ok(gw.err.includes(rogue.key.publicKey));
  assert.ok((await metric(c.gatewayPort, /^llmgw_link_refused_total\{reason="unlisted-key"\} (\S+)$/m)) > 0);
  assert.equal((await nodesView(c.gatewayPort)).has('rogue'), false);
  await unlisted.stop();

  // A listed node announcing blocks and a ready state for a replica it does not run: refused and counted.
  const keys = readKeyFile(mallory.key.file);
  const late: { client?: LinkClient } = {};
  const session = new AgentSession({
    inventory: { name: 'mallory', addr: mallory.addr, devices: [], ports: { httpBase: mallory.httpBase, kvEventsBase: mallory.kvBase } },
    secretKey: keys.secretKey,
    send: (seq, m) => late.client?.send(seq, m),
    onAssign: () => undefined,
  });
  const client = new LinkClient({
    endpoint: `tcp://127.0.0.1:${c.linkPort}`,
    serverKey: c.gatewayKey.publicKey,
    keys,
    sourceAddr: mallory.addr,
    onMessage: (m) => session.receive(m),
    onConnect: () => session.heartbeat(),
    onOverflow: () => session.join(),
    maxMessageBytes: 1024 * 1024,
  });
  late.client = client;
  t.after(() => client.close());
  client.start();
  session.join();
  await waitFor(() => session.state === 'joined', { timeoutMs: 10_000, what: 'mallory to join' });
  const notOwner = /^llmgw_gateway_index_deltas_rejected_total\{reason="not-owner"\} (\S+)$/m;
  assert.equal(await metric(c.gatewayPort, notOwner), 0);
  session.kvSink.delta(hit.replica, { added: [1n, 2n, 3n], removed: [] });
  session.setReplicas([{ id: hit.replica, model: 'qwen3', adapters: [], url: `http://${mallory.addr}:1/`, apiKey: undefined, generation: 1, kvEvents: true, blockSizeTokens: 16, hashSeed: '0', dataParallelSize: 1 }], []);
  await waitFor(async () => (await metric(c.gatewayPort, notOwner)) > 0, { timeoutMs: 10_000, what: "mallory's blocks refused and counted" });
  await waitFor(async () => (await metric(c.gatewayPort, /^llmgw_link_refused_total\{reason="not-placed"\} (\S+)$/m)) > 0, { timeoutMs: 10_000, what: "mallory's replica state refused and counted" });
  assert.deepEqual((await nodesView(c.gatewayPort)).get('mallory')?.ready, []);
  assert.equal((await routedPrecise(c.gatewayPort, 'routing untouched by mallory', prompt(1))).replica, hit.replica);
  await client.close();

  // Agent restart: b's engine is adopted; the new agent asks the engine's replay buffer for its
  // blocks at once (the engine announces none again), so its first answer is already precise.
  // A prompt whose blocks live on b's replica: two new prompts at once go one to each replica.
  const bReplica = (await nodesView(c.gatewayPort)).get('b')?.ready[0] ?? '';
  const pair = [prompt(2), prompt(3)];
  const landed = await Promise.all(pair.map((p) => ask(c.gatewayPort, p)));
  // The gateway tokenizes for the remote replicas itself, by the plan it sent them, verified by their /tokenize.
  assert.ok(gw.err.includes('"state":"verifying"'), 'local tokenizing of the remote replicas');
  const bPrompt = pair[landed.findIndex((r) => r.replica === bReplica)] ?? assert.fail(`neither prompt landed on ${bReplica}: ${JSON.stringify(landed)}`);
  const onB = await routedPrecise(c.gatewayPort, 'a precise hit on b before the agent restart', bPrompt);
  assert.equal(onB.replica, bReplica);
  await agentB.stop('SIGKILL');
  agentB = run(t, ['agent', '--config', c.agentConfig(b)], b.dir);
  await waitFor(() => agentB.err.includes('agent.shard.adopting'), { timeoutMs: 20_000, what: `b's new agent to adopt its engine (stderr: ${agentB.err.slice(-600)})` });
  await waitFor(async () => (await nodesView(c.gatewayPort)).get('b')?.state === 'up' && agentB.err.includes('link.joined'), { timeoutMs: 20_000, what: 'b back' });
  // The replayed blocks are the stream's first non-reset change: its publisher turns streaming.
  await waitFor(async () => (await nodesView(c.gatewayPort)).get('b')?.phases.get(`publisher:${onB.replica}`) === 'streaming', {
    timeoutMs: 20_000,
    what: "the adopted engine's blocks replayed",
  });
  await waitFor(async () => (await nodesView(c.gatewayPort)).get('b')?.ready.length === 1, { timeoutMs: 20_000, what: 'b ready again' });
  // The phases travel after the replayed blocks on the same link: the index has them now.
  const again = await ask(c.gatewayPort, bPrompt);
  assert.match(again.route, /^precise/, `the first request after the agent restart is routed by the replayed blocks (${again.receipt})`);
  assert.equal(again.replica, onB.replica, again.receipt);

  // Gateway restart: both agents reconnect by themselves; their full copies rebuild the new index.
  await gw.stop('SIGKILL');
  gw = run(t, ['serve', '--config', c.gatewayConfig(catalog, [a, b, mallory])], c.dir);
  await waitFor(() => loggedEvent(gw.err, 'serve.ready', { replicas: 2 }), { timeoutMs: 30_000, what: `both replicas ready behind the new gateway (${gw.err.slice(-600)})` });
  // The new gateway placed every replica where it already ran: no engine was drained or restarted.
  assert.equal(agentA.err.includes('"to":"draining"') || agentB.err.includes('"to":"draining"'), false, 'no replica moved');
  // Nothing was sent to the new gateway before: a precise hit can only come from the full copies.
  await waitFor(async () => (await metric(c.gatewayPort, /^llmgw_gateway_index_events_applied_total (\S+)$/m)) > 0, { timeoutMs: 10_000, what: 'the agents\' full copies' });
  const after = await waitFor(
    async () => {
      const r = await ask(c.gatewayPort, prompt(1));
      return r.route.startsWith('precise') ? r : undefined;
    },
    { timeoutMs: 15_000, intervalMs: 100, what: 'precise routing after the gateway restart' },
  );
  assert.equal(after.replica, hit.replica);
  assert.ok(agentA.child.exitCode === null);
});
