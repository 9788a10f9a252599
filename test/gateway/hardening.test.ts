// What a hostile or unlucky client did to the gateway, each now refused with an OpenAI error and
// without harm to anyone else: JSON nested to overflow the stack, a chat template that stalls an
// engine, a body trickled in for minutes, protocol errors answered with empty bodies, a quota key
// overdrawn by concurrent requests, and a load balancer told "ok" before any replica was ready.
import { strict as assert } from 'node:assert';
import { connect } from 'node:net';
import { test, type TestContext } from 'node:test';
import { Registry } from 'prom-client';
import { request } from 'undici';
import type { ApiKeyConfig, GatewayConfig } from '../../src/gateway/index.js';
import type { ReplicaView } from '../../src/routing/index.js';
import { gatewayDefaults, hashApiKey, parseGatewayConfig, startGateway } from '../../src/gateway/index.js';
import { fakeTokens, startFakeEngine } from './fake-engine.js';
import { waitFor } from '../support/wait.js';

const key = 'sk-hardening';
const keyed = (over: Partial<ApiKeyConfig> = {}): ApiKeyConfig[] => [
  { name: 'k', sha256: hashApiKey(key), requestsPerMinute: 0, tokensPerMinute: 0, admin: false, ...over },
];

async function gateway(t: TestContext, over: Partial<GatewayConfig> = {}, o: { ready?: boolean } = {}) {
  const engine = await startFakeEngine({ id: 'r0' });
  t.after(() => engine.close());
  const view: ReplicaView = {
    id: 'r0', node: 'local', model: 'm', adapters: [], url: engine.url, apiKey: undefined, generation: 1,
    kvEvents: false, blockSizeTokens: 16, hashSeed: '0', dataParallelSize: 1,
  };
  let ready = o.ready ?? true;
  const directory = { ready: (m: string) => (m === 'm' && ready ? [view] : []), models: () => ['m'] };
  const config: GatewayConfig = {
    ...gatewayDefaults,
    port: 0,
    apiKeys: keyed(),
    router: { ...gatewayDefaults.router, loadPollIntervalMs: 0 },
    ...over,
  };
  const gw = await startGateway({ config, directory, registry: new Registry() });
  t.after(() => gw.close());
  return { gw, engine, setReady: (v: boolean) => (ready = v) };
}

async function post(url: URL, body: string, path = '/v1/chat/completions') {
  const res = await request(new URL(path, url), {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body,
    signal: AbortSignal.timeout(10_000),
  });
  const text = await res.body.text();
  return { status: res.statusCode, json: JSON.parse(text) as { error?: { code: string; message: string; param: string | null; type: string } } & Record<string, unknown> };
}

const deep = (n: number): string => '['.repeat(n) + ']'.repeat(n);
const depth = 10_000;

