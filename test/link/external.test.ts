// A sim started outside llmgw, binding its own KV-event publisher as vLLM does by default, fronted
// as an external replica: the gateway health-checks it, connects its SUB to the engine's PUB,
// indexes its blocks (those stored before the gateway started too, from its replay buffer), and
// routes a repeated prompt to it precisely.
import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { freePort, waitFor } from '../support/wait.js';
import { loggedEvent } from '../support/serve.js';
import { ask, main, metric, run } from './cluster-harness.js';

void test('external replica: a sim llmgw did not start is health-checked, its bound KV events indexed, and routed to precisely', { timeout: 120_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-external-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const [http, events, replay, port] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const kv = JSON.stringify({ enable_kv_cache_events: true, publisher: 'zmq', endpoint: `tcp://*:${events}`, replay_endpoint: `tcp://*:${replay}`, topic: '' });
  const sim = spawn(
    process.execPath,
    [main, 'sim', 'serve', 'outside', '--host', '127.0.0.1', '--port', String(http), '--tokenizer', 'bytes', '--block-size', '16', '--prefix-caching-hash-algo', 'sha256_cbor', '--kv-events-config', kv],
    { env: { ...process.env, PYTHONHASHSEED: '7' }, stdio: ['ignore', 'ignore', 'pipe'] },
  );
  const simExited = once(sim, 'exit');
  t.after(async () => {
    if (sim.exitCode === null && sim.signalCode === null) {
      sim.kill('SIGTERM');
      await simExited;
    }
  });
  writeFileSync(
    join(dir, 'gateway.yaml'),
    `node: { name: gateway, addr: 127.0.0.1 }
replicas:
  - model: outside
    endpoint: { name: outside-0, url: "http://127.0.0.1:${http}/", kv_events: "tcp://127.0.0.1:${events}", replay: "tcp://127.0.0.1:${replay}", hash_seed: "7", block_size: 16 }
gateway:
  host: 127.0.0.1
  port: ${port}
  router: { prediction_ttl_ms: 0 }
`,
  );
  const gw = run(t, ['serve', '--config', join(dir, 'gateway.yaml')], dir);
  await waitFor(() => loggedEvent(gw.err, 'serve.ready', { replicas: 1, models: ['outside'] }), { timeoutMs: 30_000, what: `the external replica healthy (gateway: ${gw.err.slice(-600)})` });
  const prompt = 'an engine someone else runs. '.repeat(30);
  const first = await ask(port, prompt, 'outside');
  assert.equal(first.status, 200);
  assert.equal(first.replica, 'outside-0');
  await waitFor(async () => (await metric(port, /^llmgw_gateway_index_events_applied_total (\S+)$/m)) > 0, { timeoutMs: 15_000, what: "the engine's stored blocks indexed" });
  const again = await waitFor(
    async () => {
      const r = await ask(port, prompt, 'outside');
      return r.route.startsWith('precise') ? r : undefined;
    },
    { timeoutMs: 15_000, intervalMs: 100, what: 'a precise decision for the repeated prompt' },
  );
  assert.equal(again.replica, 'outside-0');

  // A new gateway in front of the running engine: it asks the engine's replay buffer for the blocks
  // it already holds (they are not announced again), so the first request is routed precisely.
  await gw.stop();
  const gw2 = run(t, ['serve', '--config', join(dir, 'gateway.yaml')], dir);
  await waitFor(() => loggedEvent(gw2.err, 'serve.ready', { replicas: 1, models: ['outside'] }), { timeoutMs: 30_000, what: `the external replica healthy behind the new gateway (${gw2.err.slice(-600)})` });
  await waitFor(async () => (await metric(port, /^llmgw_gateway_index_events_applied_total (\S+)$/m)) > 0, { timeoutMs: 15_000, what: "the engine's earlier blocks replayed" });
  // The engine does not announce blocks it already holds again, so precise here comes from the replay
  // (polled: the new gateway's first tokenization of the prompt may still be on its way).
  const late = await waitFor(
    async () => {
      const r = await ask(port, prompt, 'outside');
      return r.route.startsWith('precise') ? r : undefined;
    },
    { timeoutMs: 15_000, intervalMs: 100, what: 'precise routing by blocks stored before this gateway started' },
  );
  assert.equal(late.replica, 'outside-0');

  // The engine goes away: it leaves routing (503 for its model), and nothing else breaks.
  sim.kill('SIGTERM');
  await simExited;
  await waitFor(async () => (await ask(port, prompt, 'outside')).status === 503, { timeoutMs: 15_000, what: 'the dead external replica out of routing' });
});
