// Session affinity across routers: two `llmgw serve` processes that share nothing but their config
// (the same three external sims and the same session secret) in front of one pool. The token gateway
// 1 answers with brings every later turn to the same replica through gateway 2, which never saw the
// conversation; a token a client made up is not honoured; an X-Session-ID lands on the same replica
// through either gateway.
import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { request } from 'undici';
import { main, run } from '../link/cluster-harness.js';
import { loggedEvent } from '../support/serve.js';
import { freePort, waitFor } from '../support/wait.js';

const secret = 'the cluster session secret';

async function startSim(t: TestContext): Promise<number> {
  const port = await freePort();
  const sim = spawn(process.execPath, [main, 'sim', 'serve', 'qwen3', '--host', '127.0.0.1', '--port', String(port), '--tokenizer', 'bytes'], { stdio: ['ignore', 'ignore', 'pipe'] });
  const exited = once(sim, 'exit');
  t.after(async () => {
    if (sim.exitCode === null && sim.signalCode === null) {
      sim.kill('SIGTERM');
      await exited;
    }
  });
  sim.stderr.resume();
  return port;
}

async function ask(port: number, content: string, headers: Record<string, string> = {}): Promise<{ status: number; replica: string; route: string; token: string; receipt: string }> {
  const r = await request(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'qwen3', max_tokens: 2, messages: [{ role: 'user', content }] }),
  });
  await r.body.dump();
  return {
    status: r.statusCode,
    replica: String(r.headers['x-llmgw-replica']),
    route: String(r.headers['x-llmgw-route']),
    token: String(r.headers['x-session-token']),
    receipt: String(r.headers['x-llmgw-receipt']),
  };
}

void test('session: a token from gateway 1 is honoured by gateway 2, a forged one is not, X-Session-ID agrees on both', { timeout: 120_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-session-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const sims = [await startSim(t), await startSim(t), await startSim(t)];
  const replicas = sims.map((p, i) => `  - { model: qwen3, endpoint: { name: sim-${i}, url: "http://127.0.0.1:${p}/" } }`).join('\n');
  const gateways: number[] = [];
  for (const g of ['g1', 'g2']) {
    const port = await freePort();
    const home = join(dir, g);
    mkdirSync(home);
    writeFileSync(
      join(home, 'llmgw.yaml'),
      `node: { name: ${g}, addr: 127.0.0.1 }
replicas:
${replicas}
gateway:
  host: 127.0.0.1
  port: ${port}
  router: { session_secret: "${secret}" }
`,
    );
    const gw = run(t, ['serve', '--config', join(home, 'llmgw.yaml')], home);
    await waitFor(() => loggedEvent(gw.err, 'serve.ready', { replicas: 3 }), { timeoutMs: 60_000, what: `${g} ready (${gw.err.slice(-600)})` });
    gateways.push(port);
  }
  const [g1, g2] = gateways as [number, number];

  const first = await ask(g1, 'the first turn of a conversation');
  assert.equal(first.status, 200);
  assert.match(first.token, /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/, 'a signed token');
  // Later turns through the other gateway, which never saw the first: each goes where the first went.
  for (let turn = 2; turn <= 6; turn++) {
    const next = await ask(g2, `turn ${turn} of the conversation`, { 'x-session-token': first.token });
    assert.deepEqual({ replica: next.replica, route: next.route }, { replica: first.replica, route: 'session' }, next.receipt);
  }

  // A client naming a replica of its choice in llm-d's unsigned form is routed as if it named none.
  const other = ['sim-0', 'sim-1', 'sim-2'].find((r) => r !== first.replica) ?? 'sim-0';
  const forged = await ask(g2, 'a forged placement', { 'x-session-token': Buffer.from(other).toString('base64') });
  assert.equal(forged.status, 200);
  assert.notEqual(forged.route, 'session', forged.receipt);

  const viaG1 = await ask(g1, 'a named conversation', { 'x-session-id': 'conversation-42' });
  const viaG2 = await ask(g2, 'its next turn', { 'x-session-id': 'conversation-42' });
  assert.equal(viaG1.route, 'session', viaG1.receipt);
  assert.equal(viaG2.route, 'session', viaG2.receipt);
  assert.equal(viaG2.replica, viaG1.replica, 'both gateways hash the id to the same replica');
});
