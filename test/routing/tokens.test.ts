// Reading /tokenize answers: the fast scan gives exactly what JSON.parse would, and anything it
// does not recognise is either handed to JSON.parse or refused, never misread. And asking them in
// each engine's format.
import { strict as assert } from 'node:assert';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { Agent } from 'undici';
import { concatBody } from '../../src/gateway/index.js';
import { parseGenerationRequest } from '../../src/limits/index.js';
import { EngineTokenizer, PoolTokenizer, tokensOf, VerifiedTokens, type TokenizePool } from '../../src/routing/tokens.js';

const rows: readonly { why: string; body: string; want: number[] | undefined }[] = [
  { why: "vLLM's answer", body: '{"count":3,"max_model_len":10,"tokens":[1,2,3],"token_strs":null}', want: [1, 2, 3] },
  { why: 'an empty prompt', body: '{"count":0,"max_model_len":10,"tokens":[],"token_strs":null}', want: [] },
  { why: 'whitespace anywhere JSON allows it', body: '{"tokens": [ 10 , 20\n,30 ] }', want: [10, 20, 30] },
  { why: 'a negative id is not a token', body: '{"tokens":[1,-2]}', want: undefined },
  { why: 'a fraction is not a token', body: '{"tokens":[1.5]}', want: undefined },
  { why: 'an id past 32 bits is refused, not wrapped', body: '{"tokens":[4294967296]}', want: undefined },
  { why: 'a body that is not JSON', body: 'Internal Server Error', want: undefined },
  { why: '"tokens" inside a string is not mistaken for the list', body: '{"token_strs":["\\"tokens\\":[9]"],"tokens":[7]}', want: [7] },
];
for (const r of rows) {
  void test(`tokensOf: ${r.why}`, () => {
    const got = tokensOf(Buffer.from(r.body));
    assert.deepEqual(got === undefined ? undefined : [...got], r.want);
  });
}

void test('tokensOf: the array owns its whole buffer, so the scorer can transfer it', () => {
  const got = tokensOf(Buffer.from('{"tokens":[5,6,7,8]}'));
  assert.ok(got !== undefined && got.byteOffset === 0 && got.byteLength === got.buffer.byteLength);
});

// A pool whose tokenize is `tokenize`; PoolTokenizer asks it of nothing else here.
function poolWith(tokenize: TokenizePool['tokenize']): PoolTokenizer {
  return new PoolTokenizer({ tokenize, load: () => Promise.resolve({ ok: true, incremental: true, pieces: 'bytes' }), prepare: () => Promise.resolve({ ok: false, reason: 'test' }) });
}

const oneChat = parseGenerationRequest('chat', Buffer.from('{"model":"m","messages":[{"role":"user","content":"x"}]}'));
const byteTarget = { url: new URL('http://127.0.0.1:9/'), tokenizer: 'bytes' };

void test('PoolTokenizer: a body in shared memory reaches the pool as it is; any other is a copy of its own, the caller keeping its bytes', async () => {
  const seen: Uint8Array[] = [];
  const local = poolWith((task) => {
    seen.push(task.body);
    return Promise.resolve({ ok: false, reason: 'test' });
  });
  const big = Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x'.repeat(100_000) }] }));
  const shared = concatBody([big], big.length);
  assert.ok(shared.buffer instanceof SharedArrayBuffer, 'readBody keeps a large body in shared memory');
  const small = Buffer.from('{"model":"m","messages":[{"role":"user","content":"x"}]}');
  assert.ok(!(concatBody([small], small.length).buffer instanceof SharedArrayBuffer), 'a small one stays in an ordinary buffer');
  await local.tokens(oneChat, byteTarget, { signal: new AbortController().signal, body: shared });
  await local.tokens(oneChat, byteTarget, { signal: new AbortController().signal, body: small });
  assert.equal(seen[0], shared, 'shared: the same bytes, no copy');
  assert.notEqual(seen[1], small);
  assert.deepEqual(Buffer.from(seen[1] ?? new Uint8Array()), small, 'copied whole');
  assert.equal(small.length > 0, true, 'and the caller keeps its own');
});

void test('PoolTokenizer: ids stay in the pool only when the caller needs none and every group is scored there', async () => {
  const asked: boolean[] = [];
  const local = poolWith((task) => {
    asked.push(task.ids);
    return Promise.resolve({ ok: true as const, tokens: task.ids ? Uint32Array.of(1, 2, 3) : undefined, count: 3, scored: [] });
  });
  const ask = { signal: new AbortController().signal, body: Buffer.from('{}') };
  const score = [{ hash: { blockSizeTokens: 16, seed: '0' }, slots: [0] }];
  const counted = await local.tokens(oneChat, byteTarget, { ...ask, score, ids: false });
  assert.deepEqual(counted.ok && [counted.tokens, counted.ok && counted.tokens === undefined ? counted.count : -1], [undefined, 3]);
  const unscored = await local.tokens(oneChat, byteTarget, { ...ask, ids: false });
  assert.ok(unscored.ok && unscored.tokens !== undefined, 'without groups to score, the ids come back');
  assert.deepEqual(asked, [false, true]);
});

