// The sim as an embedding model: vectors from the token ids alone (the same ids, the same unit vector,
// text or ids alike), vLLM's refusals of what its runner does not serve, of dimensions on a model that
// is not Matryoshka, and of an input over the context.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { simEmbedding, startSim } from '../../src/sim/index.js';

async function sim(t: import('node:test').TestContext, o: { runner: 'generate' | 'pooling'; matryoshka?: boolean }) {
  const s = await startSim({ model: 'e', port: 0, tokenizer: 'bytes', embeddingDimensions: 12, maxModelLen: 64, kvCapacityBlocks: 16, ...o });
  t.after(() => s.close());
  await s.ready;
  return async (path: string, body: unknown) => {
    const r = await fetch(`${s.url}${path}`, { method: 'POST', body: JSON.stringify(body), signal: AbortSignal.timeout(10_000) });
    return { status: r.status, json: (await r.json()) as { data?: { embedding: number[] }[]; error?: { message: string; param: string | null } } };
  };
}

void test('sim embeddings: a unit vector from the token ids alone, text or ids alike', async (t) => {
  const post = await sim(t, { runner: 'pooling' });
  const text = await post('/v1/embeddings', { model: 'e', input: 'hi' });
  const ids = await post('/v1/embeddings', { model: 'e', input: [104, 105] });
  assert.equal(text.status, 200);
  assert.deepEqual(text.json.data?.[0]?.embedding, ids.json.data?.[0]?.embedding);
  assert.deepEqual(ids.json.data?.[0]?.embedding, simEmbedding([104, 105], 12));
  assert.ok(Math.abs(Math.hypot(...simEmbedding([1, 2, 3], 1000)) - 1) < 1e-9);
  assert.notDeepEqual(simEmbedding([1, 2], 12), simEmbedding([2, 1], 12));
});

const refusals = [
  { why: 'a generating model has no embeddings', runner: 'generate', path: '/v1/embeddings', body: { model: 'e', input: 'hi' }, message: /does not support Embeddings API/ },
  { why: 'an embedding model does not chat', runner: 'pooling', path: '/v1/chat/completions', body: { model: 'e', messages: [] }, message: /does not support Chat Completions API/ },
  { why: 'nor complete', runner: 'pooling', path: '/v1/completions', body: { model: 'e', prompt: 'x' }, message: /does not support Completions API/ },
  { why: 'only a Matryoshka model shortens its vectors', runner: 'pooling', path: '/v1/embeddings', body: { model: 'e', input: 'hi', dimensions: 4 }, message: /does not support matryoshka/ },
  { why: 'an input over the context', runner: 'pooling', path: '/v1/embeddings', body: { model: 'e', input: 'x'.repeat(65) }, message: /maximum context length is 64 tokens/ },
] as const;
for (const r of refusals) {
  void test(`sim embeddings: ${r.why}, as vLLM refuses it`, async (t) => {
    const post = await sim(t, { runner: r.runner });
    const got = await post(r.path, r.body);
    assert.equal(got.status, 400);
    assert.match(got.json.error?.message ?? '', r.message);
  });
}

void test('sim embeddings: a Matryoshka model shortens a vector and normalizes it again', async (t) => {
  const post = await sim(t, { runner: 'pooling', matryoshka: true });
  const got = await post('/v1/embeddings', { model: 'e', input: 'hi', dimensions: 4 });
  const v = got.json.data?.[0]?.embedding ?? [];
  assert.equal(v.length, 4);
  assert.ok(Math.abs(Math.hypot(...v) - 1) < 1e-9);
});
