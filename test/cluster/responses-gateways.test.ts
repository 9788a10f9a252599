// Stored Responses across routers: two `llmgw serve` processes on one real PostgreSQL (store.url) in
// front of the same sim. A response made through gateway 1 is read, and its conversation continued
// with previous_response_id, through gateway 2, which holds nothing of it in memory.
import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { request } from 'undici';
import { main, run } from '../link/cluster-harness.js';
import { startPostgres } from '../support/postgres.js';
import { loggedEvent } from '../support/serve.js';
import { freePort, waitFor } from '../support/wait.js';

interface Made {
  readonly status: number;
  readonly body: { id?: string; usage?: { input_tokens?: number }; output_text?: string; error?: unknown };
}

async function respond(port: number, fields: Record<string, unknown>): Promise<Made> {
  const r = await request(`http://127.0.0.1:${port}/v1/responses`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'qwen3', max_output_tokens: 4, ...fields }),
  });
  return { status: r.statusCode, body: (await r.body.json()) as Made['body'] };
}

void test('responses: a previous_response_id issued by gateway 1 continues on gateway 2 over one PostgreSQL', { timeout: 120_000 }, async (t) => {
  const pg = await startPostgres();
  t.after(() => pg.close());
  const url = pg.database();
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-responses-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const simPort = await freePort();
  const sim = spawn(process.execPath, [main, 'sim', 'serve', 'qwen3', '--host', '127.0.0.1', '--port', String(simPort), '--tokenizer', 'bytes'], { stdio: ['ignore', 'ignore', 'pipe'] });
  const simExited = once(sim, 'exit');
  t.after(async () => {
    if (sim.exitCode === null && sim.signalCode === null) {
      sim.kill('SIGTERM');
      await simExited;
    }
  });
  sim.stderr.resume();
  const gateways: number[] = [];
  for (const g of ['g1', 'g2']) {
    const port = await freePort();
    const home = join(dir, g);
    mkdirSync(home);
    writeFileSync(
      join(home, 'llmgw.yaml'),
      `node: { name: ${g}, addr: 127.0.0.1 }
replicas:
  - { model: qwen3, endpoint: { name: sim-0, url: "http://127.0.0.1:${simPort}/" } }
store: { url: "${url}" }
gateway:
  host: 127.0.0.1
  port: ${port}
`,
    );
    const gw = run(t, ['serve', '--config', join(home, 'llmgw.yaml')], home);
    await waitFor(() => loggedEvent(gw.err, 'serve.ready', { replicas: 1 }), { timeoutMs: 60_000, what: `${g} ready (${gw.err.slice(-600)})` });
    gateways.push(port);
  }
  const [g1, g2] = gateways as [number, number];

  const first = await respond(g1, { input: 'remember the number seventeen, and say something about it' });
  assert.equal(first.status, 200, JSON.stringify(first.body));
  const id = first.body.id ?? '';
  assert.match(id, /^resp_/);

  const read = await request(`http://127.0.0.1:${g2}/v1/responses/${id}`);
  assert.equal(read.statusCode, 200, 'gateway 2 reads the response gateway 1 stored');
  assert.equal(((await read.body.json()) as { id?: string }).id, id);

  const fresh = await respond(g2, { input: 'and again' });
  const next = await respond(g2, { input: 'and again', previous_response_id: id });
  assert.equal(next.status, 200, JSON.stringify(next.body));
  // The conversation was rebuilt on gateway 2: its prompt holds the first turn and its answer too.
  assert.ok((next.body.usage?.input_tokens ?? 0) > (fresh.body.usage?.input_tokens ?? 0) + 40, JSON.stringify({ next: next.body.usage, fresh: fresh.body.usage }));

  // And the chain goes on back through gateway 1.
  const third = await respond(g1, { input: 'once more', previous_response_id: next.body.id });
  assert.equal(third.status, 200, JSON.stringify(third.body));
});
