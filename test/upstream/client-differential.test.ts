// The hot-path client against undici on the same hostile answers: for each, whether the answer is
// valid (status and the whole body read without an error), what body it carried, and whether the
// socket carried the next request. undici is the reference: llhttp is the parser Node's own HTTP
// client trusts, and an answer it refuses must not reach a client through us. The cases are RFC
// 9112's framing rules (section 6), 1xx answers, 204 and 304 with bodies, malformed heads and
// chunks, and a good answer cut short after every one of its bytes.
import { strict as assert } from 'node:assert';
import { createServer, type Socket } from 'node:net';
import { test, type TestContext } from 'node:test';
import { Client } from 'undici';
import { UpstreamPool } from '../../src/upstream/client.js';

interface Verdict {
  readonly valid: boolean;
  readonly body: string | undefined;
  readonly reused: boolean;
}

interface Case {
  readonly why: string;
  readonly answer: string;
  // The server closes its side after writing the answer (a body that runs until close needs it).
  readonly end?: boolean;
}

// The next request's answer, when a socket carries one.
const good = 'HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok';

// A server that writes `c.answer` for the first request of the first connection and `good` for
// every other request; it reports which connection the second request came on.
async function hostile(t: TestContext, c: Case): Promise<{ url: URL; secondOnFirst: () => boolean }> {
  const sockets: Socket[] = [];
  let secondOnFirst = false;
  let answered = 0;
  const server = createServer((s) => {
    const index = sockets.push(s) - 1;
    s.on('error', () => undefined); // a client refusing the answer destroys its socket
    let buf = Buffer.alloc(0);
    s.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      for (;;) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const length = Number(/\r\ncontent-length: (\d+)/i.exec(buf.toString('latin1', 0, end))?.[1] ?? 0);
        if (buf.length < end + 4 + length) return;
        buf = buf.subarray(end + 4 + length);
        const n = answered++;
        if (n === 1 && index === 0) secondOnFirst = true;
        if (n > 0) s.write(good);
        else if (c.end === true) s.end(c.answer, 'latin1');
        else s.write(c.answer, 'latin1');
      }
    });
  });
  t.after(() => new Promise<void>((resolve) => (sockets.forEach((s) => s.destroy()), server.close(() => resolve()))));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const a = server.address();
  if (a === null || typeof a === 'string') throw new Error('no TCP address');
  return { url: new URL(`http://127.0.0.1:${a.port}`), secondOnFirst: () => secondOnFirst };
}

// Both clients wait without a clock of their own (no headers or body timeout): a client that
// waits for bytes that will never come shows as the case's bound passing, a verdict of invalid
// reached by stalling, which is itself a disagreement with a client that refused at once.
const caseBoundMs = 5000;

type Send = (signal: AbortSignal) => Promise<{ status: number; text: () => Promise<string> }>;

async function verdictOf(send: Send, secondOnFirst: () => boolean): Promise<Verdict & { stalled: boolean }> {
  const signal = AbortSignal.timeout(caseBoundMs);
  let valid = true;
  let body: string | undefined;
  try {
    const r = await send(signal);
    body = `${r.status} ${await r.text()}`;
  } catch {
    valid = false;
  }
  const stalled = signal.aborted;
  // The next request shows whether the socket was kept: it either comes on the first connection or not.
  const next = await send(AbortSignal.timeout(caseBoundMs));
  await next.text();
  return { valid, body: valid ? body : undefined, reused: secondOnFirst(), stalled };
}

async function poolVerdict(t: TestContext, c: Case): Promise<Verdict & { stalled: boolean }> {
  const srv = await hostile(t, c);
  const pool = new UpstreamPool({ connections: 1 });
  t.after(() => pool.close());
  const send: Send = async (signal) => {
    const a = await pool.request({ origin: srv.url, path: '/', headers: {}, body: '{}', signal, headersTimeoutMs: 0, bodyTimeoutMs: 0 });
    return { status: a.status, text: () => a.body.text() };
  };
  return verdictOf(send, srv.secondOnFirst);
}

