// The gateway's HTTP behaviour against fake engines: the official OpenAI client works through it,
// every failure gets its OpenAI error and the gateway keeps serving, engines get their own key.
import { strict as assert } from 'node:assert';
import { connect } from 'node:net';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import OpenAI from 'openai';
import { Registry } from 'prom-client';
import { request } from 'undici';
import type { GatewayConfig } from '../../src/gateway/index.js';
import type { ReplicaView } from '../../src/routing/index.js';
import { gatewayDefaults, hashApiKey, startGateway } from '../../src/gateway/index.js';
import { createLogger } from '../../src/log/index.js';
import { waitFor } from '../support/wait.js';
import type { FakeEngine } from './fake-engine.js';
import { startFakeEngine } from './fake-engine.js';

const clientKey = 'sk-test-client';

function view(e: { id: string; url: URL }, apiKey: string | undefined, over: Partial<ReplicaView> = {}): ReplicaView {
  return {
    id: e.id,
    node: 'local',
    model: 'm',
    adapters: [],
    url: e.url,
    apiKey,
    generation: 1,
    kvEvents: false,
    blockSizeTokens: 16,
    hashSeed: '0',
    dataParallelSize: 1,
    ...over,
  };
}

function config(over: Partial<GatewayConfig> = {}): GatewayConfig {
  return {
    ...gatewayDefaults,
    port: 0,
    maxBodyBytes: 64 * 1024,
    apiKeys: [{ name: 'tester', sha256: hashApiKey(clientKey), requestsPerMinute: 0, tokensPerMinute: 0, admin: false }],
    router: { ...gatewayDefaults.router, loadPollIntervalMs: 0 },
    ...over,
  };
}

async function setup(t: import('node:test').TestContext, o: { engines?: number; config?: Partial<GatewayConfig> } = {}) {
  const engines: FakeEngine[] = [];
  for (let i = 0; i < (o.engines ?? 2); i++) {
    const e = await startFakeEngine({ id: `r${i}`, apiKey: `engine-key-${i}` });
    t.after(() => e.close());
    engines.push(e);
  }
  let ready: ReplicaView[] = engines.map((e, i) => view(e, `engine-key-${i}`));
  const directory = { ready: (m: string) => (m === 'm' ? ready : []), models: () => ['m', 'other'] };
  const registry = new Registry();
  const gw = await startGateway({ config: config(o.config), directory, registry, log: process.env.GW_DEBUG ? createLogger({ level: 'debug' }) : undefined });
  t.after(() => gw.close());
  const client = new OpenAI({ apiKey: clientKey, baseURL: new URL('/v1', gw.url).href, maxRetries: 0, timeout: 10_000 });
  return { gw, engines, registry, client, setReady: (r: ReplicaView[]) => (ready = r), views: () => ready };
}

async function post(url: URL, path: string, body: string | Buffer, headers: Record<string, string> = {}) {
  const res = await request(new URL(path, url), {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${clientKey}`, ...headers },
    body,
    signal: AbortSignal.timeout(10_000),
  });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, json: JSON.parse(text) as Record<string, unknown>, text };
}

const chatBody = (content: string, extra: Record<string, unknown> = {}): string =>
  JSON.stringify({ model: 'm', messages: [{ role: 'user', content }], ...extra });

void test('openai client: non-streaming chat completion through the gateway', async (t) => {
  const { client } = await setup(t);
  const { data, response } = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }).withResponse();
  assert.match(data.choices[0]?.message.content ?? '', /^Hello from r[01]$/);
  assert.match(response.headers.get('x-llmgw-replica') ?? '', /^r[01]$/);
  assert.equal(response.headers.get('x-llmgw-route'), 'load');
  assert.equal(data.usage?.prompt_tokens, Buffer.from('<user>hi<assistant>').length);
});

void test('openai client: streaming chat completion passes the events through', async (t) => {
  const { client, engines, registry } = await setup(t);
  const stream = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }], stream: true });
  let text = '';
  let usageChunks = 0;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta.content ?? '';
    if (chunk.usage) usageChunks++;
  }
  assert.match(text, /^Hello from r[01]$/);
  // The gateway asked the engine for usage on the client's behalf and kept that chunk to itself.
  assert.equal(usageChunks, 0);
  const seen = engines.flatMap((e) => e.seen);
  assert.equal((seen[0]?.body.stream_options as { include_usage?: boolean }).include_usage, true);
  // ...and counted the key's tokens from it.
  assert.match(await registry.metrics(), /llmgw_gateway_key_tokens_total\{key="tester",kind="completion"\} 3/);
});

void test('each answered request is timed in every stage of the request path, once', async (t) => {
  const { gw, registry } = await setup(t, { engines: 1 });
  assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('hi'))).status, 200);
  const streamed = await request(new URL('/v1/chat/completions', gw.url), {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${clientKey}` },
    body: chatBody('hi', { stream: true }),
    signal: AbortSignal.timeout(10_000),
  });
  assert.match(await streamed.body.text(), /data: \[DONE\]/);
  // The finish stage is observed after the last byte is written: wait for the second request's.
  const counts = async (): Promise<Map<string, number>> =>
    new Map([...(await registry.metrics()).matchAll(/^llmgw_gateway_request_stage_seconds_count\{stage="([a-z]+)"\} (\d+)$/gm)].map((m) => [m[1] ?? '', Number(m[2])]));
  await waitFor(async () => (await counts()).get('finish') === 2, { timeoutMs: 5_000, what: 'both requests finished' });
  const seen = await counts();
  for (const stage of ['auth', 'body', 'parse', 'quota', 'admission', 'tokenize', 'score', 'decide', 'upstream', 'answer', 'ledger', 'finish']) {
    assert.equal(seen.get(stage), 2, `stage ${stage}`);
  }
});

