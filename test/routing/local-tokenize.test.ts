// Routing without asking the engine: the gateway tokenizes in its worker pool with the model's own
// tokenizer, verified against the engine's /tokenize in the background on the first requests. With
// the right tokenizer, routing goes on locally once verified; with a wrong one (the gateway believes
// Qwen3, the sims use bytes), the first comparison turns local tokenizing off for the model, says
// where the ids differ in the log and in a metric, and routing stays precise on the engine's ids.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { request } from 'undici';
import { IndexReader, MAX_SLOTS } from '../../src/kv/index.js';
import { createLogger } from '../../src/log/index.js';
import { waitFor } from '../support/wait.js';
import { chat, cluster, history, metric } from '../gateway/sim-cluster.js';

const stateLine = (state: string): string => `llmgw_gateway_tokenize_local_state{model="qwen3",state="${state}"}`;

void test("local tokenize: a model's tokenizer loads when its first replica is ready, before any request, which is then checked against /tokenize", async (t) => {
  const { gw, registry, join, listeners } = await cluster(t, { localTokenizer: 'bytes', joinLater: true, router: { tokenizeVerifyFirst: 1, tokenizeVerifyEvery: 0 } });
  const states = async (): Promise<number[]> => {
    const text = await registry.metrics();
    return ['loading', 'verifying', 'trusted'].map((s) => metric(text, stateLine(s)));
  };
  assert.deepEqual(await states(), [0, 0, 0], 'no replica is ready: nothing to load');
  join();
  await waitFor(async () => metric(await registry.metrics(), stateLine('verifying')) === 1, { what: 'the tokenizer loaded once the replicas joined, no request sent' });
  const first = await chat(gw.url, history('voles', 1));
  assert.equal(first.status, 200);
  // Checked in the background: the request did not wait for /tokenize.
  await waitFor(async () => (await states())[2] === 1, { what: 'trusted once the check matched' });
  const text = await registry.metrics();
  assert.equal(metric(text, 'llmgw_gateway_tokenize_checks_total{model="qwen3",outcome="match"}'), 1, 'the first request was tokenized both ways');
  assert.deepEqual(await states(), [0, 0, 1]);
  await gw.close();
  assert.equal(listeners(), 0, 'a closed gateway no longer listens to the directory');
});

void test('local tokenize: verified on the first requests, then routing tokenizes locally and stays precise', async (t) => {
  const { gw, registry, settle } = await cluster(t, { localTokenizer: 'bytes', router: { tokenizeVerifyFirst: 2, tokenizeVerifyEvery: 0 } });
  await waitFor(async () => metric(await registry.metrics(), stateLine('verifying')) === 1, { what: 'the bytes tokenizer loaded in the pool' });
  const first = await chat(gw.url, history('otters', 1));
  assert.equal(first.status, 200);
  for (const turns of [3, 5]) assert.equal((await chat(gw.url, history('otters', turns))).status, 200);
  await waitFor(async () => metric(await registry.metrics(), stateLine('trusted')) === 1, { what: 'trusted once both checks matched' });
  const text = await registry.metrics();
  assert.equal(metric(text, 'llmgw_gateway_tokenize_checks_total{model="qwen3",outcome="match"}'), 2, 'two checks wanted, two made');
  await settle();
  await waitFor(() => (gw.writer?.size ?? 0) > 0, { what: 'blocks in the index' });
  const next = await chat(gw.url, history('otters', 7));
  assert.deepEqual([next.route, next.replica], ['precise', first.replica], 'the follow-up goes where its prefix is');
  assert.ok((next.body.usage?.prompt_tokens_details?.cached_tokens ?? 0) > 0, 'and the engine confirms the hit');
  const after = await registry.metrics();
  assert.ok(metric(after, 'llmgw_gateway_tokenize_duration_seconds_count{outcome="local"}') >= 1, 'ids from the pool, not /tokenize');
  // Every decision scored in the pool says how many keys it looked up in the index.
  assert.ok(metric(after, 'llmgw_gateway_index_lookups_count') >= 1, 'index lookups observed per decision');
  assert.ok(metric(after, 'llmgw_gateway_index_lookups_sum') > 0, 'the follow-up found its prefix by looking it up');
});