async function undiciVerdict(t: TestContext, c: Case): Promise<Verdict & { stalled: boolean }> {
  const srv = await hostile(t, c);
  const client = new Client(srv.url, { pipelining: 1, headersTimeout: 0, bodyTimeout: 0 });
  t.after(() => client.destroy());
  const send: Send = async (signal) => {
    const r = await client.request({ path: '/', method: 'POST', body: '{}', headers: { 'content-type': 'application/json' }, signal });
    return { status: r.statusCode, text: () => r.body.text() };
  };
  return verdictOf(send, srv.secondOnFirst);
}

const cl = (body: string, head = ''): string => `HTTP/1.1 200 OK\r\n${head}content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
const chunked = 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n';

const cases: Case[] = [
  // 6.3 (1): 1xx, 204 and 304 end at the head.
  { why: '103 Early Hints before the answer', answer: `HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n${cl('ok')}` },
  { why: 'an unsolicited 100 Continue', answer: `HTTP/1.1 100 Continue\r\n\r\n${cl('ok')}` },
  { why: '101 to a request that asked for no upgrade', answer: 'HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n' },
  { why: '204 with no length', answer: 'HTTP/1.1 204 No Content\r\n\r\n' },
  { why: '204 with content-length 0', answer: 'HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n' },
  { why: '204 with a content-length and a body', answer: 'HTTP/1.1 204 No Content\r\ncontent-length: 5\r\n\r\nhello' },
  { why: '204 with a content-length and no body', answer: 'HTTP/1.1 204 No Content\r\ncontent-length: 5\r\n\r\n' },
  { why: '204 chunked', answer: 'HTTP/1.1 204 No Content\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n' },
  { why: '304 with no length', answer: 'HTTP/1.1 304 Not Modified\r\n\r\n' },
  { why: '304 with a content-length and a body', answer: 'HTTP/1.1 304 Not Modified\r\ncontent-length: 5\r\n\r\nhello' },
  // 6.3 (3): both framings; chunked wins and the connection must close.
  { why: 'transfer-encoding and content-length', answer: 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n5\r\nhello\r\n0\r\n\r\n' },
  { why: 'content-length before transfer-encoding', answer: 'HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n' },
  // 6.3 (4): chunked, and codings that are not chunked last (the body runs to the close).
  { why: 'chunked', answer: chunked },
  { why: 'chunked in capitals', answer: chunked.replace('chunked', 'CHUNKED') },
  { why: 'chunked with extensions and trailers', answer: 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;name=value\r\nhello\r\n6;x\r\n world\r\n0\r\nx-trailer: 1\r\n\r\n' },
  { why: 'chunked, hex in capitals', answer: 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n' },
  { why: 'chunked named twice', answer: 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n' },
  { why: 'gzip, chunked', answer: 'HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n' },
  { why: 'a coding other than chunked, to the close', answer: 'HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\nhello', end: true },
  { why: 'chunked, gzip (chunked not last), to the close', answer: 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\nhello', end: true },
  { why: 'a chunk size that is not hex', answer: 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n' },
  { why: 'a chunk shorter than its size says', answer: 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n' },
  { why: 'a chunk size with a leading space', answer: 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n 5\r\nhello\r\n0\r\n\r\n' },
  { why: 'a chunk size too large for any number', answer: 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nfffffffffffffffffff\r\nhello\r\n0\r\n\r\n' },
  { why: 'a chunk ending in a bare LF', answer: 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\n0\r\n\r\n' },
  { why: 'the last chunk and the close, without the final CRLF', answer: 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n', end: true },
  // 6.3 (5): content-length.
  { why: 'content-length', answer: cl('ok') },
  { why: 'content-length 0', answer: cl('') },
  { why: 'content-length twice with one value', answer: 'HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\nok' },
  { why: 'content-length as a list of one value', answer: 'HTTP/1.1 200 OK\r\ncontent-length: 2, 2\r\n\r\nok' },
  { why: 'two different content-lengths', answer: 'HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok' },
  { why: 'a negative content-length', answer: 'HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n' },
  { why: 'a content-length with a sign', answer: 'HTTP/1.1 200 OK\r\ncontent-length: +2\r\n\r\nok' },
  { why: 'a content-length too large for any number', answer: 'HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999999\r\n\r\nok' },
  { why: 'content-length longer than the body, then the close', answer: 'HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nok', end: true },
  { why: 'bytes after the end of the answer', answer: `${cl('ok')}EXTRA` },
  { why: 'a second whole answer nobody asked for', answer: `${cl('ok')}${cl('no')}` },
  // 6.3 (8): no length at all: the body runs until the close.
  { why: 'no length, to the close', answer: 'HTTP/1.1 200 OK\r\n\r\nuntil the end', end: true },
  // 9.3: persistence.
  { why: 'connection: close', answer: cl('ok', 'connection: close\r\n') },
  { why: 'connection: close among other tokens', answer: cl('ok', 'connection: foo, close\r\n') },
  { why: 'HTTP/1.0 without keep-alive', answer: cl('ok').replace('HTTP/1.1', 'HTTP/1.0') },
  { why: 'HTTP/1.0 with keep-alive', answer: cl('ok', 'connection: keep-alive\r\n').replace('HTTP/1.1', 'HTTP/1.0') },
  // Heads that are not HTTP/1.1.
  { why: 'not HTTP at all', answer: 'SSH-2.0-OpenSSH_9.6\r\n\r\n' },
  { why: 'garbage that never ends its head', answer: 'garbage without any line end' },
  { why: 'HTTP/2 in a status line', answer: 'HTTP/2 200\r\ncontent-length: 0\r\n\r\n' },
  { why: 'a four-digit status', answer: 'HTTP/1.1 2000 OK\r\ncontent-length: 0\r\n\r\n' },
  { why: 'a status line with no reason', answer: 'HTTP/1.1 200\r\ncontent-length: 2\r\n\r\nok' },
  { why: 'a head in bare LFs', answer: 'HTTP/1.1 200 OK\ncontent-length: 2\n\nok' },
  { why: 'a bare LF inside the head', answer: 'HTTP/1.1 200 OK\r\nx-a: 1\nx-b: 2\r\ncontent-length: 2\r\n\r\nok' },
  { why: 'a bare CR inside the head', answer: 'HTTP/1.1 200 OK\r\nx-a: 1\rx-b: 2\r\ncontent-length: 2\r\n\r\nok' },
  { why: 'a folded header line', answer: 'HTTP/1.1 200 OK\r\nx-a: 1\r\n  folded\r\ncontent-length: 2\r\n\r\nok' },
  { why: 'space between a header name and its colon', answer: 'HTTP/1.1 200 OK\r\ncontent-length : 2\r\n\r\nok' },
  { why: 'a header line without a colon', answer: 'HTTP/1.1 200 OK\r\nbogus\r\ncontent-length: 2\r\n\r\nok' },
  { why: 'a NUL in a header value', answer: 'HTTP/1.1 200 OK\r\nx-a: a\0b\r\ncontent-length: 2\r\n\r\nok' },
  { why: 'obs-text in a header value', answer: 'HTTP/1.1 200 OK\r\nx-a: caf\xe9\r\ncontent-length: 2\r\n\r\nok' },
];

// A good answer of each framing, cut after each of its bytes by the server closing.
const whole = [
  { why: 'content-length', answer: cl('hello') },
  { why: 'chunked', answer: chunked },
  { why: 'to the close', answer: 'HTTP/1.1 200 OK\r\n\r\nhello' },
];
for (const w of whole) {
  for (let n = 0; n < w.answer.length; n++) cases.push({ why: `${w.why}, closed after ${n} bytes`, answer: w.answer.slice(0, n), end: true });
}

for (const c of cases) {
  void test(`differential: ${c.why}`, async (t) => {
    const [ours, theirs] = await Promise.all([poolVerdict(t, c), undiciVerdict(t, c)]);
    assert.deepEqual(ours, theirs);
  });
}