void test('PoolTokenizer: news of what encodes a tokenizer\'s pieces reaches onPieces once, with the tokenizer it is of', async () => {
  const heard: [string, string][] = [];
  let news: string | undefined = 'tokenizers (our byte-level BPE differed from tokenizers at token 3)';
  const pool: TokenizePool = {
    tokenize: () => {
      const pieces = news;
      news = undefined;
      return Promise.resolve({ ok: true as const, tokens: Uint32Array.of(1), count: 1, scored: [], pieces });
    },
    load: () => Promise.resolve({ ok: true, incremental: true, pieces: 'bpe' }),
    prepare: () => Promise.resolve({ ok: false, reason: 'test' }),
  };
  const local = new PoolTokenizer(pool, { onPieces: (tokenizer, pieces) => heard.push([tokenizer, pieces]) });
  const ask = { signal: new AbortController().signal, body: Buffer.from('{}') };
  await local.tokens(oneChat, byteTarget, ask);
  await local.tokens(oneChat, byteTarget, ask);
  assert.deepEqual(heard, [['bytes', 'tokenizers (our byte-level BPE differed from tokenizers at token 3)']]);
});

void test('EngineTokenizer: a llama.cpp replica is asked in its own format, a chat rendered by /apply-template first, and cached apart from vLLM\'s answer', async (t) => {
  const asked: { path: string; body: unknown }[] = [];
  const server = createServer((req, res) => {
    let text = '';
    req.on('data', (c: Buffer) => (text += c.toString('utf8')));
    req.on('end', () => {
      const body = JSON.parse(text) as Record<string, unknown>;
      asked.push({ path: req.url ?? '', body });
      res.setHeader('content-type', 'application/json');
      if (req.url === '/apply-template') res.end(JSON.stringify({ prompt: '<|im_start|>user\nx<|im_end|>\n' }));
      else res.end(JSON.stringify({ tokens: typeof body.content === 'string' ? [...body.content].map((c) => c.charCodeAt(0)) : [9] }));
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => server.close());
  const url = new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
  const dispatcher = new Agent();
  t.after(() => dispatcher.close());
  const engine = new EngineTokenizer({ dispatcher, maxEntries: 8 });
  const signal = new AbortController().signal;
  const chat = parseGenerationRequest('chat', Buffer.from('{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[],"temperature":0.5,"n":1}'));

  const got = await engine.tokens(chat, { url, tokenizeApi: 'llamacpp' }, { signal });
  assert.ok(got.ok);
  assert.deepEqual([...got.tokens], [...'<|im_start|>user\nx<|im_end|>\n'].map((c) => c.charCodeAt(0)));
  // Only what changes the rendered prompt goes to /apply-template; sampling does not.
  assert.deepEqual(asked, [
    { path: '/apply-template', body: { messages: [{ role: 'user', content: 'x' }], tools: [] } },
    { path: '/tokenize', body: { content: '<|im_start|>user\nx<|im_end|>\n', add_special: true, parse_special: true } },
  ]);
  assert.equal((await engine.tokens(chat, { url, tokenizeApi: 'llamacpp' }, { signal })).ok && asked.length, 2, 'the second ask is cached');
  // The same request of a vLLM replica is another question, asked in vLLM's format.
  const vllm = await engine.tokens(chat, { url }, { signal });
  assert.ok(vllm.ok && vllm.via === 'engine');
  assert.equal(asked[2]?.path, '/tokenize');
  assert.deepEqual((asked[2]?.body as { messages?: unknown }).messages, [{ role: 'user', content: 'x' }]);

  const completion = parseGenerationRequest('completions', Buffer.from('{"model":"m","prompt":"ab"}'));
  const ids = await engine.tokens(completion, { url, tokenizeApi: 'llamacpp' }, { signal });
  assert.ok(ids.ok);
  assert.deepEqual([...ids.tokens], [97, 98]);
  assert.deepEqual(asked[3], { path: '/tokenize', body: { content: 'ab', add_special: true, parse_special: true } });
});

void test("VerifiedTokens: ids that only count the prompt never cost an engine's round trip while the model's local ids cannot be used; other asks still go to the engine", async () => {
  let engineCalls = 0;
  const engine = {
    tokens: () => {
      engineCalls++;
      return Promise.resolve({ ok: true as const, tokens: Uint32Array.of(1, 2), via: 'engine' as const, owned: false });
    },
  } as unknown as EngineTokenizer;
  const pool: TokenizePool = {
    tokenize: () => Promise.resolve({ ok: false, reason: 'not in this test' }),
    load: () => Promise.resolve({ ok: false, reason: 'this tokenizer does not load' }),
    prepare: () => Promise.resolve({ ok: false, reason: 'not in this test' }),
  };
  const verified = new VerifiedTokens({ local: new PoolTokenizer(pool), engine, pool, verifyFirst: 2, verifyEvery: 0, checkTimeoutMs: 1_000 });
  const ask = { signal: new AbortController().signal, body: Buffer.from('{"model":"m","messages":[{"role":"user","content":"x"}]}'), countOnly: true };
  assert.deepEqual(await verified.tokens(oneChat, byteTarget, ask), { ok: false, reason: 'local-loading' });
  await verified.whenLoaded();
  assert.equal(verified.stateOf('m'), 'failed');
  assert.deepEqual(await verified.tokens(oneChat, byteTarget, ask), { ok: false, reason: 'local-failed' });
  assert.equal(engineCalls, 0);
  const hashed = await verified.tokens(oneChat, byteTarget, { ...ask, countOnly: false });
  assert.equal(hashed.ok, true);
  assert.equal(engineCalls, 1);
});

void test("VerifiedTokens: while a model is verified its local ids route at once; /tokenize checks them in the background, no more checks at a time than are still wanted; matches trust it, a difference turns it off", async () => {
  const answers: ((ids: Uint32Array) => void)[] = [];
  const engine = {
    tokens: () => new Promise((resolve) => answers.push((ids) => resolve({ ok: true as const, tokens: ids, via: 'engine' as const, owned: false }))),
  } as unknown as EngineTokenizer;
  const pool: TokenizePool = {
    tokenize: (task) => Promise.resolve({ ok: true as const, tokens: task.ids ? Uint32Array.of(1, 2, 3) : undefined, count: 3, scored: [] }),
    load: () => Promise.resolve({ ok: true, incremental: true, pieces: 'bytes' }),
    prepare: () => Promise.resolve({ ok: false, reason: 'not in this test' }),
  };
  const make = (): VerifiedTokens => new VerifiedTokens({ local: new PoolTokenizer(pool), engine, pool, verifyFirst: 2, verifyEvery: 0, checkTimeoutMs: 10_000 });
  const ask = { signal: new AbortController().signal, body: Buffer.from('{}') };
  const verified = make();
  verified.load('m', 'bytes');
  await verified.whenLoaded();
  assert.equal(verified.stateOf('m'), 'verifying');
  // The engine has not answered any check, and every request still has its ids.
  for (let i = 0; i < 5; i++) {
    const got = await verified.tokens(oneChat, byteTarget, ask);
    assert.deepEqual(got.ok && got.via !== 'engine' && [...(got.tokens ?? [])], [1, 2, 3], 'local ids, not held for /tokenize');
  }
  assert.equal(answers.length, 2, 'two checks wanted, two asked, however many requests came');
  for (const a of answers.splice(0)) a(Uint32Array.of(1, 2, 3));
  await verified.whenIdle();
  assert.equal(verified.stateOf('m'), 'trusted');

  const wrong = make();
  wrong.load('m', 'bytes');
  await wrong.whenLoaded();
  await wrong.tokens(oneChat, byteTarget, ask);
  await wrong.tokens(oneChat, byteTarget, ask);
  for (const a of answers.splice(0)) a(Uint32Array.of(1, 2, 4));
  await wrong.whenIdle();
  assert.equal(wrong.stateOf('m'), 'off');
  const after = wrong.tokens(oneChat, byteTarget, ask);
  await new Promise((r) => setImmediate(r));
  assert.equal(answers.length, 1, 'off: the engine tokenizes, and its ids route');
  answers[0]?.(Uint32Array.of(7));
  const got = await after;
  assert.deepEqual(got.ok && got.via === 'engine' && [...(got.tokens ?? [])], [7]);
});

void test('VerifiedTokens: loading(model) is the load in progress, settled whether it loads or fails, and nothing once it ended or for a model never seen', async () => {
  let fail: (r: { ok: false; reason: string }) => void = () => undefined;
  const pool: TokenizePool = {
    tokenize: () => Promise.resolve({ ok: false, reason: 'not in this test' }),
    load: () => new Promise((resolve) => (fail = resolve)),
    prepare: () => Promise.resolve({ ok: false, reason: 'not in this test' }),
  };
  const engine = {} as unknown as EngineTokenizer;
  const verified = new VerifiedTokens({ local: new PoolTokenizer(pool), engine, pool, verifyFirst: 2, verifyEvery: 0, checkTimeoutMs: 1_000 });
  assert.equal(verified.loading('m'), undefined, 'a model never seen is not loading');
  verified.load('m', 'bytes');
  const loading = verified.loading('m');
  assert.ok(loading !== undefined);
  fail({ ok: false, reason: 'broken file' });
  await loading;
  assert.equal(verified.stateOf('m'), 'failed');
  assert.equal(verified.loading('m'), undefined, 'a failed load is not waited for again');
});
