// Engines that misbehave on purpose, behind a real gateway: each breach of a bound on what an engine
// may send, and each answer that breaks inside its body, reaches the client as a 502 (504 for a
// stall) whose code names it, the engine's socket is closed, and the next request is served.
import { strict as assert } from 'node:assert';
import { createServer, type Socket } from 'node:net';
import { test, type TestContext } from 'node:test';
import { Registry } from 'prom-client';
import { request } from 'undici';
import type { GatewayConfig } from '../../src/gateway/index.js';
import type { ReplicaView } from '../../src/routing/index.js';
import { gatewayDefaults, startGateway } from '../../src/gateway/index.js';
import { waitFor } from '../support/wait.js';

type Answer = (s: Socket) => void;

const ok = (s: Socket): void => {
  const body = JSON.stringify({ choices: [{ index: 0, message: { role: 'assistant', content: 'fine' } }], usage: { prompt_tokens: 1, completion_tokens: 1 } });
  s.write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`);
};

// A TCP engine answering each request with the next of `answers`, then `ok`; it counts its sockets.
async function engine(t: TestContext, answers: Answer[]) {
  const sockets: Socket[] = [];
  const server = createServer((s) => {
    sockets.push(s);
    s.on('error', () => undefined);
    let buf = '';
    s.on('data', (d: Buffer) => {
      buf += d.toString('latin1');
      for (;;) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const length = Number(/\r\ncontent-length: (\d+)/i.exec(buf.slice(0, end))?.[1] ?? 0);
        if (buf.length < end + 4 + length) return;
        buf = buf.slice(end + 4 + length);
        (answers.shift() ?? ok)(s);
      }
    });
  });
  t.after(() => new Promise<void>((resolve) => (sockets.forEach((s) => s.destroy()), server.close(() => resolve()))));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const a = server.address();
  if (a === null || typeof a === 'string') throw new Error('no TCP address');
  return { url: new URL(`http://127.0.0.1:${a.port}/`), sockets };
}

const upstream = { ...gatewayDefaults.upstream, maxHeadBytes: 4096, maxAnswerBytes: 64 * 1024, maxEventBytes: 4096, headersTimeoutMs: 600_000, idleTimeoutMs: 600_000 };

async function gateway(t: TestContext, url: URL, over: Partial<GatewayConfig['upstream']> = {}) {
  const view: ReplicaView = {
    id: 'r0', node: 'local', model: 'm', adapters: [], url, apiKey: undefined, generation: 1,
    kvEvents: false, blockSizeTokens: 16, hashSeed: '0', dataParallelSize: 1,
  };
  const config: GatewayConfig = { ...gatewayDefaults, port: 0, upstream: { ...upstream, ...over }, router: { ...gatewayDefaults.router, loadPollIntervalMs: 0 } };
  const gw = await startGateway({ config, directory: { ready: () => [view], models: () => ['m'] }, registry: new Registry() });
  t.after(() => gw.close());
  return gw;
}

// Every wait of the gateway's here is 600 s: an answer inside this bound was refused by what the
// engine sent, not by a clock.
async function chat(url: URL, stream = false) {
  const res = await request(new URL('/v1/chat/completions', url), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', stream, messages: [{ role: 'user', content: 'hi' }] }),
    signal: AbortSignal.timeout(15_000),
  });
  return { status: res.statusCode, text: await res.body.text() };
}

const head = (extra = ''): string => `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n${extra}`;
const sseHead = 'HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n';
const chunk = (s: string): string => `${Buffer.byteLength(s).toString(16)}\r\n${s}\r\n`;

