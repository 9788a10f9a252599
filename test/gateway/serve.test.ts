// `llmgw serve` as an operator runs it: a real process with its agent starting two sim engines,
// the official openai client talking to it, and a clean stop on SIGTERM that leaves no engine behind.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import OpenAI from 'openai';
import { request } from 'undici';
import { loggedEvent, simConfig, startServe } from '../support/serve.js';
import { waitFor } from '../support/wait.js';

void test('llmgw serve: the openai client gets streaming and non-streaming answers from two sim replicas', { timeout: 90_000 }, async (t) => {
  // No guesses (prediction_ttl_ms 0): a precise hit below comes from the engines' events.
  const served = await startServe(t, (p) => simConfig(p, { count: 2, gatewayExtra: '  router: { prediction_ttl_ms: 0 }\n' }));
  const { port } = served;
  // Ready is a log event with where to send requests and one to try; stdout, unasked, stays empty.
  const ready = loggedEvent(served.err(), 'serve.ready');
  assert.equal(ready?.url, `http://127.0.0.1:${port}/`);
  assert.equal(ready.replicas, 2);
  assert.deepEqual(ready.models, ['qwen3']);
  assert.match(String(ready.try), /^curl -s http:\/\/127\.0\.0\.1:\d+\/v1\/chat\/completions .*"model":"qwen3"/);
  assert.equal(served.out(), '', 'nothing on stdout unless --status asks');
  // The model's tokenizer loads once its replicas are ready, before any request asks for it.
  const loaded = async (): Promise<boolean> => {
    const m = await request(`http://127.0.0.1:${port}/metrics`);
    return /^llmgw_gateway_tokenize_local_state\{model="qwen3",state="verifying"\} 1$/m.test(await m.body.text());
  };
  await waitFor(loaded, { timeoutMs: 15_000, what: 'the tokenizer loaded with no request sent' });

  const client = new OpenAI({ apiKey: 'none', baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0, timeout: 20_000 });
  const done = await client.chat.completions.create({ model: 'qwen3', messages: [{ role: 'user', content: 'hello' }], max_tokens: 4 });
  assert.ok((done.choices[0]?.message.content ?? '').length > 0);
  let text = '';
  for await (const c of await client.chat.completions.create({ model: 'qwen3', messages: [{ role: 'user', content: 'hello' }], max_tokens: 4, stream: true })) {
    text += c.choices[0]?.delta.content ?? '';
  }
  assert.ok(text.length > 0);
  // The engines' KV events reach the index through the agent: a repeated long prompt is routed precisely.
  const long = JSON.stringify({ model: 'qwen3', max_tokens: 2, messages: [{ role: 'user', content: 'tell me about the gateway. '.repeat(40) }] });
  const send = async () => {
    const r = await request(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: long });
    await r.body.dump();
    return { replica: r.headers['x-llmgw-replica'], route: r.headers['x-llmgw-route'] };
  };
  const first = await send();
  const applied = async (): Promise<boolean> => {
    const m = await request(`http://127.0.0.1:${port}/metrics`);
    const v = /^llmgw_gateway_index_events_applied_total (\S+)$/m.exec(await m.body.text());
    return Number(v?.[1] ?? 0) > 0;
  };
  await waitFor(applied, { timeoutMs: 15_000, what: 'KV events applied to the index' });
  // Scoring has a 100 ms budget by default; a worker still warming up on a loaded box may miss it once.
  await waitFor(async () => {
    const again = await send();
    return again.route === 'precise' && again.replica === first.replica;
  }, { timeoutMs: 15_000, what: 'the repeated prompt to be routed precisely to the replica holding it' });

  const health = await request(`http://127.0.0.1:${port}/health`);
  assert.deepEqual(((await health.body.json()) as { ready: Record<string, number> }).ready, { qwen3: 2 });

  assert.equal(await served.stop(), 0);
});
