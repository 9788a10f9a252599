// The hot-path upstream client against real sockets: node:http servers for ordinary answers, raw
// TCP servers writing exact bytes for framing, reuse and failure. Each reuse rule is one row; a
// socket reused or not is counted by the server's connections, never inferred from timing.
import { strict as assert } from 'node:assert';
import { createHash } from 'node:crypto';
import { getEventListeners, once } from 'node:events';
import { createServer as createHttpServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import { createServer as createNetServer, type Server as NetServer, type Socket } from 'node:net';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { UpstreamPool, type UpstreamAnswer, type UpstreamPoolOptions, type UpstreamRequest } from '../../src/upstream/client.js';
import { waitFor } from '../support/wait.js';

const bound = (): AbortSignal => AbortSignal.timeout(10_000);

function listen(server: HttpServer | NetServer): Promise<URL> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const a = server.address();
      if (a === null || typeof a === 'string') reject(new Error('no TCP address'));
      else resolve(new URL(`http://127.0.0.1:${a.port}`));
    });
  });
}

// A node:http server; `responses` holds every response it handed `handler`, in order.
async function httpServer(t: TestContext, handler: (req: IncomingMessage, res: ServerResponse) => void) {
  const responses: ServerResponse[] = [];
  const server = createHttpServer((req, res) => {
    responses.push(res);
    handler(req, res);
  });
  t.after(() => new Promise<void>((resolve) => (server.closeAllConnections(), server.close(() => resolve()))));
  let connections = 0;
  let closed = 0;
  server.on('connection', (s: Socket) => {
    connections++;
    s.once('close', () => closed++);
  });
  const url = await listen(server);
  return { url, responses, connections: () => connections, closed: () => closed };
}

// A TCP server whose every socket is handed to `onSocket`; `sockets` counts connections.
async function rawServer(t: TestContext, onSocket: (s: Socket, index: number) => void) {
  const sockets: Socket[] = [];
  const server = createNetServer((s) => {
    sockets.push(s);
    s.on('error', () => undefined); // the client destroying its socket is what several tests do
    onSocket(s, sockets.length - 1);
  });
  t.after(() => new Promise<void>((resolve) => (sockets.forEach((s) => s.destroy()), server.close(() => resolve()))));
  const url = await listen(server);
  return { url, sockets };
}

// Calls `answer` once per whole request the socket carries (head and content-length body).
function onRequests(s: Socket, answer: (request: string, index: number) => void): void {
  let buf = Buffer.alloc(0);
  let n = 0;
  s.on('data', (d: Buffer) => {
    buf = Buffer.concat([buf, d]);
    for (;;) {
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      const length = Number(/\r\ncontent-length: (\d+)/i.exec(buf.toString('latin1', 0, end))?.[1] ?? 0);
      if (buf.length < end + 4 + length) return;
      const request = buf.toString('utf8', 0, end + 4 + length);
      buf = buf.subarray(end + 4 + length);
      answer(request, n++);
    }
  });
}

function newPool(t: TestContext, o: Partial<UpstreamPoolOptions> = {}): UpstreamPool {
  const pool = new UpstreamPool({ connections: 4, ...o });
  t.after(() => pool.close());
  return pool;
}

function post(pool: UpstreamPool, url: URL, over: Partial<UpstreamRequest> = {}): Promise<UpstreamAnswer> {
  return pool.request({ origin: url, path: '/v1/completions', headers: {}, body: '{"prompt":"hi"}', signal: bound(), headersTimeoutMs: 10_000, bodyTimeoutMs: 10_000, ...over });
}

void test('a content-length answer: status, lower-case headers, the whole body; the request is what the engine expects', async (t) => {
  let seen: { method: string | undefined; url: string | undefined; headers: IncomingMessage['headers']; body: string } | undefined;
  const srv = await httpServer(t, (req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      seen = { method: req.method, url: req.url, headers: req.headers, body };
      res.writeHead(201, { 'Content-Type': 'application/json', 'X-Twice': ['a', 'b'] });
      res.end('{"ok":true}');
    });
  });
  const pool = newPool(t);
  const up = await post(pool, srv.url, { headers: { 'content-type': 'application/json', authorization: 'Bearer k' }, body: '{"prompt":"héllo"}' });
  assert.equal(up.status, 201);
  assert.equal(up.headers['content-type'], 'application/json');
  assert.equal(up.headers['x-twice'], 'a, b');
  assert.equal(await up.body.text(), '{"ok":true}');
  assert.equal(seen?.method, 'POST');
  assert.equal(seen.url, '/v1/completions');
  assert.equal(seen.headers.host, srv.url.host);
  assert.equal(seen.headers['content-length'], String(Buffer.byteLength('{"prompt":"héllo"}')));
  assert.equal(seen.headers.authorization, 'Bearer k');
  assert.equal(seen.body, '{"prompt":"héllo"}');
});