void test('SSE passes through event by event: the client reads the first event while the engine holds the rest', async (t) => {
  const { gw, engines } = await setup(t, { engines: 1 });
  const e = engines[0];
  assert.ok(e);
  e.mode = 'held';
  const res = await request(new URL('/v1/chat/completions', gw.url), {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${clientKey}` },
    body: chatBody('hi', { stream: true }),
    signal: AbortSignal.timeout(10_000),
  });
  assert.equal(res.headers['content-type'], 'text/event-stream; charset=utf-8');
  const it = res.body[Symbol.asyncIterator]();
  const first = await it.next();
  assert.match(String(first.value), /^data: .*"role":"assistant"/);
  e.release();
  let rest = '';
  for (let r = await it.next(); r.done !== true; r = await it.next()) rest += String(r.value);
  assert.match(rest, /data: \[DONE\]/);
});

void test('openai client: a client that asked for usage gets the usage chunk', async (t) => {
  const { client } = await setup(t);
  const stream = await client.chat.completions.create({
    model: 'm',
    messages: [{ role: 'user', content: 'hi' }],
    stream: true,
    stream_options: { include_usage: true },
  });
  let usage: unknown;
  for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
  assert.ok(usage);
});

void test('openai client: completions endpoint, streaming and not', async (t) => {
  const { client } = await setup(t);
  const done = await client.completions.create({ model: 'm', prompt: 'once upon' });
  assert.match(done.choices[0]?.text ?? '', /Hello/);
  let text = '';
  for await (const c of await client.completions.create({ model: 'm', prompt: 'once upon', stream: true })) text += c.choices[0]?.text ?? '';
  assert.match(text, /^Hello from r[01]$/);
});

void test('engines get their own key; the client never sees it', async (t) => {
  const { gw, engines } = await setup(t, { engines: 1 });
  const r = await post(gw.url, '/v1/chat/completions', chatBody('hi'));
  assert.equal(r.status, 200);
  assert.equal(engines[0]?.seen[0]?.authorization, 'Bearer engine-key-0');
  assert.ok(!r.text.includes('engine-key') && !JSON.stringify(r.headers).includes('engine-key'));
});

void test('GET /v1/models lists the configured models; /health and /metrics answer', async (t) => {
  const { gw } = await setup(t);
  const m = await request(new URL('/v1/models', gw.url), { headers: { authorization: `Bearer ${clientKey}` } });
  const body = (await m.body.json()) as { data: { id: string }[] };
  assert.deepEqual(body.data.map((d) => d.id), ['m', 'other']);
  const h = await request(new URL('/health', gw.url));
  assert.equal(h.statusCode, 200);
  assert.equal(h.headers['x-llmgw-route'], 'none');
  await h.body.dump();
  const met = await request(new URL('/metrics', gw.url));
  assert.match(await met.body.text(), /llmgw_prefix_decisions_total\{tier="precise"\} 0/);
});

const bad: readonly { why: string; body: string; headers?: Record<string, string>; status: number; code: string; param?: string }[] = [
  { why: 'malformed JSON is a 400, not a crash', body: '{"model": "m", "messages": [', status: 400, code: 'bad_json' },
  { why: 'a body that is not an object is a 400', body: '[1,2]', status: 400, code: 'bad_json' },
  { why: 'model must be a string', body: JSON.stringify({ model: 7, messages: [] }), status: 400, code: 'bad_request', param: 'model' },
  { why: 'messages must be a list', body: JSON.stringify({ model: 'm', messages: 'hi' }), status: 400, code: 'bad_request', param: 'messages' },
  { why: 'a message role must be a string', body: JSON.stringify({ model: 'm', messages: [{ role: 1, content: 'x' }] }), status: 400, code: 'bad_request', param: 'messages[0].role' },
  { why: 'stream must be a boolean', body: chatBody('hi', { stream: 'yes' }), status: 400, code: 'bad_request', param: 'stream' },
  { why: 'max_tokens must be a positive whole number', body: chatBody('hi', { max_tokens: -1 }), status: 400, code: 'bad_request', param: 'max_tokens' },
  { why: 'an unknown model is a 404 naming the models there are', body: JSON.stringify({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }), status: 404, code: 'model_not_found' },
  { why: 'a wrong key is a 401', body: chatBody('hi'), headers: { authorization: 'Bearer sk-wrong' }, status: 401, code: 'invalid_api_key' },
  { why: 'a missing key is a 401', body: chatBody('hi'), headers: { authorization: '' }, status: 401, code: 'invalid_api_key' },
  { why: 'a body over the limit is a 413', body: chatBody('x'.repeat(100 * 1024)), status: 413, code: 'body_too_large' },
  { why: 'a known model with no ready replica is a 503', body: JSON.stringify({ model: 'other', messages: [{ role: 'user', content: 'x' }] }), status: 503, code: 'no_replica' },
];

void test('bad input gets its OpenAI error and the gateway keeps serving', async (t) => {
  const { gw } = await setup(t);
  for (const b of bad) {
    const r = await post(gw.url, '/v1/chat/completions', b.body, b.headers);
    assert.equal(r.status, b.status, b.why);
    const err = r.json.error as { code: string; param: string | null; message: string; type: string };
    assert.equal(err.code, b.code, b.why);
    if (b.param !== undefined) assert.equal(err.param, b.param, b.why);
    assert.ok(r.headers['x-llmgw-route'] !== undefined && r.headers['x-llmgw-replica'] !== undefined, `${b.why}: route headers`);
    const ok = await post(gw.url, '/v1/chat/completions', chatBody('still there?'));
    assert.equal(ok.status, 200, `${b.why}: the next request is served`);
  }
});

void test('a body over the limit streamed without content-length is cut at the limit', async (t) => {
  const { gw } = await setup(t);
  const big = Buffer.from(chatBody('y'.repeat(200 * 1024)));
  const chunks = (): Readable => Readable.from((function* () {
    for (let i = 0; i < big.length; i += 16 * 1024) yield big.subarray(i, i + 16 * 1024);
  })());
  const res = await request(new URL('/v1/chat/completions', gw.url), {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${clientKey}` },
    body: chunks(),
    signal: AbortSignal.timeout(10_000),
  }).catch((e: unknown) => e);
  // Either the 413 arrives, or the connection is closed on a client still sending: never a 200.
  if (!(res instanceof Error)) {
    assert.equal((res as { statusCode: number }).statusCode, 413);
    await (res as { body: { dump(): Promise<void> } }).body.dump();
  }
  assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('after'))).status, 200);
});