void test("local tokenize: while the engines evict other users' blocks, a chat's next turns look up in the index only what they added", async (t) => {
  const { gw, registry, settle, index } = await cluster(t, { localTokenizer: 'bytes', kvCapacityBlocks: 640, router: { tokenizeVerifyFirst: 0, tokenizeVerifyEvery: 0 } });
  const reader = new IndexReader(index.buffer);
  const lost = (): number => Array.from({ length: MAX_SLOTS }, (_, s) => reader.removals(s)).reduce((a, b) => a + b, 0);
  const lookups = async (): Promise<number> => metric(await registry.metrics(), 'llmgw_gateway_index_lookups_sum');
  const messages: { role: string; content: string }[] = [{ role: 'user', content: `Document: ${'a document of many words about otters '.repeat(80)}` }];
  const looked: number[] = [];
  for (let turn = 0; turn < 6; turn++) {
    const before = await lookups();
    const r = await chat(gw.url, messages);
    assert.equal(r.status, 200);
    looked.push((await lookups()) - before);
    messages.push({ role: 'assistant', content: `answer ${turn}` }, { role: 'user', content: `question ${turn}: and then?` });
    // Other users: distinct prompts of 80 blocks each, more than the engines keep, so they evict.
    for (let i = 0; i < 8; i++) assert.equal((await chat(gw.url, [{ role: 'user', content: `other ${turn}.${i} `.repeat(120) }])).status, 200);
    await settle();
  }
  assert.ok(lost() > 0, 'the engines evicted cached blocks');
  // The first turn finds nothing; the second probes its document once more, because the blocks
  // it was found holding were the router's prediction, which the engine's events have since
  // replaced with its own; from then on a turn looks up only what it added and the key after.
  const promptBlocks = Math.floor((messages[0]?.content.length ?? 0) / 16);
  for (const [turn, n] of looked.entries()) {
    if (turn >= 2) assert.ok(n < 16, `turn ${turn} looked up ${n} keys of a ${promptBlocks}-block prompt: ${looked.join(', ')}`);
  }
});

void test('local tokenize: a wrong tokenizer is caught on its first comparison; local tokenizing goes off, logged and counted, and routing stays precise', async (t) => {
  const lines: string[] = [];
  const log = createLogger({ sink: (l) => lines.push(l) });
  const { gw, registry, settle } = await cluster(t, { localTokenizer: 'qwen3', log, router: { tokenizeVerifyFirst: 4, tokenizeVerifyEvery: 1 } });
  await waitFor(async () => metric(await registry.metrics(), stateLine('verifying')) === 1, { timeoutMs: 60_000, what: 'the Qwen3 tokenizer loaded in the pool' });
  const first = await chat(gw.url, history('badgers', 1));
  assert.equal(first.status, 200);
  // The first request routed on the local ids while /tokenize checked them in the background.
  await waitFor(async () => metric(await registry.metrics(), stateLine('off')) === 1, { what: 'local tokenizing off after the first check' });
  const second = await chat(gw.url, history('badgers', 3));
  assert.equal(second.status, 200);
  const text = await registry.metrics();
  assert.equal(metric(text, 'llmgw_gateway_tokenize_checks_total{model="qwen3",outcome="mismatch"}'), 1);
  assert.equal(metric(text, stateLine('off')), 1);
  const mismatch = lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.msg === 'tokenize.mismatch');
  assert.ok(mismatch, lines.join('\n'));
  assert.equal(mismatch.model, 'qwen3');
  assert.equal(mismatch.position, 0, 'Qwen3 and bytes differ from the first token');
  assert.equal(typeof mismatch.local, 'number');
  assert.equal(typeof mismatch.engine, 'number');
  assert.ok(lines.some((l) => l.includes('"msg":"tokenize.local_off"')));

  // Routing goes on with the engine's ids: precise, to the replica holding the prefix.
  await settle();
  await waitFor(() => (gw.writer?.size ?? 0) > 0, { what: 'blocks in the index' });
  const before = metric(await registry.metrics(), 'llmgw_gateway_tokenize_duration_seconds_count{outcome="local"}');
  const next = await chat(gw.url, history('badgers', 5));
  assert.deepEqual([next.route, next.replica], ['precise', first.replica]);
  assert.ok((next.body.usage?.prompt_tokens_details?.cached_tokens ?? 0) > 0);
  const after = await registry.metrics();
  assert.equal(metric(after, 'llmgw_gateway_tokenize_duration_seconds_count{outcome="local"}'), before, 'no local ids once off');
  assert.equal(metric(after, 'llmgw_gateway_tokenize_checks_total{model="qwen3",outcome="mismatch"}'), 1, 'off stays off: no more checks');
});

