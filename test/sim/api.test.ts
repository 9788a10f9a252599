// The sim's HTTP API in-process (byte tokenizer): vLLM's shapes, errors, usage and accounting.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { resolveSimOptions, startSim } from '../../src/sim/index.js';
import type { RequestAccount, SimHandle, SimOptions } from '../../src/sim/index.js';
import { hfModel, promptTextOf } from '../../src/tokenize/index.js';
import { waitFor } from '../support/wait.js';

async function sim(t: { after(fn: () => Promise<void>): void }, o: Partial<SimOptions> = {}): Promise<SimHandle> {
  const s = await startSim({ model: 'sim-model', port: 0, tokenizer: 'bytes', decodeTokensPerS: 5000, prefillTokensPerS: 1e6, hashSeed: '0', ...o });
  t.after(() => s.close());
  await s.ready;
  return s;
}

async function post(s: SimHandle, path: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; json: Record<string, unknown>; headers: Headers }> {
  const r = await fetch(s.url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await r.text();
  return { status: r.status, json: text === '' ? {} : (JSON.parse(text) as Record<string, unknown>), headers: r.headers };
}

async function account(s: SimHandle, id: unknown): Promise<RequestAccount> {
  const r = await fetch(`${s.url}/sim/requests?id=${String(id)}`, { signal: AbortSignal.timeout(5000) });
  const { data } = (await r.json()) as { data: RequestAccount[] };
  const a = data[0];
  if (a === undefined) throw new Error(`no account for ${String(id)}`);
  return a;
}

async function metric(s: SimHandle, name: string): Promise<number> {
  const text = await (await fetch(`${s.url}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
  let sum = 0;
  for (const line of text.split('\n')) if (line.startsWith(name + '{') || line.startsWith(name + ' ')) sum += Number(line.split(' ').at(-1));
  return sum;
}

const longPrefix = 'You are a careful assistant. '.repeat(40);

void test('api: a second request sharing a long prefix reports cached tokens in usage and metrics, and computes less prefill', async (t) => {
  const s = await sim(t, { blockSizeTokens: 16 });
  const ask = (q: string) => post(s, '/v1/chat/completions', { model: 'sim-model', max_tokens: 4, messages: [{ role: 'system', content: longPrefix }, { role: 'user', content: q }] });
  const first = await ask('What is a fox?');
  const second = await ask('What is a dog?');
  const u1 = first.json.usage as { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } | null };
  const u2 = second.json.usage as { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } | null };
  assert.equal(u1.prompt_tokens_details, null, 'nothing was cached for the first request');
  const cached = u2.prompt_tokens_details?.cached_tokens ?? 0;
  assert.ok(cached >= longPrefix.length - 16, `most of the shared prefix is cached (got ${cached})`);
  assert.equal(cached % 16, 0, 'only whole blocks are cached');
  const [a1, a2] = [await account(s, first.json.id), await account(s, second.json.id)];
  assert.equal(a1.prefillComputedTokens, u1.prompt_tokens);
  assert.equal(a2.prefillComputedTokens, u2.prompt_tokens - cached, 'only the uncached tokens were computed');
  assert.ok(a2.prefillMs < a1.prefillMs, 'the simulated time to first token is lower');
  assert.equal(second.headers.get('x-llmgw-sim-cached-tokens'), String(cached));
  assert.equal(await metric(s, 'vllm:prefix_cache_hits_total'), cached);
  assert.equal(await metric(s, 'vllm:prefix_cache_queries_total'), u1.prompt_tokens + u2.prompt_tokens);
  assert.equal(await metric(s, 'llmgw_sim_prefill_computed_tokens_total'), a1.prefillComputedTokens + a2.prefillComputedTokens);
});

void test('api: streaming chat sends role, content chunks, finish, usage, [DONE] in vLLM order', async (t) => {
  const s = await sim(t);
  const r = await fetch(`${s.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 16, stream: true, stream_options: { include_usage: true } }),
    signal: AbortSignal.timeout(10_000),
  });
  assert.equal(r.headers.get('content-type'), 'text/event-stream; charset=utf-8');
  const events = (await r.text()).split('\n\n').filter((e) => e !== '').map((e) => e.replace(/^data: /, ''));
  assert.equal(events.at(-1), '[DONE]');
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as { choices: { delta: Record<string, unknown>; finish_reason: string | null }[]; usage?: Record<string, number> });
  assert.deepEqual(chunks[0]?.choices[0]?.delta, { role: 'assistant', content: '' });
  const text = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
  assert.equal(text, ' the quick brown');
  assert.equal(chunks.at(-2)?.choices[0]?.finish_reason, 'length');
  assert.deepEqual(chunks.at(-1)?.choices, []);
  assert.equal(chunks.at(-1)?.usage?.completion_tokens, 16, 'byte tokenizer: one token per byte');
});