void test('Expect: 100-continue: a body declared over the limit gets its 413 without a 100; one within it is invited', async (t) => {
  const { gw } = await setup(t);
  const ask = async (length: number, body: string): Promise<string> => {
    const sock = connect(Number(gw.url.port), '127.0.0.1');
    t.after(() => sock.destroy());
    let got = '';
    sock.on('data', (d: Buffer) => {
      got += d.toString();
      if (got.startsWith('HTTP/1.1 100') && body !== '') sock.write(body);
    });
    sock.write(
      `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${clientKey}\r\ncontent-type: application/json\r\n` +
        `expect: 100-continue\r\ncontent-length: ${length}\r\n\r\n`,
    );
    await waitFor(() => /HTTP\/1\.1 [2-5]\d\d/.test(got), { what: 'a final status' });
    sock.destroy();
    return got;
  };
  const over = await ask(1024 * 1024, '');
  assert.match(over, /^HTTP\/1\.1 413/, 'the 413 comes first, no 100 Continue before it');
  const small = chatBody('within');
  const within = await ask(Buffer.byteLength(small), small);
  assert.match(within, /^HTTP\/1\.1 100 Continue/);
  assert.match(within, /HTTP\/1\.1 200/);
});

void test('the engine dying mid-stream ends the client stream with an error; the gateway keeps serving', async (t) => {
  const { client, engines, registry } = await setup(t, { engines: 1 });
  const e = engines[0];
  assert.ok(e);
  e.mode = 'die-mid-stream';
  const stream = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }], stream: true });
  await assert.rejects(async () => {
    for await (const _ of stream) {
      // reading until the error
    }
  });
  e.mode = 'ok';
  const done = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'again' }] });
  assert.match(done.choices[0]?.message.content ?? '', /Hello/);
  assert.match(await registry.metrics(), /llmgw_gateway_requests_total\{endpoint="chat",status="502",route="load"\} 1/);
});

