// `llmgw serve` with a runtime_lora profile: the catalog's adapters reach the gateway through the
// agent (engines/ describes how the sim loads them, the agent hands that to the gateway's view), the
// sim is started with runtime loading allowed, and a request for an adapter loads it on demand.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { request } from 'undici';
import { simConfig, startServe } from '../support/serve.js';

void test('llmgw serve: an adapter of a runtime_lora profile is listed with its base and loaded on first use', { timeout: 90_000 }, async (t) => {
  const serve = await startServe(t, (p) =>
    simConfig(p, { count: 1, profile: 'runtime_lora: true, adapters: [{ name: sql, path: /adapters/sql }]', args: ['--lora-load-time-ms', '50'] }),
  );
  const base = `http://127.0.0.1:${serve.port}`;

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

  assert.equal(await serve.stop(), 0);
});