// Each field the probe nested: the top level already got a 400, these overflowed the stack (500).
const nested = [
  { why: 'an unknown field', body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"x":${deep(depth)}}` },
  { why: 'messages[0]', body: `{"model":"m","messages":[${deep(depth)}]}` },
  { why: 'a message content', body: `{"model":"m","messages":[{"role":"user","content":${deep(depth)}}]}` },
  { why: 'max_tokens', body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":${deep(depth)}}` },
  { why: 'objects, not arrays', body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"x":${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}}` },
];

void test('JSON nested 10,000 deep in any field is a 400 bad_request naming the limit, and the gateway keeps serving', async (t) => {
  const { gw, engine } = await gateway(t);
  for (const n of nested) {
    const r = await post(gw.url, n.body);
    assert.equal(r.status, 400, n.why);
    assert.equal(r.json.error?.code, 'bad_request', n.why);
    assert.match(r.json.error?.message ?? '', /deeper than the limit of 64 levels/, n.why);
  }
  const completions = await post(gw.url, `{"model":"m","prompt":${deep(depth)}}`, '/v1/completions');
  assert.equal(completions.status, 400);
  assert.equal(engine.seen.length, 0);
  assert.equal((await post(gw.url, JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }))).status, 200);
});

void test('JSON as deep as gateway.max_json_depth passes; one level more does not', async (t) => {
  const { gw } = await gateway(t, { maxJsonDepth: 10 });
  // The body object is level 1, messages 2, the message 3: seven more arrays reach 10.
  const at = (extra: number): string => `{"model":"m","messages":[{"role":"user","content":"hi","x":${deep(extra)}}]}`;
  assert.equal((await post(gw.url, at(7))).status, 200);
  assert.equal((await post(gw.url, at(8))).status, 400);
});

const templated = [
  { why: 'chat_template', extra: { chat_template: '{% for i in range(3000) %}{% for j in range(3000) %}x{% endfor %}{% endfor %}' }, param: 'chat_template' },
  { why: 'chat_template_kwargs.chat_template', extra: { chat_template_kwargs: { chat_template: '{{ 1 }}' } }, param: 'chat_template_kwargs.chat_template' },
];

void test('a request chat template is refused with a 400 by default and never reaches the engine', async (t) => {
  const { gw, engine } = await gateway(t);
  for (const c of templated) {
    const r = await post(gw.url, JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], ...c.extra }));
    assert.equal(r.status, 400, c.why);
    assert.equal(r.json.error?.param, c.param, c.why);
    assert.match(r.json.error?.message ?? '', /trust_request_chat_template/, c.why);
  }
  // Template arguments that only switch the model's own template are not templates.
  const kwargs = await post(gw.url, JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], chat_template_kwargs: { enable_thinking: false } }));
  assert.equal(kwargs.status, 200);
  assert.equal(engine.seen.length, 1);
});

void test('a model listed in gateway.trust_request_chat_template takes a request chat template', async (t) => {
  const { gw, engine } = await gateway(t, { trustRequestChatTemplate: ['m'] });
  const r = await post(gw.url, JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], chat_template: '{{ messages }}' }));
  assert.equal(r.status, 200);
  assert.equal(engine.seen[0]?.body.chat_template, '{{ messages }}');
  assert.deepEqual(parseGatewayConfig({ trust_request_chat_template: ['m'] }).trustRequestChatTemplate, ['m']);
});

void test('GET /ready is 503 until every model has a ready replica, then 200; /health stays 200', async (t) => {
  const { gw, setReady } = await gateway(t, {}, { ready: false });
  const get = async (path: string) => {
    const res = await request(new URL(path, gw.url), { signal: AbortSignal.timeout(10_000) });
    return { status: res.statusCode, json: (await res.body.json()) as { status: string; waiting?: string[] } };
  };
  const before = await get('/ready');
  assert.equal(before.status, 503);
  assert.deepEqual(before.json.waiting, ['m']);
  assert.equal((await get('/health')).status, 200);
  setReady(true);
  const after = await get('/ready');
  assert.equal(after.status, 200);
  assert.equal(after.json.status, 'ready');
});

void test('GET /ready is 503 "warming" while a ready model\'s tokenizer loads, then 200; the gateway\'s whenWarm resolves with it', async (t) => {
  const engine = await startFakeEngine({ id: 'r0' });
  t.after(() => engine.close());
  const view: ReplicaView = {
    id: 'r0', node: 'local', model: 'm', adapters: [], url: engine.url, apiKey: undefined, generation: 1,
    kvEvents: true, blockSizeTokens: 16, hashSeed: '0', dataParallelSize: 1,
  };
  let loaded: (() => void) | undefined;
  const pool = {
    tokenize: () => Promise.resolve({ ok: false as const, reason: 'not in this test' }),
    load: () => new Promise<{ ok: true; incremental: boolean; pieces: string }>((resolve) => (loaded = () => resolve({ ok: true, incremental: true, pieces: 'ours' }))),
    prepare: () => Promise.resolve({ ok: false as const, reason: 'not in this test' }),
  };
  const config: GatewayConfig = { ...gatewayDefaults, port: 0, router: { ...gatewayDefaults.router, loadPollIntervalMs: 0 } };
  const gw = await startGateway({ config, directory: { ready: () => [view], models: () => ['m'] }, registry: new Registry(), tokenizePool: pool, tokenizerOf: () => 'bytes' });
  t.after(() => gw.close());
  const get = async () => {
    const res = await request(new URL('/ready', gw.url), { signal: AbortSignal.timeout(10_000) });
    return { status: res.statusCode, json: (await res.body.json()) as { status: string; warming: string[] } };
  };
  let warm = false;
  void gw.whenWarm().then(() => (warm = true));
  const warming = await get();
  assert.equal(warming.status, 503);
  assert.deepEqual(warming.json, { ...warming.json, status: 'warming', warming: ['m'] });
  // serve's serve.ready event waits on whenWarm, so it says what /ready says.
  assert.equal(warm, false);
  assert.ok(loaded);
  loaded();
  await waitFor(() => warm, { what: 'whenWarm to resolve once the tokenizer loaded' });
  assert.equal((await get()).status, 200);
});

/** Writes raw bytes to the gateway and reads everything it answers until it closes the connection. */
function raw(url: URL, write: (send: (s: string) => void) => void): Promise<{ status: number; headers: string; body: string; all: string }> {
  return new Promise((resolve, reject) => {
    const sock = connect({ host: url.hostname, port: Number(url.port) });
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error('the gateway did not answer and close within 10 s'));
    }, 10_000);
    let got = '';
    sock.on('data', (d: Buffer) => (got += d.toString('latin1')));
    sock.on('error', () => undefined);
    sock.on('close', () => {
      clearTimeout(timer);
      const [head = '', body = ''] = got.split('\r\n\r\n');
      resolve({ status: Number(/^HTTP\/1\.1 (\d+)/.exec(head)?.[1] ?? 0), headers: head, body, all: got });
    });
    sock.on('connect', () => write((s) => sock.write(s)));
  });
}

void test('a body trickled in slowly is cut at gateway.body_timeout_ms with an OpenAI 408', async (t) => {
  const { gw, engine } = await gateway(t, { bodyTimeoutMs: 300 });
  const timers: NodeJS.Timeout[] = [];
  t.after(() => timers.forEach(clearInterval));
  const r = await raw(gw.url, (send) => {
    send(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{`);
    timers.push(setInterval(() => send(' '), 50));
  });
  assert.equal(r.status, 408);
  const body = JSON.parse(r.body) as { error: { code: string; type: string; message: string } };
  assert.equal(body.error.code, 'body_timeout');
  assert.match(body.error.message, /gateway\.body_timeout_ms/);
  assert.equal(engine.seen.length, 0);
});

