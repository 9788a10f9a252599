// `llmgw serve` with a runtime_lora profile: the catalog's adapters reach the gateway through the
// agent (engines/ describes how the sim loads them, the agent hands that to the gateway's view), the
// sim is started with runtime loading allowed, and a request for an adapter loads it on demand.
import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { freePort, waitFor } from '../support/wait.js';

const main = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));

void test('llmgw serve: an adapter of a runtime_lora profile is listed with its base and loaded on first use', { timeout: 90_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-lora-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const [port, http, kv] = [await freePort(), await freePort(), await freePort()];
  writeFileSync(
    join(dir, 'llmgw.yaml'),
    `engines:
  sim: { bin: "" }
kv_events: { hash_seed: "0", hash_algo: sha256_cbor }
node:
  name: local
  addr: 127.0.0.1
  devices: []
  ports: { http_base: ${http}, kv_events_base: ${kv} }
models:
  qwen3:
    served_model_name: qwen3
    profiles:
      - name: sim-cpu
        engine: sim
        gpu_class: cpu
        tp: 1
        model_path: qwen3
        kv_events: true
        runtime_lora: true
        adapters: [{ name: sql, path: /adapters/sql }]
        args: [--tokenizer, bytes, --lora-load-time-ms, "50"]
replicas:
  - { model: qwen3, profile: sim-cpu, count: 1 }
gateway:
  host: 127.0.0.1
  port: ${port}
`,
  );
  const child = spawn(process.execPath, [main, 'serve', '--config', join(dir, 'llmgw.yaml')], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = once(child, 'exit');
  t.after(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([exited, new Promise((r) => (timer = setTimeout(r, 20_000)))]).finally(() => clearTimeout(timer));
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  });
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
  await waitFor(() => out.includes('llmgw ready'), { timeoutMs: 60_000, what: `serve to print it is ready (stderr: ${err.slice(-500)})` });
  const base = `http://127.0.0.1:${port}`;

  const models = await request(`${base}/v1/models`);
  const { data } = (await models.body.json()) as { data: { id: string; parent: string | null }[] };
  assert.deepEqual(data.map((m) => [m.id, m.parent]), [['qwen3', null], ['sql', 'qwen3']]);

  const chat = async (model: string) => {
    const r = await request(`${base}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model, max_tokens: 2, messages: [{ role: 'user', content: 'hello' }] }),
    });
    return { status: r.statusCode, body: await r.body.text() };
  };
  const first = await chat('sql');
  assert.equal(first.status, 200, first.body);
  assert.match(first.body, /"model":"sql"/);
  const metrics = await (await request(`${base}/metrics`)).body.text();
  assert.match(metrics, /^llmgw_gateway_adapter_loads_total\{adapter="sql",outcome="ok"\} 1$/m);
  const unknown = await chat('sq');
  assert.equal(unknown.status, 404);
  assert.match(unknown.body, /adapters \\"sql\\" \(of \\"qwen3\\"\)/);

  child.kill('SIGTERM');
  // The timer is cleared once the child exits: a pending one would hold the test file open for 30 s.
  let timer: NodeJS.Timeout | undefined;
  const tooLong = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`serve did not stop: ${err.slice(-800)}`)), 30_000)));
  const [code] = await Promise.race([exited, tooLong]).finally(() => clearTimeout(timer));
  assert.equal(code, 0);
});
