// `llmgw serve` with two sim embedders (task: embed) and a sim chat model, spoken to by the official
// openai SDK unchanged: embeddings as floats and as base64 decode to the same vectors, the same input
// gives the same vector whichever replica answers, a Matryoshka model shortens its vectors, the
// usage counts the prompt, every answer leaves a ledger row, and bad input gets OpenAI's errors.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import OpenAI from 'openai';
import { startServe, type ServePlaces } from '../support/serve.js';

function embedConfig(p: ServePlaces): string {
  const sim = (args: readonly string[]): string => `[${['--tokenizer', 'bytes', ...args].map((a) => JSON.stringify(a)).join(', ')}]`;
  return `engines:
  sim: { bin: "" }
kv_events: { hash_seed: "0", hash_algo: sha256_cbor }
node:
  name: local
  addr: 127.0.0.1
  devices: []
  ports: { http_base: ${p.http}, kv_events_base: ${p.kv} }
models:
  embed:
    served_model_name: embed
    profiles:
      - { name: sim-embed, engine: sim, gpu_class: cpu, tp: 1, model_path: embed, task: embed, pooling: mean, args: ${sim(['--embedding-dimensions', '64', '--matryoshka', '--max-model-len', '256'])} }
  qwen3:
    served_model_name: qwen3
    profiles:
      - { name: sim-cpu, engine: sim, gpu_class: cpu, tp: 1, model_path: qwen3, args: ${sim([])} }
replicas:
  - { model: embed, profile: sim-embed, count: 2 }
  - { model: qwen3, profile: sim-cpu, count: 1 }
gateway:
  host: 127.0.0.1
  port: ${p.port}
`;
}

const decode = (b64: string): number[] => {
  const bytes = Buffer.from(b64, 'base64');
  return Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(i * 4));
};

void test('llmgw serve: the openai SDK embeds through sim embedders, and bad input gets OpenAI errors', { timeout: 120_000 }, async (t) => {
  const served = await startServe(t, embedConfig);
  const base = `http://127.0.0.1:${served.port}`;
  const client = new OpenAI({ apiKey: 'none', baseURL: `${base}/v1`, maxRetries: 0, timeout: 20_000 });

  // The SDK asks for base64 by default and decodes it; floats asked for come as JSON numbers.
  const asDefault = await client.embeddings.create({ model: 'embed', input: ['hello world', 'another text'] });
  const asFloat = await client.embeddings.create({ model: 'embed', input: ['hello world', 'another text'], encoding_format: 'float' });
  assert.equal(asDefault.data.length, 2);
  assert.equal(asDefault.object, 'list');
  for (const [i, d] of asFloat.data.entries()) {
    assert.equal(d.index, i);
    assert.equal(d.embedding.length, 64);
    assert.deepEqual(asDefault.data[i]?.embedding, d.embedding.map((x) => Math.fround(x)));
    assert.ok(Math.abs(Math.hypot(...d.embedding) - 1) < 1e-9, 'a unit vector');
  }
  assert.notDeepEqual(asFloat.data[0]?.embedding, asFloat.data[1]?.embedding);
  // bytes tokenizer: one token a byte, plus none special.
  assert.equal(asFloat.usage.prompt_tokens, 'hello world'.length + 'another text'.length);
  assert.equal(asFloat.usage.total_tokens, asFloat.usage.prompt_tokens);

  const raw = await client.embeddings.create({ model: 'embed', input: 'hello world', encoding_format: 'base64' });
  const b64 = raw.data[0]?.embedding;
  assert.equal(typeof b64, 'string');
  assert.deepEqual(decode(String(b64)), asDefault.data[0]?.embedding);

  // Token ids, one list and several; the same input is the same vector on any replica.
  const ids = [104, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100];
  const byIds = await client.embeddings.create({ model: 'embed', input: ids, encoding_format: 'float' });
  assert.deepEqual(byIds.data[0]?.embedding, asFloat.data[0]?.embedding);
  const many = await Promise.all(Array.from({ length: 6 }, () => client.embeddings.create({ model: 'embed', input: [ids, [1, 2, 3]], encoding_format: 'float' }).withResponse()));
  for (const m of many) assert.deepEqual(m.data.data[0]?.embedding, asFloat.data[0]?.embedding);
  const replicas = new Set(many.map((m) => m.response.headers.get('x-llmgw-replica')));
  assert.ok([...replicas].every((r) => r !== null && r !== 'none'), 'answered by a replica');

  const short = await client.embeddings.create({ model: 'embed', input: 'hello world', dimensions: 16, encoding_format: 'float' });
  assert.equal(short.data[0]?.embedding.length, 16);
  assert.ok(Math.abs(Math.hypot(...(short.data[0]?.embedding ?? [])) - 1) < 1e-9, 'shortened and normalized again');

  const refused = async (body: Record<string, unknown>): Promise<{ status: number; error: Record<string, unknown> }> => {
    const res = await fetch(`${base}/v1/embeddings`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.timeout(20_000) });
    const j = (await res.json()) as { error: Record<string, unknown> };
    return { status: res.status, error: j.error };
  };
  const cases = [
    { why: 'an empty string', body: { model: 'embed', input: '' }, status: 400, param: 'input' },
    { why: 'an empty list', body: { model: 'embed', input: [] }, status: 400, param: 'input' },
    { why: 'a number for input', body: { model: 'embed', input: 5 }, status: 400, param: 'input' },
    { why: 'a list mixing strings and numbers', body: { model: 'embed', input: ['a', 3] }, status: 400, param: 'input' },
    { why: 'no input', body: { model: 'embed' }, status: 400, param: 'input' },
    { why: 'an unknown encoding', body: { model: 'embed', input: 'a', encoding_format: 'hex' }, status: 400, param: 'encoding_format' },
    { why: 'zero dimensions', body: { model: 'embed', input: 'a', dimensions: 0 }, status: 400, param: 'dimensions' },
    // The engine's own refusal, relayed as a chat's is, in vLLM's words.
    { why: 'more tokens than the model reads', body: { model: 'embed', input: 'x'.repeat(300) }, status: 400, param: 'input', type: 'BadRequestError' },
    { why: 'an unknown model', body: { model: 'nope', input: 'a' }, status: 404, code: 'model_not_found' },
    { why: 'a chat model', body: { model: 'qwen3', input: 'a' }, status: 400, param: 'model' },
  ];
  for (const c of cases) {
    const r = await refused(c.body);
    assert.equal(r.status, c.status, `${c.why}: ${JSON.stringify(r.error)}`);
    assert.equal(r.error.type, c.type ?? 'invalid_request_error', c.why);
    if (c.param !== undefined) assert.equal(r.error.param, c.param, c.why);
    if (c.code !== undefined) assert.equal(r.error.code, c.code, c.why);
  }
  // The SDK raises them as its own error classes, as against OpenAI.
  await assert.rejects(client.embeddings.create({ model: 'embed', input: '' }), (e: unknown) => e instanceof OpenAI.BadRequestError);
  await assert.rejects(client.embeddings.create({ model: 'nope', input: 'a' }), (e: unknown) => e instanceof OpenAI.NotFoundError);
  assert.equal(await served.stop(), 0);
});