void test("local tokenize: a streamed answer makes the chat's next turn ready in the pool; that turn's local ids still equal the engine's", async (t) => {
  // Every chat is prepared here, however short.
  const { gw, registry, settle } = await cluster(t, { localTokenizer: 'bytes', router: { tokenizeVerifyFirst: 1, tokenizeVerifyEvery: 1, prepareMinPromptTokens: 0 } });
  await waitFor(async () => metric(await registry.metrics(), stateLine('verifying')) === 1, { what: 'the bytes tokenizer loaded in the pool' });
  assert.equal((await chat(gw.url, history('herons', 1))).status, 200);
  assert.equal((await chat(gw.url, history('herons', 2))).status, 200);
  await waitFor(async () => metric(await registry.metrics(), stateLine('trusted')) === 1, { what: 'trusted once the checks in the background matched' });
  const messages = history('herons', 3);
  // Both chats' answers are prepared too (their ids were trusted by the time they came), in the
  // background: once both are done, wait for one more, the streamed answer's.
  const preparedLine = 'llmgw_gateway_turns_prepared_total{model="qwen3",outcome="prepared"}';
  const outcomes = (text: string): number => metric(text, preparedLine) + metric(text, 'llmgw_gateway_turns_prepared_total{model="qwen3",outcome="skipped"}');
  await waitFor(async () => outcomes(await registry.metrics()) >= 2, { what: "both chats' answers prepared" });
  const preparedBefore = metric(await registry.metrics(), preparedLine);
  const res = await request(new URL('/v1/chat/completions', gw.url), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'qwen3', messages, max_tokens: 12, stream: true }),
    signal: AbortSignal.timeout(20_000),
  });
  assert.equal(res.statusCode, 200);
  const first = String(res.headers['x-llmgw-replica']);
  let answer = '';
  for (const line of (await res.body.text()).split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    const delta = (JSON.parse(line.slice(6)) as { choices: { delta?: { content?: string } }[] }).choices[0]?.delta;
    answer += delta?.content ?? '';
  }
  assert.notEqual(answer, '');
  await waitFor(async () => metric(await registry.metrics(), preparedLine) === preparedBefore + 1, { what: 'the next turn prepared' });
  await settle();
  const next = await chat(gw.url, [...messages, { role: 'assistant', content: answer }, { role: 'user', content: 'and then?' }]);
  assert.deepEqual([next.status, next.route, next.replica], [200, 'precise', first]);
  // Every local id list is also checked against /tokenize in the background here (verify every 1).
  const checks = (text: string, outcome: string): number => metric(text, `llmgw_gateway_tokenize_checks_total{model="qwen3",outcome="${outcome}"}`);
  await waitFor(async () => checks(await registry.metrics(), 'match') + checks(await registry.metrics(), 'mismatch') >= 3, { what: 'the background checks' });
  assert.equal(checks(await registry.metrics(), 'mismatch'), 0, 'the prepared turn\'s ids matched the engine\'s');
});