void test('api: stop strings end generation with finish_reason stop and are cut from the text', async (t) => {
  const s = await sim(t);
  const r = await post(s, '/v1/completions', { prompt: 'x', max_tokens: 40, stop: ['fox'] });
  const choice = (r.json.choices as { text: string; finish_reason: string }[])[0];
  assert.equal(choice?.text, ' the quick brown ');
  assert.equal(choice?.finish_reason, 'stop');
});

// Without an end of its own, a request with no max_tokens decoded until max_model_len: minutes for a
// client of `npm start` that only said hello.
void test('api: with no max_tokens the answer ends by itself (EOS, stop) after --answer-tokens; max_tokens is generated in full', async (t) => {
  const s = await sim(t, { answerTokens: 7 });
  const natural = await post(s, '/v1/completions', { prompt: 'x' });
  const n = natural.json as { usage: { completion_tokens: number }; choices: { finish_reason: string }[] };
  assert.equal(n.usage.completion_tokens, 7);
  assert.equal(n.choices[0]?.finish_reason, 'stop');
  const asked = await post(s, '/v1/completions', { prompt: 'x', max_tokens: 20 });
  const a = asked.json as { usage: { completion_tokens: number }; choices: { finish_reason: string }[] };
  assert.equal(a.usage.completion_tokens, 20);
  assert.equal(a.choices[0]?.finish_reason, 'length');
});

void test('api: completions take token ids, and /detokenize returns their text', async (t) => {
  const s = await sim(t);
  const ids = [...Buffer.from('hello')];
  const r = await post(s, '/v1/completions', { prompt: ids, max_tokens: 2 });
  assert.equal((r.json.usage as { prompt_tokens: number }).prompt_tokens, 5);
  const d = await post(s, '/detokenize', { tokens: ids });
  assert.deepEqual(d.json, { prompt: 'hello' });
  const tk = await post(s, '/tokenize', { prompt: 'hello', return_token_strs: true });
  assert.deepEqual(tk.json, { count: 5, max_model_len: 32768, tokens: ids, token_strs: ['h', 'e', 'l', 'l', 'o'] });
});

const badRequests = [
  { why: 'n above 1 is refused, not silently ignored', path: '/v1/chat/completions', body: { messages: [{ role: 'user', content: 'x' }], n: 2 }, status: 400, param: 'n' },
  { why: 'a body that is not JSON is a 400, not a crash', path: '/v1/completions', body: '{"prompt":', status: 400, param: null },
  { why: 'a chat without messages names the field', path: '/v1/chat/completions', body: { model: 'sim-model' }, status: 400, param: 'messages' },
  { why: 'an unknown model is 404 as in vLLM', path: '/v1/completions', body: { model: 'nope', prompt: 'x' }, status: 404, param: 'model' },
  { why: 'a completion past max_model_len is refused up front', path: '/v1/completions', body: { prompt: 'x', max_tokens: 40_000 }, status: 400, param: 'max_tokens' },
  { why: 'a prompt as long as max_model_len leaves no room to generate', path: '/v1/completions', body: { prompt: 'x'.repeat(32_768) }, status: 400, param: 'prompt' },
  { why: 'both continue_final_message and add_generation_prompt cannot hold', path: '/tokenize', body: { messages: [{ role: 'user', content: 'x' }], continue_final_message: true }, status: 400, param: 'continue_final_message' },
] as const;