void test('a request body over 64 KiB arrives whole', async (t) => {
  const srv = await httpServer(t, (req, res) => {
    const h = createHash('sha256');
    req.on('data', (c: Buffer) => h.update(c));
    req.on('end', () => res.end(h.digest('hex')));
  });
  const pool = newPool(t);
  const body = new Uint8Array(300_000).map((_, i) => i % 251);
  const up = await post(pool, srv.url, { body });
  assert.equal(await up.body.text(), createHash('sha256').update(body).digest('hex'));
});

// How an answer ends, and whether its socket may carry the next request: two requests in a row,
// and the server counts the sockets they came on.
const framing = [
  { why: 'HTTP/1.1 with content-length keeps the socket', answer: 'HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok', body: 'ok', reused: true },
  { why: 'chunked, with extensions and trailers read past', answer: 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;name=value\r\nhello\r\n6 ; x\r\n world\r\n0\r\nx-trailer: 1\r\nx-other: 2\r\n\r\n', body: 'hello world', reused: true },
  { why: '204 has no body', answer: 'HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n', body: '', reused: true },
  { why: '304 has no body', answer: 'HTTP/1.1 304 Not Modified\r\n\r\n', body: '', reused: true },
  { why: '102 Processing and 103 Early Hints come before the answer', answer: 'HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok', body: 'ok', reused: true },
  { why: 'no length: the body runs until close, and the socket is gone', answer: 'HTTP/1.1 200 OK\r\n\r\nuntil the end', end: true, body: 'until the end', reused: false },
  { why: 'connection: close', answer: 'HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok', body: 'ok', reused: false },
  { why: 'HTTP/1.0 closes unless it says keep-alive', answer: 'HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok', body: 'ok', reused: false },
  { why: 'HTTP/1.0 with keep-alive', answer: 'HTTP/1.0 200 OK\r\nconnection: Keep-Alive\r\ncontent-length: 2\r\n\r\nok', body: 'ok', reused: true },
  { why: 'a coding before chunked is passed as it came', answer: 'HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n', body: 'hello', reused: true },
  { why: 'a coding after chunked: the body runs until close', answer: 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\nhello', end: true, body: 'hello', reused: false },
  { why: 'bytes after the end of the answer: the socket cannot be trusted', answer: 'HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokEXTRA', body: 'ok', reused: false },
];
for (const f of framing) {
  void test(`framing: ${f.why}`, async (t) => {
    const srv = await rawServer(t, (s) =>
      onRequests(s, () => {
        if (f.end === true) s.end(f.answer, 'latin1');
        else s.write(f.answer, 'latin1');
      }),
    );
    const pool = newPool(t);
    for (let i = 0; i < 2; i++) {
      const up = await post(pool, srv.url);
      assert.equal(await up.body.text(), f.body, `request ${i}`);
    }
    assert.equal(srv.sockets.length, f.reused ? 1 : 2);
  });
}

// The same answers a byte per write: every state of the parser meets a read that ends inside it.
// Not the extra-bytes row: dribbled, its stray bytes come after the socket went back to the pool,
// where they can only be caught as garbage before the next answer.
for (const f of framing.filter((r) => !r.answer.endsWith('EXTRA'))) {
  void test(`framing, one byte per write: ${f.why}`, async (t) => {
    const srv = await rawServer(t, (s) =>
      onRequests(s.setNoDelay(true), () => {
        const bytes = Buffer.from(f.answer, 'latin1');
        let at = 0;
        const next = (): void => {
          if (s.destroyed) return;
          if (at === bytes.length) {
            if (f.end === true) s.end();
            return;
          }
          s.write(bytes.subarray(at, ++at), () => setImmediate(next));
        };
        next();
      }),
    );
    const pool = newPool(t);
    for (let i = 0; i < 2; i++) {
      const up = await post(pool, srv.url);
      assert.equal(await up.body.text(), f.body, `request ${i}`);
    }
    assert.equal(srv.sockets.length, f.reused ? 1 : 2);
  });
}

// Each malformation a strict parser refuses; `where` says whether request() or the body fails.
const malformed = [
  { why: 'a four-digit status', answer: 'HTTP/1.1 2000 OK\r\ncontent-length: 0\r\n\r\n', where: 'head', message: /status line/ },
  { why: 'HTTP/2 in a status line', answer: 'HTTP/2 200\r\ncontent-length: 0\r\n\r\n', where: 'head', message: /HTTP\/1\./ },
  { why: 'not HTTP at all, and no line end: refused on the first byte', answer: 'SSH-2.0-OpenSSH_9.6', where: 'head', message: /HTTP\/1\./ },
  { why: 'a head in bare LFs, never ending in CRLFCRLF: refused at the first LF', answer: 'HTTP/1.1 200 OK\ncontent-length: 0\n\n', where: 'head', message: /bare LF/ },
  { why: 'a folded header line', answer: 'HTTP/1.1 200 OK\r\nx-a: 1\r\n  folded\r\ncontent-length: 0\r\n\r\n', where: 'head', message: /obs-fold/ },
  { why: 'space between a header name and its colon', answer: 'HTTP/1.1 200 OK\r\ncontent-length : 0\r\n\r\n', where: 'head', message: /not a token/ },
  { why: 'a header line without a colon', answer: 'HTTP/1.1 200 OK\r\nbogus\r\ncontent-length: 0\r\n\r\n', where: 'head', message: /no colon/ },
  { why: 'a bare LF inside the head', answer: 'HTTP/1.1 200 OK\r\nx-a: 1\nx-b: 2\r\ncontent-length: 0\r\n\r\n', where: 'head', message: /bare LF/ },
  { why: 'two different content-lengths', answer: 'HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello', where: 'head', message: /content-length/ },
  { why: 'content-length repeated with one value (llhttp refuses it too)', answer: 'HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\nok', where: 'head', message: /content-length/ },
  { why: 'both framings at once', answer: 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n5\r\nhello\r\n0\r\n\r\n', where: 'head', message: /both/ },
  { why: '204 with a content-length: its body would be read as the next answer', answer: 'HTTP/1.1 204 No Content\r\ncontent-length: 10\r\n\r\n0123456789', where: 'head', message: /204/ },
  { why: 'an unsolicited 100 Continue', answer: 'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n', where: 'head', message: /100/ },
  { why: 'a negative content-length', answer: 'HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n', where: 'head', message: /content-length/ },
  { why: '101 to a request that asked for no upgrade', answer: 'HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\r\n', where: 'head', message: /101/ },
  { why: 'a chunk size that is not hex', answer: 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n', where: 'body', message: /chunk-size line/ },
  { why: 'a chunk size shorter than its data', answer: 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n', where: 'body', message: /CRLF/ },
  { why: 'a chunk size of 13 hex digits', answer: 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1000000000000\r\nx\r\n', where: 'body', message: /hex digits/ },
  { why: 'a control character in a chunk extension', answer: 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2;a\x01\r\nok\r\n0\r\n\r\n', where: 'body', message: /chunk-size line/ },
] as const;
for (const m of malformed) {
  void test(`protocol error: ${m.why}`, async (t) => {
    // The socket stays open after the bytes: the failure must come from them, not from an EOF.
    const srv = await rawServer(t, (s) => onRequests(s, () => s.write(m.answer, 'latin1')));
    const pool = newPool(t);
    const want = { code: 'LLMGW_UPSTREAM_PROTOCOL', message: m.message };
    if (m.where === 'head') await assert.rejects(post(pool, srv.url), want);
    else await assert.rejects(async () => (await post(pool, srv.url)).body.text(), want);
    await once(srv.sockets[0] ?? assert.fail('no socket'), 'close', { signal: bound() });
  });
}

void test('protocol error: a head over maxHeaderBytes, whole or still arriving', async (t) => {
  const big = 'x'.repeat(2000);
  const answers = [`HTTP/1.1 200 OK\r\nx-big: ${big}\r\ncontent-length: 0\r\n\r\n`, `HTTP/1.1 200 OK\r\nx-big: ${big}`];
  const srv = await rawServer(t, (s, i) => onRequests(s, () => s.write(answers[i] ?? '', 'latin1')));
  const pool = newPool(t, { maxHeaderBytes: 1024 });
  for (let i = 0; i < answers.length; i++) {
    await assert.rejects(post(pool, srv.url), { code: 'LLMGW_UPSTREAM_HEAD_TOO_LARGE', message: /max_head_bytes/ }, `answer ${i}`);
  }
});

void test('an answer over maxBodyBytes: refused at its content-length, or as its chunks pass the bound; the socket goes', async (t) => {
  const chunk = 'x'.repeat(600);
  const answers = [
    `HTTP/1.1 200 OK\r\ncontent-length: 2000\r\n\r\n`,
    `HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n${`258\r\n${chunk}\r\n`.repeat(2)}`,
    `HTTP/1.1 200 OK\r\n\r\n${chunk.repeat(2)}`,
  ];
  // The chunked answer never ends: the bound must fail it, not the engine finishing.
  const srv = await rawServer(t, (s, i) => onRequests(s, () => s.write(answers[i] ?? '', 'latin1')));
  const pool = newPool(t, { maxBodyBytes: 1000 });
  const want = { code: 'LLMGW_UPSTREAM_ANSWER_TOO_LARGE', message: /max_answer_bytes/ };
  await assert.rejects(post(pool, srv.url), want);
  for (const read of ['text', 'iterate'] as const) {
    const up = await post(pool, srv.url);
    await assert.rejects(async () => {
      if (read === 'text') await up.body.text();
      else for await (const _ of up.body) void _;
    }, want);
  }
  await waitFor(() => srv.sockets.every((s) => s.destroyed || s.readableEnded), { what: 'every refused socket closed' });
});

void test('keep-alive: sequential requests share one socket', async (t) => {
  const srv = await httpServer(t, (_req, res) => res.end('ok'));
  const pool = newPool(t);
  for (let i = 0; i < 3; i++) assert.equal(await (await post(pool, srv.url)).body.text(), 'ok');
  assert.equal(srv.connections(), 1);
});

void test('keep-alive: an idle socket is closed by the pool after keepAliveTimeoutMs', async (t) => {
  const srv = await httpServer(t, (_req, res) => res.end('ok'));
  const pool = newPool(t, { keepAliveTimeoutMs: 50 });
  assert.equal(await (await post(pool, srv.url)).body.text(), 'ok');
  await waitFor(() => srv.closed() === 1, { what: 'the idle socket to be closed by the pool' });
});

void test('connections: 2 sends the third request once a socket is free, and all complete', async (t) => {
  const srv = await httpServer(t, (req) => req.resume());
  const pool = newPool(t, { connections: 2 });
  const answers = [0, 1, 2].map(() => post(pool, srv.url));
  await waitFor(() => srv.responses.length === 2, { what: 'two requests at the server' });
  srv.responses[0]?.end('a');
  await waitFor(() => srv.responses.length === 3, { what: 'the queued request at the server' });
  srv.responses[1]?.end('b');
  srv.responses[2]?.end('c');
  const bodies = await Promise.all(answers.map(async (p) => (await p).body.text()));
  assert.deepEqual(bodies, ['a', 'b', 'c']);
  assert.equal(srv.connections(), 2);
});

void test('a queued request whose signal aborts leaves the queue and never reaches the engine', async (t) => {
  const paths: string[] = [];
  const srv = await httpServer(t, (req) => {
    req.resume();
    paths.push(req.url ?? '');
  });
  const pool = newPool(t, { connections: 1 });
  const first = post(pool, srv.url, { path: '/first' });
  await waitFor(() => srv.responses.length === 1, { what: 'the first request at the server' });
  const ac = new AbortController();
  const queued = post(pool, srv.url, { path: '/queued', signal: ac.signal });
  const reason = new Error('the client left');
  ac.abort(reason);
  await assert.rejects(queued, (e) => e === reason);
  srv.responses[0]?.end('one');
  assert.equal(await (await first).body.text(), 'one');
  const third = post(pool, srv.url, { path: '/third' });
  await waitFor(() => srv.responses.length === 2, { what: 'the third request at the server' });
  srv.responses[1]?.end('three');
  assert.equal(await (await third).body.text(), 'three');
  assert.deepEqual(paths, ['/first', '/third']);
  assert.equal(srv.connections(), 1);
});

void test('aborting while waiting for headers rejects with the reason and destroys the socket', async (t) => {
  let got: () => void = () => undefined;
  const arrived = new Promise<void>((resolve) => (got = resolve));
  const srv = await rawServer(t, (s, i) =>
    onRequests(s, () => {
      if (i === 0) got(); // the first socket never answers
      else s.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok');
    }),
  );
  const pool = newPool(t);
  const ac = new AbortController();
  const p = post(pool, srv.url, { signal: ac.signal });
  await arrived;
  const reason = new Error('stop');
  ac.abort(reason);
  await assert.rejects(p, (e) => e === reason);
  await once(srv.sockets[0] ?? assert.fail('no socket'), 'close', { signal: bound() });
  assert.equal(await (await post(pool, srv.url)).body.text(), 'ok');
  assert.equal(srv.sockets.length, 2);
});

void test('aborting mid-body ends the iteration with the reason and destroys the socket', async (t) => {
  const srv = await httpServer(t, (req, res) => {
    req.resume();
    if (srv.responses.length === 1) res.write('first');
    else res.end('second');
  });
  const pool = newPool(t);
  const ac = new AbortController();
  const up = await post(pool, srv.url, { signal: ac.signal });
  up.body.setEncoding('utf8');
  const it = up.body[Symbol.asyncIterator]();
  assert.deepEqual(await it.next(), { value: 'first', done: false });
  const reason = new Error('client gone');
  ac.abort(reason);
  await assert.rejects(it.next(), (e) => e === reason);
  await once(srv.responses[0] ?? assert.fail('no response'), 'close', { signal: bound() });
  assert.equal(await (await post(pool, srv.url)).body.text(), 'second');
  assert.equal(srv.connections(), 2);
});

void test('leaving a for-await early closes the socket, so the engine stops generating', async (t) => {
  const srv = await httpServer(t, (req, res) => {
    req.resume();
    res.write('data: 1\n\n');
  });
  const pool = newPool(t);
  const up = await post(pool, srv.url);
  for await (const c of up.body) {
    assert.equal(c.toString(), 'data: 1\n\n');
    break;
  }
  await once(srv.responses[0] ?? assert.fail('no response'), 'close', { signal: bound() });
});

void test('timeouts: no head in time is UND_ERR_HEADERS_TIMEOUT, a silent body UND_ERR_BODY_TIMEOUT', async (t) => {
  const srv = await rawServer(t, (s, i) =>
    onRequests(s, () => {
      if (i === 1) s.write('HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf'); // and then nothing
    }),
  );
  const pool = newPool(t);
  await assert.rejects(post(pool, srv.url, { headersTimeoutMs: 50 }), { code: 'UND_ERR_HEADERS_TIMEOUT' });
  await once(srv.sockets[0] ?? assert.fail('no socket'), 'close', { signal: bound() });
  const up = await post(pool, srv.url, { bodyTimeoutMs: 50 });
  await assert.rejects(up.body.text(), { code: 'UND_ERR_BODY_TIMEOUT' });
  await once(srv.sockets[1] ?? assert.fail('no socket'), 'close', { signal: bound() });
});

void test('an engine closing an idle kept-alive socket: the pool drops it and the next request gets a new one', async (t) => {
  const srv = await rawServer(t, (s) => onRequests(s, () => s.end('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok')));
  const pool = newPool(t);
  assert.equal(await (await post(pool, srv.url)).body.text(), 'ok');
  await once(srv.sockets[0] ?? assert.fail('no socket'), 'close', { signal: bound() });
  try {
    assert.equal(await (await post(pool, srv.url)).body.text(), 'ok');
    assert.equal(srv.sockets.length, 2);
  } catch (e) {
    // Had the pool written to the closed socket, the failure must say the engine never answered.
    assert.equal(typeof e === 'object' && e !== null && 'code' in e ? e.code : undefined, 'ECONNRESET');
  }
});

// The kept-alive race: the engine closes a socket the pool just wrote to. It never answered, so
// the failure carries the code proxy.ts retries on another replica.
const stale = [
  { why: 'EOF', close: (s: Socket) => s.end() },
  { why: 'a reset', close: (s: Socket) => s.resetAndDestroy() },
];
for (const r of stale) {
  void test(`a reused socket that gets ${r.why} before any byte of an answer fails with ECONNRESET (safe to retry)`, async (t) => {
    const srv = await rawServer(t, (s) =>
      onRequests(s, (_, i) => {
        if (i === 0) s.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok');
        else r.close(s); // read the second request, then close without a word
      }),
    );
    const pool = newPool(t);
    assert.equal(await (await post(pool, srv.url)).body.text(), 'ok');
    await assert.rejects(post(pool, srv.url), { code: 'ECONNRESET' });
    assert.equal(srv.sockets.length, 1);
  });
}

void test('nobody listening is ECONNREFUSED; an https origin is refused before any socket', async (t) => {
  const probe = createNetServer();
  const url = await listen(probe);
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  const pool = newPool(t);
  await assert.rejects(post(pool, url), { code: 'ECONNREFUSED' });
  await assert.rejects(post(pool, new URL('https://127.0.0.1:1')), { code: 'ERR_INVALID_URL_SCHEME' });
  await assert.rejects(post(pool, url, { headers: { 'content-length': '1' } }), { code: 'ERR_INVALID_ARG_VALUE' });
  await assert.rejects(post(pool, url, { headers: { 'x-a': 'b\r\nx-injected: 1' } }), { code: 'ERR_INVALID_ARG_VALUE' });
});

void test('a utf8 character split across two reads decodes whole', async (t) => {
  let release: () => void = () => undefined;
  const rest = new Promise<void>((resolve) => (release = resolve));
  const euro = Buffer.from('€'); // e2 82 ac
  const srv = await rawServer(t, (s) =>
    onRequests(s, () => {
      s.write(Buffer.concat([Buffer.from('HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\na'), euro.subarray(0, 2)]));
      void rest.then(() => s.write(Buffer.concat([euro.subarray(2), Buffer.from('b')])));
    }),
  );
  const pool = newPool(t);
  const up = await post(pool, srv.url);
  up.body.setEncoding('utf8');
  const chunks: string[] = [];
  for await (const c of up.body) {
    assert.equal(typeof c, 'string');
    chunks.push(String(c));
    release();
  }
  assert.equal(chunks[0], 'a');
  assert.equal(chunks.join(''), 'a€b');
});

void test('backpressure: a 5 MB body read slowly arrives whole and in order', async (t) => {
  const total = 5 * 1024 * 1024;
  const whole = Buffer.alloc(total);
  for (let i = 0; i < total; i++) whole[i] = (i * 7 + (i >> 12)) & 0xff;
  const srv = await httpServer(t, (req, res) => {
    req.resume();
    res.writeHead(200, { 'content-length': String(total) });
    let at = 0;
    const more = (): void => {
      while (at < total) {
        const piece = whole.subarray(at, at + 256 * 1024);
        at += piece.length;
        if (!res.write(piece)) {
          res.once('drain', more);
          return;
        }
      }
      res.end();
    };
    more();
  });
  const pool = newPool(t);
  const up = await post(pool, srv.url);
  const h = createHash('sha256');
  let n = 0;
  let reads = 0;
  for await (const c of up.body) {
    assert.ok(Buffer.isBuffer(c));
    h.update(c);
    n += c.length;
    // A consumer slower than the engine: the pool must stop reading rather than queue 5 MB.
    if (++reads % 8 === 0) await sleep(1);
  }
  assert.equal(n, total);
  assert.equal(h.digest('hex'), createHash('sha256').update(whole).digest('hex'));
});

void test('streaming: each event reaches the iterator before the engine writes the next', async (t) => {
  let seen: () => void = () => undefined;
  const firstSeen = new Promise<void>((resolve) => (seen = resolve));
  const srv = await httpServer(t, (req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write('data: {"n":1}\n\n');
    void firstSeen.then(() => res.end('data: [DONE]\n\n'));
  });
  const pool = newPool(t);
  const up = await post(pool, srv.url);
  assert.equal(up.headers['transfer-encoding'], 'chunked');
  up.body.setEncoding('utf8');
  const events: string[] = [];
  for await (const c of up.body) {
    events.push(String(c));
    if (events.length === 1) seen();
  }
  assert.deepEqual(events, ['data: {"n":1}\n\n', 'data: [DONE]\n\n']);
});

void test('dump: a short rest keeps the socket, a long one closes it', async (t) => {
  const srv = await httpServer(t, (req, res) => {
    req.resume();
    if (req.url === '/short') res.end('x'.repeat(10_000));
    else if (req.url === '/long') res.write('y'.repeat(1024 * 1024)); // and never ends
    else res.end('ok');
  });
  const pool = newPool(t);
  await (await post(pool, srv.url, { path: '/short' })).body.dump();
  assert.equal(await (await post(pool, srv.url)).body.text(), 'ok');
  assert.equal(srv.connections(), 1);
  await (await post(pool, srv.url, { path: '/long' })).body.dump();
  await once(srv.responses[2] ?? assert.fail('no response'), 'close', { signal: bound() });
  assert.equal(await (await post(pool, srv.url)).body.text(), 'ok');
  assert.equal(srv.connections(), 2);
});

void test('close(): the same promise twice; queued requests are rejected, the one in flight finishes', async (t) => {
  const srv = await httpServer(t, (req) => req.resume());
  const pool = newPool(t, { connections: 1 });
  const inFlight = post(pool, srv.url);
  await waitFor(() => srv.responses.length === 1, { what: 'the first request at the server' });
  const queued = post(pool, srv.url);
  const closing = pool.close();
  assert.equal(pool.close(), closing);
  await assert.rejects(queued, { code: 'UND_ERR_CLOSED' });
  await assert.rejects(post(pool, srv.url), { code: 'UND_ERR_CLOSED' });
  srv.responses[0]?.end('done');
  assert.equal(await (await inFlight).body.text(), 'done');
  await closing;
  assert.equal(srv.responses.length, 1);
});

void test('close(): an answer still running after drainTimeoutMs is destroyed', async (t) => {
  const srv = await httpServer(t, (req, res) => {
    req.resume();
    res.write('part');
  });
  const pool = newPool(t, { drainTimeoutMs: 50 });
  const up = await post(pool, srv.url);
  const text = up.body.text();
  await pool.close();
  await assert.rejects(text, { code: 'UND_ERR_DESTROYED' });
  await once(srv.responses[0] ?? assert.fail('no response'), 'close', { signal: bound() });
});

void test('no abort listener outlives its request: answered, unread, timed out, queued, refused', async (t) => {
  const held: ServerResponse[] = [];
  const srv = await httpServer(t, (req, res) => {
    req.resume();
    if (req.url === '/hold') held.push(res);
    else if (req.url === '/silent') return;
    else res.end('ok');
  });
  const pool = newPool(t, { connections: 1 });
  const listeners = (s: AbortSignal): number => getEventListeners(s, 'abort').length;
  const read = new AbortController();
  assert.equal(await (await post(pool, srv.url, { signal: read.signal })).body.text(), 'ok');
  const unread = new AbortController();
  await post(pool, srv.url, { signal: unread.signal }); // the short body ended on the wire; nobody read it
  const silent = new AbortController();
  await assert.rejects(post(pool, srv.url, { path: '/silent', signal: silent.signal, headersTimeoutMs: 50 }), { code: 'UND_ERR_HEADERS_TIMEOUT' });
  const holding = post(pool, srv.url, { path: '/hold' });
  await waitFor(() => held.length === 1, { what: 'the held request at the server' });
  const queued = new AbortController();
  const waiting = post(pool, srv.url, { signal: queued.signal });
  assert.equal(listeners(queued.signal), 1);
  held[0]?.end('held');
  assert.equal(await (await holding).body.text(), 'held');
  assert.equal(await (await waiting).body.text(), 'ok');
  for (const c of [read, unread, silent, queued]) assert.equal(listeners(c.signal), 0);
});
