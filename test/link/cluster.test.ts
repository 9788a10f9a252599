// A gateway and node agents as separate processes, each agent on its own loopback address, with sim
// engines: placement over the nodes that joined, precise routing to a replica on another node,
// refusal of an unlisted key, and precise routing again after an agent and a gateway restart.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { waitFor } from '../support/wait.js';
import { ask, cluster, metric, nodesView, routedPrecise, run } from './cluster-harness.js';

const catalog = `models:
  qwen3:
    profiles:
      - { name: one, engine: sim, gpu_class: t4, tp: 1, model_path: qwen3, kv_events: true, args: [--tokenizer, bytes] }
replicas:
  - { model: qwen3, profile: one, count: 2 }`;

const prompt = (i: number): string => `node routing ${i}: tell me about the gateway. `.repeat(30);

void test('cluster: replicas placed over two agents, routed precise across nodes, unlisted key refused, restarts of either side resume precise routing', { timeout: 240_000 }, async (t) => {
  const c = await cluster(t, ['a', 'b', 'rogue']);
  const [a, b, rogue] = c.nodes;
  if (a === undefined || b === undefined || rogue === undefined) throw new Error('three nodes');
  // Only a and b are listed: the rogue node's key is not.
  let gw = run(t, ['serve', '--config', c.gatewayConfig(catalog, [a, b])], c.dir);
  await waitFor(() => gw.out.includes('waiting for nodes a, b'), { timeoutMs: 20_000, what: `the gateway to bind its link (stderr: ${gw.err.slice(-400)})` });
  const agentA = run(t, ['agent', '--config', c.agentConfig(a)], a.dir);
  let agentB = run(t, ['agent', '--config', c.agentConfig(b)], b.dir);
  const unlisted = run(t, ['agent', '--config', c.agentConfig(rogue)], rogue.dir);
  await waitFor(() => gw.out.includes('llmgw ready: 2 replicas'), { timeoutMs: 60_000, what: `both replicas ready (gateway: ${gw.err.slice(-800)})` });
  const nodes = await nodesView(c.gatewayPort);
  assert.deepEqual([...nodes.keys()], ['a', 'b']);
  assert.equal(nodes.get('a')?.state, 'up');
  // One replica on each node (which is which depends on who joined first; placement then keeps it).
  assert.equal(nodes.get('a')?.ready.length, 1);
  assert.deepEqual([...(nodes.get('a')?.ready ?? []), ...(nodes.get('b')?.ready ?? [])].sort(), ['qwen3-one-0', 'qwen3-one-1']);

  // Every replica runs on another process's node; the blocks its engine stored came over the link.
  const hit = await routedPrecise(c.gatewayPort, 'a precise hit on a replica of a remote node', prompt(1));
  assert.match(hit.route, /^precise/);

  // The unlisted node never got past the handshake: refused, logged with its key, counted.
  await waitFor(() => gw.err.includes('"reason":"unlisted-key"'), { timeoutMs: 10_000, what: 'the refusal of the unlisted key in the log' });
  assert.ok(gw.err.includes(rogue.key.publicKey));
  assert.ok((await metric(c.gatewayPort, /^llmgw_link_refused_total\{reason="unlisted-key"\} (\S+)$/m)) > 0);
  assert.equal((await nodesView(c.gatewayPort)).has('rogue'), false);
  await unlisted.stop();

  // Agent restart: b's engines are adopted, its full copy rebuilds its replica's blocks.
  const onB = await routedPrecise(c.gatewayPort, 'a precise hit before the agent restart', prompt(2));
  await agentB.stop('SIGKILL');
  agentB = run(t, ['agent', '--config', c.agentConfig(b)], b.dir);
  await waitFor(() => agentB.err.includes('agent.shard.adopting'), { timeoutMs: 20_000, what: `b's new agent to adopt its engine (stderr: ${agentB.err.slice(-600)})` });
  await waitFor(async () => (await nodesView(c.gatewayPort)).get('b')?.ready.length === 1, { timeoutMs: 20_000, what: 'b ready again' });
  const again = await waitFor(
    async () => {
      const r = await ask(c.gatewayPort, prompt(2));
      return r.route.startsWith('precise') && r.replica === onB.replica ? r : undefined;
    },
    { timeoutMs: 15_000, intervalMs: 100, what: 'precise routing to the same replica after the agent restart' },
  );
  assert.equal(again.replica, onB.replica);

  // Gateway restart: both agents reconnect by themselves; their full copies rebuild the new index.
  await gw.stop('SIGKILL');
  gw = run(t, ['serve', '--config', c.gatewayConfig(catalog, [a, b])], c.dir);
  await waitFor(() => gw.out.includes('llmgw ready: 2 replicas'), { timeoutMs: 30_000, what: `both replicas ready behind the new gateway (${gw.err.slice(-600)})` });
  // Nothing was sent to the new gateway before: a precise hit can only come from the full copies.
  assert.ok((await metric(c.gatewayPort, /^llmgw_gateway_index_events_applied_total (\S+)$/m)) > 0, 'the agents sent their full copies');
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