void test('api: bad input gets an OpenAI error object', async (t) => {
  const s = await sim(t);
  for (const row of badRequests) {
    const r = await post(s, row.path, row.body);
    assert.equal(r.status, row.status, row.why);
    const err = r.json.error as { message: string; type: string; param: string | null; code: number };
    assert.equal(typeof err.message, 'string', row.why);
    assert.equal(err.code, row.status, row.why);
    assert.equal(err.param, row.param, row.why);
  }
});

void test('api: with an API key, /v1/* needs the bearer token (vLLM body) and /health, /tokenize do not', async (t) => {
  const s = await sim(t, { apiKey: 'sk-sim' });
  const denied = await post(s, '/v1/completions', { prompt: 'x', max_tokens: 1 });
  assert.equal(denied.status, 401);
  assert.deepEqual(denied.json, { error: 'Unauthorized' });
  const ok = await post(s, '/v1/completions', { prompt: 'x', max_tokens: 1 }, { authorization: 'Bearer sk-sim' });
  assert.equal(ok.status, 200);
  assert.equal((await fetch(`${s.url}/health`)).status, 200);
  assert.equal((await post(s, '/tokenize', { prompt: 'x' })).status, 200);
});

void test('api: /v1/models lists the served names and each LoRA adapter; an adapter is served by name', async (t) => {
  const s = await sim(t, { servedModelNames: ['qwen3'], loraModules: [{ name: 'sql', path: '/models/sql-lora' }] });
  const models = (await (await fetch(`${s.url}/v1/models`)).json()) as { data: { id: string; parent: string | null; root: string }[] };
  assert.deepEqual(models.data.map((m) => [m.id, m.parent, m.root]), [['qwen3', null, 'sim-model'], ['sql', 'qwen3', '/models/sql-lora']]);
  const r = await post(s, '/v1/completions', { model: 'sql', prompt: 'x', max_tokens: 1 });
  assert.equal(r.status, 200);
  assert.equal(r.json.model, 'sql');
});

void test('api: data parallel ranks are separate caches; X-data-parallel-rank pins a request, else the least loaded rank', async (t) => {
  const s = await sim(t, { dataParallelSize: 2, blockSizeTokens: 4 });
  const prompt = 'abcdefghijklmnopqrstuvwxyz';
  const on0 = await post(s, '/v1/completions', { prompt, max_tokens: 1 }, { 'x-data-parallel-rank': '0' });
  const on1 = await post(s, '/v1/completions', { prompt, max_tokens: 1 }, { 'x-data-parallel-rank': '1' });
  assert.equal(on0.headers.get('x-llmgw-sim-rank'), '0');
  assert.equal(on1.headers.get('x-llmgw-sim-rank'), '1');
  assert.equal(on1.headers.get('x-llmgw-sim-cached-tokens'), '0', 'rank 1 has its own cache');
  const again = await post(s, '/v1/completions', { prompt, max_tokens: 1 }, { 'x-data-parallel-rank': '1' });
  assert.equal(again.headers.get('x-llmgw-sim-cached-tokens'), '24');
  const bad = await post(s, '/v1/completions', { prompt, max_tokens: 1 }, { 'x-data-parallel-rank': '2' });
  assert.equal(bad.status, 400);
});

void test('api: /reset_prefix_cache empties the cache (the next request computes everything again)', async (t) => {
  const s = await sim(t, { blockSizeTokens: 4 });
  const prompt = 'abcdefghijklmnopqrstuvwxyz';
  await post(s, '/v1/completions', { prompt, max_tokens: 1 });
  const reset = await post(s, '/reset_prefix_cache', {});
  assert.equal(reset.status, 200);
  assert.equal(reset.headers.get('x-llmgw-sim-reset'), 'ok');
  const after = await post(s, '/v1/completions', { prompt, max_tokens: 1 });
  assert.equal(after.headers.get('x-llmgw-sim-cached-tokens'), '0');
});