// Protocol-level refusals Node makes before any handler runs: each used to come with an empty body.
const protocol = [
  { why: 'headers over 16 KiB: 431', send: `GET /health HTTP/1.1\r\nhost: x\r\nx-big: ${'a'.repeat(20_000)}\r\n\r\n`, status: 431, code: 'headers_too_large' },
  { why: 'an Expect the gateway does not do: 417', send: `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nexpect: 200-ok\r\ncontent-length: 2\r\n\r\n{}`, status: 417, code: 'expectation' },
  { why: 'bad framing: 400', send: `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: abc\r\n\r\n`, status: 400, code: 'bad_http' },
  { why: 'not HTTP at all: 400', send: `HELLO\r\n\r\n`, status: 400, code: 'bad_http' },
];

for (const p of protocol) {
  void test(`protocol error answered with an OpenAI body: ${p.why}`, async (t) => {
    const { gw } = await gateway(t);
    const r = await raw(gw.url, (send) => send(p.send));
    assert.equal(r.status, p.status);
    assert.match(r.headers, /content-type: application\/json/i);
    const body = JSON.parse(r.body) as { error: { code: string; type: string; message: string } };
    assert.equal(body.error.code, p.code);
    assert.equal(body.error.type, 'invalid_request_error');
  });
}

void test('a token quota key cannot overdraw with 16 concurrent requests: each holds its bound until the engine reports usage', async (t) => {
  const tpm = 600;
  const { gw, engine } = await gateway(t, { apiKeys: keyed({ tokensPerMinute: tpm }) });
  const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'q'.repeat(40) }], max_tokens: 3 });
  const used = fakeTokens(JSON.parse(body) as Record<string, unknown>).length + 3;
  const t0 = Date.now();
  const results = await Promise.all(Array.from({ length: 16 }, () => post(gw.url, body)));
  const elapsedMs = Date.now() - t0;
  const ok = results.filter((r) => r.status === 200).length;
  assert.ok(ok >= 1, 'the budget admits at least one request');
  assert.ok(results.every((r) => r.status === 200 || r.json.error?.code === 'rate_limit_exceeded'));
  // The bucket refills at tpm per minute while the requests run; beyond that nothing is spent.
  assert.ok(ok * used <= tpm * (1 + elapsedMs / 60_000), `${ok} requests of ${used} tokens spent more than ${tpm}`);
  assert.equal(engine.seen.length, ok);
});

