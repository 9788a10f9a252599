// The sim as vLLM's NIXL connector: a prefill half offers its blocks, a decode half reads them from
// that engine and computes only the last token, and params nobody handed out are refused.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { parseKvTransferConfig, startSim } from '../../src/sim/index.js';
import type { SimHandle, SimOptions } from '../../src/sim/index.js';

async function sim(t: { after(fn: () => Promise<void>): void }, role: string | undefined, o: Partial<SimOptions> = {}): Promise<SimHandle> {
  const s = await startSim({
    model: 'm',
    port: 0,
    tokenizer: 'bytes',
    decodeTokensPerS: 5000,
    prefillTokensPerS: 1e6,
    hashSeed: '0',
    ...(role === undefined ? {} : { kvTransfer: parseKvTransferConfig(JSON.stringify({ kv_connector: 'NixlConnector', kv_role: role })) }),
    ...o,
  });
  t.after(() => s.close());
  await s.ready;
  return s;
}

async function post(s: SimHandle, path: string, body: unknown, id = 'req-1'): Promise<{ status: number; json: Record<string, unknown> }> {
  const r = await fetch(s.url + path, { method: 'POST', headers: { 'content-type': 'application/json', 'x-request-id': id }, body: JSON.stringify(body), signal: AbortSignal.timeout(10_000) });
  return { status: r.status, json: (await r.json()) as Record<string, unknown> };
}

const prompt = 'a prompt long enough to fill several blocks of sixteen tokens each, '.repeat(4);
const prefillAsk = { kv_transfer_params: { do_remote_decode: true, do_remote_prefill: false, remote_engine_id: null, remote_block_ids: null, remote_host: null, remote_port: null } };

void test('sim nixl: the prefill offers its prompt blocks; the decode reads them once and computes one token', async (t) => {
  const p = await sim(t, 'kv_producer');
  const d = await sim(t, 'kv_consumer');
  const pre = await post(p, '/v1/completions', { prompt, max_tokens: 1, ...prefillAsk });
  assert.equal(pre.status, 200);
  const params = pre.json.kv_transfer_params as Record<string, unknown>;
  assert.deepEqual(Object.keys(params).sort(), ['do_remote_decode', 'do_remote_prefill', 'remote_block_ids', 'remote_engine_id', 'remote_host', 'remote_port', 'remote_request_id', 'tp_size']);
  assert.equal(params.remote_request_id, 'req-1', 'the blocks are kept under the X-Request-Id');
  assert.equal((params.remote_block_ids as number[]).length, Math.ceil(prompt.length / 16));
  const dec = await post(d, '/v1/completions', { prompt, max_tokens: 3, kv_transfer_params: params });
  assert.equal(dec.status, 200, JSON.stringify(dec.json));
  assert.equal((dec.json.usage as { completion_tokens: number }).completion_tokens, 3);
  const acc = (await (await fetch(`${d.url}/sim/requests`)).json()) as { data: { prefillComputedTokens: number; cachedTokens: number }[] };
  assert.deepEqual(acc.data.map((a) => [a.prefillComputedTokens, a.cachedTokens]), [[1, prompt.length - 1]]);
  // Read once, as vLLM frees them once the decode side has them: a second decode is refused.
  const twice = await post(d, '/v1/completions', { prompt, max_tokens: 3, kv_transfer_params: params });
  assert.equal(twice.status, 400);
  assert.match(String((twice.json.error as { message: string }).message), /did not hand these blocks over \(no blocks are kept for request "req-1"/);
  const seen = (await (await fetch(`${p.url}/sim/kv-transfers`)).json()) as { data: { state: string }[] };
  assert.deepEqual(seen.data.map((x) => x.state), ['pulled']);
});

const refused = [
  { why: 'an engine id that is not the prefill\'s', change: { remote_engine_id: 'made-up' }, re: /remote_engine_id "made-up" is not this engine/ },
  { why: 'block ids the prefill did not offer', change: { remote_block_ids: [1, 2, 3] }, re: /remote_block_ids are not the blocks kept/ },
  { why: 'params without where the blocks are', change: { remote_host: undefined }, re: /without remote_host, remote_port/ },
] as const;
for (const r of refused) {
  void test(`sim nixl: the decode refuses ${r.why}`, async (t) => {
    const p = await sim(t, 'kv_both');
    const d = await sim(t, 'kv_both');
    const pre = await post(p, '/v1/completions', { prompt, max_tokens: 1, ...prefillAsk });
    const dec = await post(d, '/v1/completions', { prompt, max_tokens: 3, kv_transfer_params: { ...(pre.json.kv_transfer_params as object), ...r.change } });
    assert.equal(dec.status, 400);
    assert.match(String((dec.json.error as { message: string }).message), r.re);
  });
}

void test('sim nixl: a decode of another prompt than the blocks hold is refused', async (t) => {
  const p = await sim(t, 'kv_both');
  const d = await sim(t, 'kv_both');
  const pre = await post(p, '/v1/completions', { prompt, max_tokens: 1, ...prefillAsk });
  const dec = await post(d, '/v1/completions', { prompt: 'short', max_tokens: 3, kv_transfer_params: pre.json.kv_transfer_params });
  assert.equal(dec.status, 400);
  assert.match(String((dec.json.error as { message: string }).message), /send the decode the same prompt/);
});

void test('sim nixl: without a connector the params are ignored, as vLLM ignores them', async (t) => {
  const s = await sim(t, undefined);
  const r = await post(s, '/v1/completions', { prompt, max_tokens: 1, ...prefillAsk });
  assert.equal(r.status, 200);
  assert.equal('kv_transfer_params' in r.json, false);
});

void test('sim nixl: --kv-transfer-config names what it takes', () => {
  assert.throws(() => parseKvTransferConfig('{"kv_connector":"P2pNcclConnector","kv_role":"kv_both"}'), /write "NixlConnector"/);
  assert.throws(() => parseKvTransferConfig('{"kv_connector":"NixlConnector","kv_role":"both"}'), /kv_role "both" is not one of kv_producer, kv_consumer, kv_both/);
});

void test('sim nixl: blocks the decode engine already caches are not moved again', async (t) => {
  const p = await sim(t, 'kv_both');
  const d = await sim(t, 'kv_both');
  for (const id of ['first', 'again']) {
    const pre = await post(p, '/v1/completions', { prompt, max_tokens: 1, ...prefillAsk }, id);
    const dec = await post(d, '/v1/completions', { prompt, max_tokens: 2, kv_transfer_params: pre.json.kv_transfer_params }, id);
    assert.equal(dec.status, 200, JSON.stringify(dec.json));
  }
  const seen = (await (await fetch(`${d.url}/sim/kv-transfers`)).json()) as { data: { requestId: string; bytes: number }[] };
  const [first, again] = seen.data;
  assert.ok(first && again);
  assert.equal(first.bytes, prompt.length * 147_456, 'the whole prompt, at the default bytes per token');
  // The second time only the last partial block and the last token's are not cached.
  assert.ok(again.bytes < first.bytes / 4, JSON.stringify(seen.data));
});