void test('api: with runtime LoRA updating on, adapters are added and removed over HTTP as in vLLM', async (t) => {
  const s = await sim(t, { allowRuntimeLoraUpdating: true });
  const load = await fetch(`${s.url}/v1/load_lora_adapter`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ lora_name: 'fresh', lora_path: '/models/fresh' }),
  });
  assert.equal(load.status, 200);
  assert.equal(await load.text(), "Success: LoRA adapter 'fresh' added successfully.");
  assert.equal((await post(s, '/v1/completions', { model: 'fresh', prompt: 'x', max_tokens: 1 })).status, 200);
  assert.equal((await post(s, '/v1/load_lora_adapter', { lora_name: 'fresh', lora_path: '/x' })).status, 400, 'loading twice is refused');
  const unload = await fetch(`${s.url}/v1/unload_lora_adapter`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ lora_name: 'fresh' }) });
  assert.equal(unload.status, 200);
  assert.equal((await post(s, '/v1/completions', { model: 'fresh', prompt: 'x', max_tokens: 1 })).status, 404);
});

void test('api: a run-time adapter load is one load: a second request for it while it loads is refused', async (t) => {
  // The load takes simulated time; two loads sent together overlap inside it whatever their order.
  const s = await sim(t, { allowRuntimeLoraUpdating: true, loraLoadTimeMs: 2000 });
  const load = (): Promise<number> =>
    fetch(`${s.url}/v1/load_lora_adapter`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ lora_name: 'slow', lora_path: '/models/slow' }) }).then(
      async (r) => (await r.body?.cancel(), r.status),
    );
  assert.deepEqual((await Promise.all([load(), load()])).sort(), [200, 400]);
  assert.equal((await post(s, '/v1/completions', { model: 'slow', prompt: 'x', max_tokens: 1 })).status, 200);
});

void test('api: fault --fail-lora-loads: the load fails as vLLM fails a missing adapter, and nothing is registered', async (t) => {
  const s = await sim(t, { allowRuntimeLoraUpdating: true, loraLoadTimeMs: 0, faults: { ...resolveSimOptions({ model: 'm' }).faults, failLoraLoads: ['broken'] } });
  const r = await post(s, '/v1/load_lora_adapter', { lora_name: 'broken', lora_path: '/models/broken' });
  assert.equal(r.status, 400);
  assert.match(JSON.stringify(r.json), /Loading lora broken failed/);
  assert.equal((await post(s, '/v1/completions', { model: 'broken', prompt: 'x', max_tokens: 1 })).status, 404);
});

void test('api: without runtime LoRA updating the adapter routes do not exist', async (t) => {
  const s = await sim(t);
  assert.equal((await post(s, '/v1/load_lora_adapter', { lora_name: 'a', lora_path: '/a' })).status, 404);
});