void test('a quota key request without max_tokens is sent with the key\'s remaining budget as its limit, and settles to its usage', async (t) => {
  const { gw, engine } = await gateway(t, { apiKeys: keyed({ tokensPerMinute: 1_000 }) });
  const first = await post(gw.url, JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }));
  assert.equal(first.status, 200);
  const imposed = engine.seen[0]?.body.max_tokens;
  assert.ok(typeof imposed === 'number' && imposed > 0 && imposed < 1_000);
  // The first request held nearly the whole budget, but settled to what it used: the next one fits.
  assert.equal((await post(gw.url, JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'again' }], max_tokens: 10 }))).status, 200);
});

void test('a malformed request after a good one on the same keep-alive connection still gets its OpenAI 400', async (t) => {
  const { gw } = await gateway(t);
  const r = await raw(gw.url, (send) => {
    send('GET /health HTTP/1.1\r\nhost: x\r\n\r\n');
    setTimeout(() => send('POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: abc\r\n\r\n'), 100);
  });
  const answers = r.all.split(/(?=HTTP\/1\.1 \d{3} )/);
  assert.match(answers[0] ?? '', /^HTTP\/1\.1 200/);
  assert.match(answers[1] ?? '', /^HTTP\/1\.1 400[\s\S]*"code":"bad_http"/);
});

void test('an engine answer that is not well-formed HTTP/1.1 is a 502 upstream_protocol, its bytes kept out of the message, and the gateway keeps serving', async (t) => {
  const { createServer } = await import('node:net');
  // Two different lengths for one answer: which one ends it is a guess, and a guess could hand the
  // client part of the next answer on the socket.
  const liar = createServer((s) => s.once('data', () => s.end('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{}')));
  await new Promise<void>((resolve) => liar.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => liar.close(() => resolve())));
  const address = liar.address();
  if (address === null || typeof address === 'string') throw new Error('no TCP address');
  const view: ReplicaView = {
    id: 'liar', node: 'local', model: 'm', adapters: [], url: new URL(`http://127.0.0.1:${address.port}/`), apiKey: undefined, generation: 1,
    kvEvents: false, blockSizeTokens: 16, hashSeed: '0', dataParallelSize: 1,
  };
  const config: GatewayConfig = { ...gatewayDefaults, port: 0, apiKeys: keyed(), router: { ...gatewayDefaults.router, loadPollIntervalMs: 0 } };
  const gw = await startGateway({ config, directory: { ready: () => [view], models: () => ['m'] }, registry: new Registry() });
  t.after(() => gw.close());
  for (let i = 0; i < 2; i++) {
    const r = await post(gw.url, JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }));
    assert.equal(r.status, 502);
    assert.equal(r.json.error?.code, 'upstream_protocol');
    // What was wrong is in the gateway's log: an engine's bytes on a reused socket could be another client's.
    assert.match(r.json.error?.message ?? '', /replica liar answered something that is not well-formed HTTP\/1\.1/);
  }
});