void test('a replica that fails before answering is retried once on another', async (t) => {
  const { gw, engines, setReady, views } = await setup(t);
  const [a, b] = engines;
  assert.ok(a && b);
  a.mode = 'status-500';
  for (let i = 0; i < 4; i++) {
    const r = await post(gw.url, '/v1/chat/completions', chatBody(`q${i}`));
    assert.equal(r.status, 200);
    assert.equal(r.headers['x-llmgw-replica'], 'r1');
  }
  // A replica whose port refuses connections (the engine died between health checks) is also retried.
  a.mode = 'ok';
  await a.close();
  for (let i = 0; i < 3; i++) assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(`z${i}`))).status, 200);
  // With no other replica left the client gets a 502.
  setReady(views().filter((v) => v.id === 'r0'));
  const r = await post(gw.url, '/v1/chat/completions', chatBody('alone'));
  assert.equal(r.status, 502);
  assert.equal(r.headers['x-llmgw-replica'], 'r0');
});

void test('an engine that sends no headers in time is a 504', async (t) => {
  const { gw, engines } = await setup(t, { engines: 1, config: { upstream: { ...gatewayDefaults.upstream, headersTimeoutMs: 300, idleTimeoutMs: 1000, connections: 4, maxMigrations: 1 } } });
  const e = engines[0];
  assert.ok(e);
  e.mode = 'hang';
  const r = await post(gw.url, '/v1/chat/completions', chatBody('slow'));
  assert.equal(r.status, 504);
});

void test('a client that disconnects aborts the engine request', async (t) => {
  const { gw, engines } = await setup(t, { engines: 1 });
  const e = engines[0];
  assert.ok(e);
  e.mode = 'slow-stream';
  const body = chatBody('bye', { stream: true });
  const sock = connect(Number(gw.url.port), '127.0.0.1');
  t.after(() => sock.destroy());
  sock.write(
    `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${clientKey}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  await waitFor(() => e.seen.length === 1, { what: 'the engine to get the request' });
  sock.destroy();
  await waitFor(() => e.aborted === 1, { what: 'the engine request to be aborted' });
});

void test('a client that leaves mid-stream is counted 499, not 200, and its request leaves the load book', async (t) => {
  const { gw, engines, registry } = await setup(t, { engines: 1 });
  const e = engines[0];
  assert.ok(e);
  e.mode = 'slow-stream';
  const body = chatBody('bye', { stream: true });
  const sock = connect(Number(gw.url.port), '127.0.0.1');
  t.after(() => sock.destroy());
  let got = '';
  sock.on('data', (d: Buffer) => (got += d.toString()));
  sock.write(
    `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${clientKey}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  await waitFor(() => got.includes('data:'), { what: 'the first event to reach the client' });
  sock.destroy();
  await waitFor(() => e.aborted === 1, { what: 'the engine request to be aborted' });
  await waitFor(async () => /llmgw_gateway_requests_total\{endpoint="chat",status="499",route="load"\} 1/.test(await registry.metrics()), {
    what: 'the request to be counted as 499',
  });
  assert.doesNotMatch(await registry.metrics(), /llmgw_gateway_requests_total\{endpoint="chat",status="200"/);
  assert.equal(gw.load.get('r0').inFlight, 0);
});

void test('per-key request quota: over it is a 429 with retry-after', async (t) => {
  const keys = [{ name: 'tester', sha256: hashApiKey(clientKey), requestsPerMinute: 2, tokensPerMinute: 0, admin: false }];
  const { gw } = await setup(t, { config: { apiKeys: keys } });
  assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('1'))).status, 200);
  assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('2'))).status, 200);
  const r = await post(gw.url, '/v1/chat/completions', chatBody('3'));
  assert.equal(r.status, 429);
  assert.equal((r.json.error as { code: string }).code, 'rate_limit_exceeded');
  assert.ok(Number(r.headers['retry-after']) >= 1);
});

void test('per-key token quota: usage is charged, then the key waits', async (t) => {
  const keys = [{ name: 'tester', sha256: hashApiKey(clientKey), requestsPerMinute: 0, tokensPerMinute: 420, admin: false }];
  const { gw, registry } = await setup(t, { config: { apiKeys: keys } });
  // Each request holds its bound (body bytes + 256, plus max_tokens) and is charged its usage (60).
  assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('a'.repeat(40), { max_tokens: 40 }))).status, 200);
  assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('b', { max_tokens: 100 }))).status, 429);
  assert.match(await registry.metrics(), /llmgw_gateway_key_tokens_total\{key="tester",kind="prompt"\} 57/);
});