const whole: { why: string; answer: Answer; status: number; code: string }[] = [
  { why: 'chunked, cut off mid-chunk', answer: (s) => s.end(`${head('transfer-encoding: chunked\r\n')}\r\n10\r\n{"choi`), status: 502, code: 'upstream' },
  { why: 'a chunk size that is not hex', answer: (s) => s.write(`${head('transfer-encoding: chunked\r\n')}\r\nzz\r\n{}\r\n0\r\n\r\n`), status: 502, code: 'upstream_protocol' },
  { why: 'content-length longer than the body, then the close', answer: (s) => s.end(`${head('content-length: 100\r\n')}\r\n{"choices":[]}`), status: 502, code: 'upstream' },
  { why: 'content-length over max_answer_bytes', answer: (s) => s.write(`${head('content-length: 1000000\r\n')}\r\n{`), status: 502, code: 'upstream_answer_too_large' },
  { why: 'a chunked body growing past max_answer_bytes', answer: (s) => s.write(`${head('transfer-encoding: chunked\r\n')}\r\n${chunk('x'.repeat(8000)).repeat(10)}`), status: 502, code: 'upstream_answer_too_large' },
  { why: 'a head over max_head_bytes', answer: (s) => s.write(`${head()}x-big: ${'x'.repeat(5000)}\r\n`), status: 502, code: 'upstream_head_too_large' },
  { why: 'garbage instead of a head (refused at once, not after the 600 s headers timeout)', answer: (s) => s.write('garbage'), status: 502, code: 'upstream_protocol' },
  { why: 'a head in bare LFs (refused at once)', answer: (s) => s.write('HTTP/1.1 200 OK\ncontent-length: 2\n\n{}'), status: 502, code: 'upstream_protocol' },
  { why: 'a 204 with a body: refused, and its bytes reach nobody', answer: (s) => s.write('HTTP/1.1 204 No Content\r\ncontent-length: 20\r\n\r\nsomeone else\'s bytes'), status: 502, code: 'upstream_protocol' },
];
for (const w of whole) {
  void test(`hostile engine, whole answer: ${w.why} is a ${w.status} ${w.code}; the next request is served`, async (t) => {
    const e = await engine(t, [w.answer]);
    const gw = await gateway(t, e.url);
    const r = await chat(gw.url);
    assert.equal(r.status, w.status, r.text);
    const body = JSON.parse(r.text) as { error: { code: string; message: string } };
    assert.equal(body.error.code, w.code);
    assert.doesNotMatch(body.error.message, /someone else/);
    await waitFor(() => e.sockets[0]?.destroyed === true || e.sockets[0]?.readableEnded === true, { what: 'the engine socket closed' });
    const next = await chat(gw.url);
    assert.equal(next.status, 200);
    assert.match(next.text, /fine/);
  });
}

void test('hostile engine: a body that goes silent is a 504 upstream_stalled', async (t) => {
  const e = await engine(t, [(s) => s.write(`${head('content-length: 100\r\n')}\r\n{"choi`)]);
  const gw = await gateway(t, e.url, { idleTimeoutMs: 200 });
  const r = await chat(gw.url);
  assert.equal(r.status, 504);
  assert.equal((JSON.parse(r.text) as { error: { code: string } }).error.code, 'upstream_stalled');
});

const streamed: { why: string; answer: Answer; code: string }[] = [
  {
    why: 'an SSE stream that never ends an event (once held the event loop for seconds per 16 MiB)',
    answer: (s) => s.write(sseHead + chunk(`data: ${'x'.repeat(3000)}`) + chunk('y'.repeat(3000))),
    code: 'upstream_event_too_large',
  },
  { why: 'a stream past max_answer_bytes', answer: (s) => s.write(sseHead + chunk('data: {"choices":[]}\n\n'.repeat(1000)).repeat(5)), code: 'upstream_answer_too_large' },
  { why: 'a stream cut off mid-chunk', answer: (s) => s.end(`${sseHead}40\r\ndata: {"cho`), code: 'upstream' },
];
for (const w of streamed) {
  void test(`hostile engine, streamed: ${w.why} ends the stream with an error event ${w.code}; the next request is served`, async (t) => {
    const e = await engine(t, [w.answer]);
    const gw = await gateway(t, e.url);
    const r = await chat(gw.url, true);
    assert.equal(r.status, 200);
    const last = r.text.trimEnd().split('\n\n').at(-1) ?? '';
    const event = JSON.parse(last.replace(/^data: /, '')) as { error: { code: string } };
    assert.equal(event.error.code, w.code);
    await waitFor(() => e.sockets[0]?.destroyed === true || e.sockets[0]?.readableEnded === true, { what: 'the engine socket closed' });
    assert.equal((await chat(gw.url)).status, 200);
  });
}