void test('api: a client that leaves mid-stream frees its sequence and its blocks', async (t) => {
  const s = await sim(t, { decodeTokensPerS: 200 });
  const ac = new AbortController();
  const r = await fetch(`${s.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: 'a prompt that holds a few blocks of the cache', max_tokens: 10_000, stream: true }),
    signal: ac.signal,
  });
  const reader = r.body?.getReader();
  await reader?.read();
  assert.equal(await metric(s, 'vllm:num_requests_running'), 1);
  ac.abort();
  await waitFor(async () => (await metric(s, 'vllm:num_requests_running')) === 0, { what: 'the aborted request to leave the batch' });
  assert.equal(await metric(s, 'vllm:kv_cache_usage_perc'), 0, 'its blocks are free again');
});

void test('api: /health answers 503 while the Qwen3 tokenizer loads, because loading never blocks the event loop', async (t) => {
  const s = await startSim({ model: 'qwen3', port: 0, tokenizer: 'qwen3', hashSeed: '0' });
  t.after(() => s.close());
  const seen: number[] = [];
  await waitFor(
    async () => {
      // Each probe must be answered quickly; a parse on the main thread would stall it for seconds.
      const status = (await fetch(`${s.url}/health`, { signal: AbortSignal.timeout(1000) })).status;
      seen.push(status);
      return status === 200;
    },
    { what: 'health 200 after the tokenizer loaded', timeoutMs: 30_000, intervalMs: 50 },
  );
  assert.equal(seen[0], 503);
});

// vLLM without --trust-request-chat-template refuses a request's template: it is code from the
// client, and an 81-byte 3000 x 3000 loop stalled an engine for a minute.
const untrusted = [
  { why: 'chat_template on a chat request', path: '/v1/chat/completions', extra: { chat_template: '{{ messages }}' } },
  { why: 'chat_template among chat_template_kwargs', path: '/v1/chat/completions', extra: { chat_template_kwargs: { chat_template: '{{ messages }}' } } },
  { why: 'chat_template on /tokenize', path: '/tokenize', extra: { chat_template: '{{ messages }}' } },
];

void test('a request chat template is a 400 unless the sim runs with --trust-request-chat-template, as in vLLM', async (t) => {
  const s = await sim(t);
  for (const u of untrusted) {
    const r = await post(s, u.path, { model: 'sim-model', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1, ...u.extra });
    assert.equal(r.status, 400, u.why);
    assert.match(JSON.stringify(r.json), /--trust-request-chat-template is not set/, u.why);
  }
});

void test('a trusted request template renders on its own thread: a runaway loop is a 400 and other requests are served meanwhile', async (t) => {
  const s = await sim(t, { trustRequestChatTemplate: true });
  const simple = await post(s, '/tokenize', { model: 'sim-model', messages: [{ role: 'user', content: 'hi' }], chat_template: '{% for m in messages %}[{{ m.content }}]{% endfor %}' });
  assert.equal(simple.status, 200);
  assert.deepEqual(simple.json.tokens, [...Buffer.from('[hi]')]);
  const order: string[] = [];
  const loop = '{% for i in range(3000) %}{% for j in range(3000) %}x{% endfor %}{% endfor %}';
  const runaway = post(s, '/v1/chat/completions', { model: 'sim-model', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1, chat_template: loop }).then((r) => {
    order.push('runaway');
    return r;
  });
  const innocent = await post(s, '/v1/chat/completions', { model: 'sim-model', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 });
  order.push('innocent');
  assert.equal(innocent.status, 200);
  const r = await runaway;
  assert.equal(r.status, 400);
  assert.match(JSON.stringify(r.json), /did not render within/);
  assert.deepEqual(order, ['innocent', 'runaway']);
});

void test('a request body nested deeper than the sim parses is a 400, not a stack overflow', async (t) => {
  const s = await sim(t);
  const r = await post(s, '/v1/chat/completions', `{"model":"sim-model","messages":[{"role":"user","content":${'['.repeat(10_000)}${']'.repeat(10_000)}}]}`);
  assert.equal(r.status, 400);
  assert.match(JSON.stringify(r.json), /deeper than the limit/);
});

void test('api: a tool chat\'s numbers render in Qwen3\'s template as vLLM renders them (1.0, 1e+16, past 2^53, NaN), so /tokenize gives the gateway\'s local ids', async (t) => {
  const s = await sim(t, { model: 'qwen3', tokenizer: 'qwen3' });
  const local = await hfModel('qwen3');
  const tools = '[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"days": {"type": "number", "minimum": 1.0, "maximum": 1e16}}, "2": 0, "1": 0}}}]';
  for (const args of [JSON.stringify('{"days": 1.0, "id": 12345678901234567890, "x": NaN, "2": 1, "1": -0.0}'), '{"days": 1.0, "id": 12345678901234567890, "2": 1, "1": -0.0}']) {
    const body = `{"model": "qwen3", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": ${args}}}]}, {"role": "tool", "tool_call_id": "c", "content": "ok"}], "tools": ${tools}}`;
    const prompt = promptTextOf('chat', JSON.parse(body), local, Buffer.from(body));
    const text = prompt.parts.join('');
    assert.ok(text.includes('"days": 1.0') && text.includes('"maximum": 1e+16') && text.includes('"1": -0.0'), text);
    const r = await post(s, '/tokenize', body);
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.deepEqual(r.json.tokens, [...(await local.encodeWhole(text, prompt.addSpecialTokens))], args);
  }
});