void test('local tokenize: a 25 KB chat (read into shared memory, parsed and tokenized in a worker, sent upstream as the client sent it) is answered, and its next turn routes precise', async (t) => {
  const { gw, registry, settle, pool } = await cluster(t, { localTokenizer: 'bytes', router: { tokenizeVerifyFirst: 1, tokenizeVerifyEvery: 1 } });
  await waitFor(async () => metric(await registry.metrics(), stateLine('verifying')) === 1, { what: 'the bytes tokenizer loaded in the pool' });
  assert.equal((await chat(gw.url, history('cranes', 1))).status, 200);
  const doc = 'a long document about cranes and their migrations, '.repeat(500);
  const messages = [{ role: 'user', content: doc }];
  const first = await chat(gw.url, messages);
  assert.equal(first.status, 200);
  await settle();
  const next = await chat(gw.url, [...messages, { role: 'assistant', content: 'They fly far.' }, { role: 'user', content: 'How far?' }]);
  assert.deepEqual([next.status, next.route, next.replica], [200, 'precise', first.replica]);
  assert.ok((next.body.usage?.prompt_tokens_details?.cached_tokens ?? 0) > 20_000, 'the engine got the same bytes and hit the document');
  assert.equal(pool.stats.pooledParses, 2, 'both long bodies were parsed in the pool, the short first chat on the event loop');
  const parses = (text: string, thread: string, reason: string): number => metric(text, `llmgw_gateway_body_parses_total{thread="${thread}",reason="${reason}"}`);
  const text = await registry.metrics();
  assert.deepEqual([parses(text, 'worker', 'long'), parses(text, 'event-loop', 'short')], [2, 1]);
  const checks = (text: string, outcome: string): number => metric(text, `llmgw_gateway_tokenize_checks_total{model="qwen3",outcome="${outcome}"}`);
  await waitFor(async () => checks(await registry.metrics(), 'match') >= 2, { what: 'the checks against /tokenize' });
  assert.equal(checks(await registry.metrics(), 'mismatch'), 0);
});

void test('local tokenize: a chat shorter than router.prepare_min_prompt_tokens is not prepared, and counted as short; a longer one is prepared', async (t) => {
  const { gw, registry } = await cluster(t, { localTokenizer: 'bytes', router: { tokenizeVerifyFirst: 1, tokenizeVerifyEvery: 0, prepareMinPromptTokens: 2048 } });
  await waitFor(async () => metric(await registry.metrics(), stateLine('verifying')) === 1, { what: 'the bytes tokenizer loaded in the pool' });
  assert.equal((await chat(gw.url, history('plovers', 1))).status, 200);
  assert.equal((await chat(gw.url, history('plovers', 2))).status, 200);
  await waitFor(async () => metric(await registry.metrics(), stateLine('trusted')) === 1, { what: 'trusted once the checks in the background matched' });
  const prepared = (text: string, outcome: string): number => metric(text, `llmgw_gateway_turns_prepared_total{model="qwen3",outcome="${outcome}"}`);
  const shortBefore = prepared(await registry.metrics(), 'short');
  assert.equal((await chat(gw.url, history('plovers', 3))).status, 200);
  assert.equal(prepared(await registry.metrics(), 'short'), shortBefore + 1, 'counted when its answer went out');
  // The byte tokenizer gives a token a byte: 3 KB of document is over the bound.
  const long = [{ role: 'user', content: 'plovers run along the shore and stop. '.repeat(80) }];
  assert.equal((await chat(gw.url, long)).status, 200);
  await waitFor(async () => prepared(await registry.metrics(), 'prepared') === 1, { what: 'the long chat prepared' });
  assert.equal(prepared(await registry.metrics(), 'short'), shortBefore + 1);
});

void test('local tokenize: a short chat is tokenized on the event loop, a long one in a worker; both routed precise on ids the engine confirms', async (t) => {
  const { gw, registry, settle } = await cluster(t, { localTokenizer: 'bytes', router: { tokenizeVerifyFirst: 1, tokenizeVerifyEvery: 1 } });
  await waitFor(async () => metric(await registry.metrics(), stateLine('verifying')) === 1, { what: 'the bytes tokenizer loaded in the pool and on the loop' });
  assert.equal((await chat(gw.url, history('wrens', 1))).status, 200);
  assert.equal((await chat(gw.url, history('wrens', 1))).status, 200);
  await waitFor(async () => metric(await registry.metrics(), stateLine('trusted')) === 1, { what: 'trusted once the checks in the background matched' });
  const threads = (text: string, thread: string): number => metric(text, `llmgw_gateway_pool_tokenizes_total{thread="${thread}"}`);
  const before = await registry.metrics();
  const short = [{ role: 'user', content: 'How do wrens sing?' }];
  const long = [{ role: 'user', content: 'wrens sing loud songs for birds so small. '.repeat(40) }];
  const first = { short: await chat(gw.url, short), long: await chat(gw.url, long) };
  const after = await registry.metrics();
  assert.equal(threads(after, 'event-loop') - threads(before, 'event-loop'), 1, 'the short chat, on the loop');
  assert.equal(threads(after, 'worker') - threads(before, 'worker'), 1, 'the 1.7 KB one, in a worker');
  await settle();
  for (const [messages, was] of [[short, first.short], [long, first.long]] as const) {
    const again = await chat(gw.url, [...messages, { role: 'assistant', content: 'They do.' }, { role: 'user', content: 'More?' }]);
    assert.deepEqual([again.status, again.route, again.replica], [200, 'precise', was.replica]);
  }
  // Every local id list is also checked against /tokenize in the background here (verify every 1).
  const checks = (text: string, outcome: string): number => metric(text, `llmgw_gateway_tokenize_checks_total{model="qwen3",outcome="${outcome}"}`);
  await waitFor(async () => checks(await registry.metrics(), 'match') >= 5, { what: 'the background checks' });
  assert.equal(checks(await registry.metrics(), 'mismatch'), 0, 'ids made on the loop and in a worker match the engine\'s');
});

void test('local tokenize: a tool chat whose numbers JS would write otherwise than Python (1.0, 1e16, past 2^53, NaN) is tokenized locally, not sent to /tokenize, and its ids match the engine\'s', async (t) => {
  const { gw, registry } = await cluster(t, { localTokenizer: 'bytes', router: { tokenizeVerifyFirst: 0, tokenizeVerifyEvery: 1 } });
  await waitFor(async () => metric(await registry.metrics(), stateLine('trusted')) === 1, { what: 'the bytes tokenizer loaded and trusted' });
  const count = (text: string, outcome: string): number => metric(text, `llmgw_gateway_tokenize_duration_seconds_count{outcome="${outcome}"}`);
  const before = await registry.metrics();
  const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { days: { type: 'number', minimum: 1, maximum: 1e21 } } } } }];
  const messages = [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"days": 1.0, "scale": 1e16, "id": 12345678901234567890, "bad": NaN}' } }] },
    { role: 'tool', tool_call_id: 'c1', content: '21 C' },
  ];
  assert.equal((await chat(gw.url, messages, { tools })).status, 200);
  const after = await registry.metrics();
  assert.equal(count(after, 'local') - count(before, 'local'), 1, 'ids from the local render');
  assert.equal(count(after, 'engine') - count(before, 'engine'), 0, 'no /tokenize for routing');
  const checks = (text: string, outcome: string): number => metric(text, `llmgw_gateway_tokenize_checks_total{model="qwen3",outcome="${outcome}"}`);
  await waitFor(async () => checks(await registry.metrics(), 'match') >= 1, { what: 'the background check against /tokenize' });
  assert.equal(checks(await registry.metrics(), 'mismatch'), 0);
});
