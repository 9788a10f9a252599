// A lean HTTP/1.1 client for the gateway's hot path: one POST per generation request to our own
// engines over plain http://, on kept-alive sockets. undici's per-request machinery was the largest
// single cost of that path (a node:http server with undici's request() spent 0.135-0.17 ms CPU per
// request under wrk, with a raw-socket client 0.069-0.080 ms), so this does only what that path
// needs; undici keeps every other request (probes, /load, adapters).
//
// What it does not do, on purpose: TLS, methods other than POST, pipelining, request bodies in
// chunks, Expect/Upgrade, content codings. Responses are parsed strictly: an engine that sends
// something we would have to guess about fails the request with LLMGW_UPSTREAM_PROTOCOL rather
// than handing a client half of someone else's answer.
import { connect, type Socket } from 'node:net';
import { StringDecoder } from 'node:string_decoder';

/** How an UpstreamPool behaves; every field is per pool. */
export interface UpstreamPoolOptions {
  /** Most sockets open at once to one origin (host:port); requests beyond wait in FIFO order. */
  readonly connections: number;
  /** Idle sockets close after this long; default 4000, under uvicorn's 5 s keep-alive. */
  readonly keepAliveTimeoutMs?: number;
  /** Largest response head (status line, headers; and trailers) accepted; default 64 KiB. */
  readonly maxHeaderBytes?: number;
  /** Largest answer body accepted, streamed or not; default 64 MiB. */
  readonly maxBodyBytes?: number;
  /** How long close() lets in-flight requests finish before destroying them; default 10000. */
  readonly drainTimeoutMs?: number;
}

/** One POST to an engine. */
export interface UpstreamRequest {
  /** Where to connect; only http: (the engines are ours and plain HTTP). */
  readonly origin: URL;
  /** The request target, starting with "/" and percent-encoded. */
  readonly path: string;
  /** Extra headers; host, content-length and connection are the pool's to write. */
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string | Uint8Array;
  readonly signal: AbortSignal;
  /** From the moment the request is handed a socket until the response head is complete; 0 disables. */
  readonly headersTimeoutMs: number;
  /** Most time between two body bytes the engine may take; 0 disables. */
  readonly bodyTimeoutMs: number;
}

/** The engine answered: status and headers arrived, the body is still to read. */
export interface UpstreamAnswer {
  readonly status: number;
  /** Lower-case names; a header sent more than once has its values joined with ", ". */
  readonly headers: Record<string, string>;
  readonly body: AnswerBody;
}

/**
 * An answer's body, read exactly one way: iterated (Buffers, or strings after setEncoding('utf8')),
 * text() once, or dump(). Breaking out of the iteration before the end closes the engine's socket,
 * which is how an engine learns that nobody wants the rest of its generation.
 */
export interface AnswerBody extends AsyncIterable<string | Buffer> {
  /** The whole body as utf8; rejects with the error that ended it early. */
  text(): Promise<string>;
  /** Discards the rest; the socket is kept when the rest is short and comes soon, else closed. Never rejects. */
  dump(): Promise<void>;
  /** Chunks are strings from here on, decoded across chunk boundaries. */
  setEncoding(encoding: 'utf8'): this;
}

/** A failure of the upstream client, with the `code` proxy.ts's retry logic branches on. */
export class UpstreamClientError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: ErrorOptions) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

/** The code of an answer that is not well-formed HTTP/1.1; the message names what was wrong. */
export const upstreamProtocolCode = 'LLMGW_UPSTREAM_PROTOCOL';
/** The code of a response head (or trailers) over maxHeaderBytes. */
export const upstreamHeadTooLargeCode = 'LLMGW_UPSTREAM_HEAD_TOO_LARGE';
/** The code of an answer body over maxBodyBytes. */
export const upstreamAnswerTooLargeCode = 'LLMGW_UPSTREAM_ANSWER_TOO_LARGE';

const protocolError = (what: string): UpstreamClientError => new UpstreamClientError(upstreamProtocolCode, `engine answer is not valid HTTP/1.1: ${what}`);
const headTooLarge = (what: string, max: number): UpstreamClientError =>
  new UpstreamClientError(upstreamHeadTooLargeCode, `the engine's ${what} is over ${max} bytes (gateway.upstream.max_head_bytes)`);

const CRLF = Buffer.from('\r\n');
// What every answer starts with, checked as its bytes arrive: garbage fails on its first byte
// rather than waiting out the headers timeout for a blank line that never comes.
const STATUS_PREFIX = Buffer.from('HTTP/1.');
// Under this a request goes out as one buffer in one write: head and body in one TCP segment is
// what makes a short request cheap for both sides. Above it, copying the body costs more than the
// second write.
const ONE_WRITE_MAX_BYTES = 64 * 1024;
// Body bytes queued for a consumer that is not reading: past HIGH the socket is paused (the
// engine's writes then block in TCP), under LOW it reads again.
const QUEUE_HIGH_BYTES = 64 * 1024;
const QUEUE_LOW_BYTES = 16 * 1024;
// A chunk-size line with extensions; nothing legitimate comes near it.
const CHUNK_LINE_MAX_BYTES = 4096;
// More hex digits than this is not a chunk any engine sends (12 digits is 256 TiB) and could lose
// precision in a double.
const CHUNK_SIZE_MAX_DIGITS = 12;
// dump() keeps the socket only when the rest of the body is this short and this quick: reading a
// long generation to the end to save one connect would keep the engine generating for nobody.
const DUMP_MAX_BYTES = 128 * 1024;
const DUMP_MAX_MS = 1000;

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
// Field values: HTAB, SP, visible ASCII and obs-text. A CR or LF here would be a second header
// (request smuggling on our side, a bare-LF line ending on theirs).
const BAD_VALUE = /[^\t\x20-\x7e\x80-\xff]/;
const STATUS_LINE = /^HTTP\/1\.([01]) ([1-5]\d\d)(?:$| )/;
const PATH = /^\/[\x21-\x7e]*$/;
// The pool writes these itself; a caller's copy would contradict the framing it chose.
const reservedHeaders = new Set(['host', 'content-length', 'transfer-encoding', 'connection', 'keep-alive', 'upgrade', 'expect', 'te', 'trailer']);

type Phase = 'queued' | 'head' | 'body' | 'ended' | 'failed';
type ReadMode = 'none' | 'iterate' | 'text' | 'dump';
type ReadState = 'idle' | 'head' | 'length' | 'chunk-size' | 'chunk-data' | 'chunk-end' | 'trailers' | 'until-close';

interface PoolShared {
  readonly connections: number;
  readonly keepAliveTimeoutMs: number;
  readonly maxHeaderBytes: number;
  readonly maxBodyBytes: number;
  readonly origins: Map<string, Origin>;
  readonly conns: Set<Conn>;
  closed: boolean;
  drained: (() => void) | undefined;
}

/** A pool of kept-alive HTTP/1.1 sockets per engine origin, for POSTs on the gateway's hot path. */
export class UpstreamPool {
  readonly #shared: PoolShared;
  readonly #drainTimeoutMs: number;
  #closing: Promise<void> | undefined;

  constructor(o: UpstreamPoolOptions) {
    const whole = (name: string, v: number, min: number): number => {
      if (!Number.isSafeInteger(v) || v < min) throw new RangeError(`UpstreamPool: ${name} is ${v}; want an integer >= ${min}`);
      return v;
    };
    this.#shared = {
      connections: whole('connections', o.connections, 1),
      keepAliveTimeoutMs: whole('keepAliveTimeoutMs', o.keepAliveTimeoutMs ?? 4000, 1),
      maxHeaderBytes: whole('maxHeaderBytes', o.maxHeaderBytes ?? 64 * 1024, 64),
      maxBodyBytes: whole('maxBodyBytes', o.maxBodyBytes ?? 64 * 1024 * 1024, 1),
      origins: new Map(),
      conns: new Set(),
      closed: false,
      drained: undefined,
    };
    this.#drainTimeoutMs = whole('drainTimeoutMs', o.drainTimeoutMs ?? 10_000, 0);
  }

  /** Sends one POST and resolves once the engine's status line and headers arrived. */
  request(r: UpstreamRequest): Promise<UpstreamAnswer> {
    const shared = this.#shared;
    if (shared.closed) return Promise.reject(closedError());
    if (r.signal.aborted) return Promise.reject(r.signal.reason);
    const url = r.origin;
    if (url.protocol !== 'http:') {
      return Promise.reject(new UpstreamClientError('ERR_INVALID_URL_SCHEME', `upstream ${url.href}: the hot-path client speaks plain http: only, not ${url.protocol}`));
    }
    let head: string;
    try {
      head = requestHead(r, url.host);
    } catch (e) {
      return Promise.reject(e);
    }
    let origin = shared.origins.get(url.host);
    if (origin === undefined) {
      // connect() throws on port 0 instead of failing the request.
      if (url.port === '0') return Promise.reject(new UpstreamClientError('ERR_SOCKET_BAD_PORT', `upstream ${url.href}: port 0 cannot be connected to`));
      origin = new Origin(shared, url);
      shared.origins.set(url.host, origin);
    }
    const o = origin;
    return new Promise<UpstreamAnswer>((resolve, reject) => {
      const ex = new Exchange(o, r, head, resolve, reject);
      r.signal.addEventListener('abort', ex, { once: true });
      o.dispatch(ex);
    });
  }

  /**
   * Closes idle sockets now, rejects queued requests, lets requests in flight finish for up to
   * drainTimeoutMs and then destroys them. A second call returns the same promise.
   */
  close(): Promise<void> {
    return (this.#closing ??= this.#shutdown());
  }

  async #shutdown(): Promise<void> {
    const shared = this.#shared;
    shared.closed = true;
    const err = closedError();
    for (const o of [...shared.origins.values()]) {
      for (const ex of o.queue.splice(0)) ex.fail(err);
      for (const c of o.idle.splice(0)) c.destroy(undefined);
    }
    if (shared.conns.size === 0) return;
    let timer: NodeJS.Timeout | undefined;
    await new Promise<void>((resolve) => {
      shared.drained = resolve;
      timer = setTimeout(() => {
        const gone = new UpstreamClientError('UND_ERR_DESTROYED', `the upstream pool closed and the engine was still answering after ${this.#drainTimeoutMs} ms`);
        for (const c of [...shared.conns]) c.destroy(gone);
      }, this.#drainTimeoutMs);
    });
    clearTimeout(timer);
    shared.drained = undefined;
  }
}

function closedError(): UpstreamClientError {
  return new UpstreamClientError('UND_ERR_CLOSED', 'the upstream pool is closed (the gateway is shutting down)');
}

function requestHead(r: UpstreamRequest, hostHeader: string): string {
  if (!PATH.test(r.path)) throw new UpstreamClientError('ERR_INVALID_ARG_VALUE', `upstream path ${JSON.stringify(r.path)} must start with "/" and be percent-encoded (no spaces or control characters)`);
  const length = typeof r.body === 'string' ? Buffer.byteLength(r.body) : r.body.byteLength;
  let head = `POST ${r.path} HTTP/1.1\r\nhost: ${hostHeader}\r\nconnection: keep-alive\r\ncontent-length: ${length}\r\n`;
  for (const name of Object.keys(r.headers)) {
    const value = r.headers[name] ?? '';
    if (!TOKEN.test(name) || reservedHeaders.has(name.toLowerCase())) {
      throw new UpstreamClientError('ERR_INVALID_ARG_VALUE', `upstream header name ${JSON.stringify(name)} is not a token or is one the pool writes itself`);
    }
    if (BAD_VALUE.test(value)) throw new UpstreamClientError('ERR_INVALID_ARG_VALUE', `upstream header ${name} has a control or non-latin1 character in its value`);
    head += `${name}: ${value}\r\n`;
  }
  return head + '\r\n';
}

// The sockets and waiting requests of one engine (host:port).
class Origin {
  readonly key: string;
  readonly host: string;
  readonly port: number;
  readonly shared: PoolShared;
  // LIFO: the most recently used socket is the least likely to have hit the engine's idle timeout.
  readonly idle: Conn[] = [];
  readonly queue: Exchange[] = [];
  open = 0;

  constructor(shared: PoolShared, url: URL) {
    this.shared = shared;
    this.key = url.host;
    // URL keeps IPv6 literals bracketed; connect() wants them bare.
    this.host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
    this.port = url.port === '' ? 80 : Number(url.port);
  }

  dispatch(ex: Exchange): void {
    const c = this.idle.pop();
    if (c !== undefined) c.start(ex);
    else if (this.open < this.shared.connections) this.#open().start(ex);
    else this.queue.push(ex);
  }

  dequeue(ex: Exchange): void {
    const i = this.queue.indexOf(ex);
    if (i >= 0) this.queue.splice(i, 1);
  }

  // A socket finished an answer and may carry another.
  release(c: Conn): void {
    if (this.shared.closed) {
      c.destroy(undefined);
      return;
    }
    const next = this.queue.shift();
    if (next !== undefined) c.start(next);
    else {
      this.idle.push(c);
      c.rest();
    }
  }

  // A socket is closed: forget it, and give its place to the next waiting request.
  gone(c: Conn): void {
    this.open--;
    const i = this.idle.lastIndexOf(c);
    if (i >= 0) this.idle.splice(i, 1);
    const shared = this.shared;
    shared.conns.delete(c);
    if (shared.closed) {
      if (shared.conns.size === 0) shared.drained?.();
      return;
    }
    while (this.queue.length > 0 && this.open < shared.connections) {
      const ex = this.queue.shift();
      if (ex !== undefined) this.#open().start(ex);
    }
    // Replicas come and go; an origin with nothing open or waiting is not worth keeping.
    if (this.open === 0 && this.queue.length === 0 && shared.origins.get(this.key) === this) shared.origins.delete(this.key);
  }

  #open(): Conn {
    this.open++;
    const c = new Conn(this);
    this.shared.conns.add(c);
    return c;
  }
}

// One socket and the parser of the answers that come back on it.
class Conn {
  readonly #socket: Socket;
  readonly #origin: Origin;
  #ex: Exchange | undefined;
  #state: ReadState = 'idle';
  // Bytes of an unfinished head or line, kept at the front of #store until the rest arrives. The
  // store grows by doubling, so a head that trickles in a byte per read costs linear copying, not
  // quadratic (64 KiB re-concatenated per byte would be gigabytes).
  #store: Buffer | undefined;
  #storeLength = 0;
  // True while the bytes being parsed are #store's own: keeping a remainder must not overwrite
  // bytes already handed to a consumer.
  #parsingStore = false;
  // Where in the kept bytes to resume looking for the end of the head: a 64 KiB head in 1-byte
  // reads would otherwise be searched from its start every time.
  #scan = 0;
  #remaining = 0;
  #trailerBytes = 0;
  #reusable = true;
  #gotByte = false;
  #reused = false;
  #served = 0;
  #paused = false;
  #resting = false;
  #dead = false;
  #idleTimer: NodeJS.Timeout | undefined;

  constructor(origin: Origin) {
    this.#origin = origin;
    const s = connect({ host: origin.host, port: origin.port });
    s.setNoDelay(true);
    s.on('data', this.#onData);
    s.on('end', this.#onEnd);
    s.on('error', this.#onError);
    s.on('close', this.#onClose);
    this.#socket = s;
  }

  get connecting(): boolean {
    return this.#socket.connecting;
  }

  start(ex: Exchange): void {
    this.#ex = ex;
    this.#state = 'head';
    this.#scan = 0;
    this.#storeLength = 0;
    this.#gotByte = false;
    this.#reused = this.#served > 0;
    this.#served++;
    this.#resting = false;
    ex.begin(this);
    const body = ex.takeBody();
    const s = this.#socket;
    if (typeof body === 'string') s.write(ex.head + body);
    else if (body.byteLength <= ONE_WRITE_MAX_BYTES) {
      // One buffer for head and body, not a buffer of the head and then their concatenation.
      const headBytes = Buffer.byteLength(ex.head);
      const out = Buffer.allocUnsafe(headBytes + body.byteLength);
      out.write(ex.head, 0, 'utf8');
      out.set(body, headBytes);
      s.write(out);
    }
    else {
      // cork: the two writes leave as one writev.
      s.cork();
      s.write(ex.head);
      s.write(body);
      s.uncork();
    }
  }

  // Idle in the pool: closed unless it is taken again within keepAliveTimeoutMs. One timer per
  // socket, re-armed with refresh(); one that fires while the socket is busy does nothing.
  rest(): void {
    this.#resting = true;
    if (this.#idleTimer === undefined) {
      this.#idleTimer = setTimeout(Conn.#onIdleTimeout, this.#origin.shared.keepAliveTimeoutMs, this);
      this.#idleTimer.unref();
    } else this.#idleTimer.refresh();
  }

  static #onIdleTimeout(c: Conn): void {
    if (c.#resting) c.destroy(undefined);
  }

  pause(): void {
    if (this.#paused) return;
    this.#paused = true;
    this.#socket.pause();
  }

  resume(): void {
    if (!this.#paused) return;
    this.#paused = false;
    this.#socket.resume();
  }

  /** Closes the socket; the request on it, if any, fails with `err`. Safe to call more than once. */
  destroy(err: unknown): void {
    if (this.#dead) return;
    this.#dead = true;
    clearTimeout(this.#idleTimer);
    this.#socket.destroy();
    const ex = this.#ex;
    this.#ex = undefined;
    this.#state = 'idle';
    this.#store = undefined;
    this.#storeLength = 0;
    if (ex !== undefined) ex.fail(err ?? new UpstreamClientError('UND_ERR_SOCKET', 'the engine connection closed'));
    this.#origin.gone(this);
  }

  readonly #onError = (e: Error): void => {
    const code = 'code' in e ? e.code : undefined;
    if (this.#reused && this.#state === 'head' && !this.#gotByte && (code === 'ECONNRESET' || code === 'EPIPE')) {
      // The kept-alive race again (see #onEnd), seen as a reset or a failed write: one code for it.
      this.destroy(new UpstreamClientError('ECONNRESET', `the engine closed a kept-alive connection before answering (${String(code)})`, { cause: e }));
    } else this.destroy(e);
  };

  readonly #onClose = (): void => {
    this.destroy(new UpstreamClientError('UND_ERR_SOCKET', 'the engine connection closed'));
  };

  readonly #onEnd = (): void => {
    const ex = this.#ex;
    if (ex === undefined) {
      // The engine's keep-alive timeout beat ours: the socket leaves the pool before anyone uses it.
      this.destroy(undefined);
      return;
    }
    switch (this.#state) {
      case 'until-close':
        this.#reusable = false;
        this.#complete(ex, 0, 0);
        return;
      case 'head':
        if (this.#gotByte) this.destroy(protocolError('the engine closed the connection in the middle of its response head'));
        else if (this.#reused) {
          // The engine closed a kept-alive socket as we wrote to it: it never answered, so the
          // request may go to another replica (proxy.ts retries ECONNRESET).
          this.destroy(new UpstreamClientError('ECONNRESET', 'the engine closed a kept-alive connection before answering'));
        } else this.destroy(new UpstreamClientError('UND_ERR_SOCKET', 'the engine closed the connection before answering'));
        return;
      case 'length':
        this.destroy(new UpstreamClientError('UND_ERR_SOCKET', `the engine closed the connection with ${this.#remaining} body bytes still to come`));
        return;
      case 'chunk-size':
      case 'chunk-data':
      case 'chunk-end':
      case 'trailers':
        this.destroy(new UpstreamClientError('UND_ERR_SOCKET', 'the engine closed the connection before the last chunk of its answer'));
        return;
      case 'idle':
        this.destroy(undefined);
        return;
    }
  };

  readonly #onData = (chunk: Buffer): void => {
    const ex = this.#ex;
    if (ex === undefined) {
      // Bytes nobody asked for: whatever answer they belong to, the next one would start inside it.
      this.destroy(undefined);
      return;
    }
    this.#gotByte = true;
    let data = chunk;
    const kept = this.#storeLength;
    this.#parsingStore = false;
    if (kept > 0 && this.#store !== undefined) {
      const need = kept + chunk.length;
      let store = this.#store;
      if (store.length < need) {
        store = Buffer.allocUnsafe(Math.max(need, store.length * 2));
        this.#store?.copy(store, 0, 0, kept);
        this.#store = store;
      }
      chunk.copy(store, kept);
      data = store.subarray(0, need);
      this.#storeLength = 0;
      this.#parsingStore = true;
    }
    try {
      this.#parse(ex, data);
      if (this.#storeLength === 0) this.#store = undefined;
      if (this.#ex === ex) ex.watchBody();
    } catch (e) {
      // A malformed answer, or a bug in the parser: either way this request fails and its socket
      // goes, rather than an exception escaping a socket handler and taking the gateway down.
      this.destroy(e);
    }
  };

  // Keeps data[at..] for the next read.
  #keep(data: Buffer, at: number): void {
    const rest = data.length - at;
    if (!(this.#parsingStore && at === 0)) {
      // Bytes before `at` may be body already handed out as views of this memory: a fresh store.
      const store = Buffer.allocUnsafe(Math.max(2 * rest, 256));
      data.copy(store, 0, at);
      this.#store = store;
    }
    this.#storeLength = rest;
  }

  // Hands the consumer the body bytes of data[at..] that the current length or chunk still wants
  // (a view, not a copy), pausing the socket when the consumer is behind; where parsing goes on.
  #bodyBytes(ex: Exchange, data: Buffer, at: number): number {
    const n = Math.min(this.#remaining, data.length - at);
    const piece = at === 0 && n === data.length ? data : data.subarray(at, at + n);
    this.#remaining -= n;
    if (!ex.push(piece)) this.pause();
    return at + n;
  }

  #parse(ex: Exchange, data: Buffer): void {
    const max = this.#origin.shared.maxHeaderBytes;
    let at = 0;
    while (at < data.length) {
      switch (this.#state) {
        case 'head': {
          const end = this.#headEnd(data, at);
          if (end < 0) {
            if (data.length - at > max) throw headTooLarge('response head', max);
            this.#keep(data, at);
            return;
          }
          if (end - at > max) throw headTooLarge('response head', max);
          const head = parseHead(data.toString('latin1', at, end - 4));
          at = end;
          if (head.status < 200) {
            // 103 Early Hints and the like come before the real answer. 100 Continue answers an
            // Expect we never send, and 101 would switch protocols we never asked for: undici
            // refuses both, and so do we.
            if (head.status === 100) throw protocolError('100 Continue to a request that sent no Expect');
            if (head.status === 101) throw protocolError('101 Switching Protocols to a request that asked for no upgrade');
            continue;
          }
          const hasBody = this.#frame(head);
          ex.answer(head.status, head.headers);
          if (!hasBody) {
            this.#complete(ex, at, data.length);
            return;
          }
          break;
        }
        case 'length': {
          at = this.#bodyBytes(ex, data, at);
          if (this.#dead) return;
          if (this.#remaining === 0) {
            this.#complete(ex, at, data.length);
            return;
          }
          break;
        }
        case 'chunk-size': {
          const eol = data.indexOf(CRLF, at);
          if (eol < 0) {
            if (data.length - at > CHUNK_LINE_MAX_BYTES) throw protocolError(`a chunk-size line is over ${CHUNK_LINE_MAX_BYTES} bytes`);
            this.#keep(data, at);
            return;
          }
          if (eol - at > CHUNK_LINE_MAX_BYTES) throw protocolError(`a chunk-size line is over ${CHUNK_LINE_MAX_BYTES} bytes`);
          const size = chunkSizeOf(data, at, eol);
          at = eol + 2;
          if (size === 0) {
            this.#state = 'trailers';
            this.#trailerBytes = 0;
          } else {
            this.#remaining = size;
            this.#state = 'chunk-data';
          }
          break;
        }
        case 'chunk-data': {
          at = this.#bodyBytes(ex, data, at);
          if (this.#dead) return;
          if (this.#remaining === 0) this.#state = 'chunk-end';
          break;
        }
        case 'chunk-end': {
          if (data[at] !== 13 || (at + 1 < data.length && data[at + 1] !== 10)) throw protocolError('chunk data is not followed by CRLF (a wrong chunk size?)');
          if (at + 1 >= data.length) {
            this.#keep(data, at);
            return;
          }
          at += 2;
          this.#state = 'chunk-size';
          break;
        }
        case 'trailers': {
          const eol = data.indexOf(CRLF, at);
          if (eol < 0) {
            if (this.#trailerBytes + data.length - at > max) throw headTooLarge('trailers', max);
            this.#keep(data, at);
            return;
          }
          this.#trailerBytes += eol - at + 2;
          if (this.#trailerBytes > max) throw headTooLarge('trailers', max);
          const blank = eol === at;
          at = eol + 2;
          // Trailers are read past, never used: an engine has nothing to say in them we need.
          if (blank) {
            this.#complete(ex, at, data.length);
            return;
          }
          break;
        }
        case 'until-close': {
          if (!ex.push(at === 0 ? data : data.subarray(at))) this.pause();
          return;
        }
        case 'idle':
          throw new Error('upstream-client: bytes parsed on a socket with no request (a bug)');
      }
    }
  }

  // Where the head starting at `at` ends (past its blank line), or -1 while it is incomplete. Each
  // byte is looked at once however the head is split across reads, and the two ways a head can be
  // wrong before it ends fail at once, as llhttp fails them: bytes that are not "HTTP/1." and a
  // line ending in a bare LF (before, neither ever matched CRLFCRLF and waited out the headers
  // timeout, 120 s by default).
  #headEnd(data: Buffer, at: number): number {
    const prefixEnd = Math.min(data.length, at + STATUS_PREFIX.length);
    for (let i = at + Math.min(this.#scan, STATUS_PREFIX.length); i < prefixEnd; i++) {
      if (data[i] !== STATUS_PREFIX[i - at]) throw protocolError('the answer does not start with "HTTP/1."');
    }
    let from = at + this.#scan;
    for (;;) {
      const lf = data.indexOf(10, from);
      if (lf < 0) {
        this.#scan = data.length - at;
        return -1;
      }
      if (data[lf - 1] !== 13) throw protocolError('a line of the response head ends in a bare LF');
      // Every LF before this one followed a CR, so LF CR LF is the blank line.
      if (lf - at >= 3 && data[lf - 2] === 10) {
        this.#scan = 0;
        return lf + 1;
      }
      from = lf + 1;
    }
  }

  // Decides how the body ends and whether the socket may carry another request; false: no body.
  #frame(head: ParsedHead): boolean {
    const h = head.headers;
    const conn = h.connection;
    this.#reusable = head.minor === 1 ? conn === undefined || !hasToken(conn, 'close') : conn !== undefined && hasToken(conn, 'keep-alive');
    const te = h['transfer-encoding'];
    const cl = h['content-length'];
    // Both framings at once is how request smuggling starts: RFC 9112 lets a recipient read it as
    // chunked and close, llhttp refuses it, and so do we.
    if (te !== undefined && cl !== undefined) throw protocolError('both transfer-encoding and content-length');
    const length = cl === undefined ? undefined : contentLengthOf(cl);
    if (head.status === 204 || head.status === 304) {
      // No body, whatever the headers say; but a length that promises one means the engine will
      // write it, and the next answer on this socket would start inside it (a 204 with a
      // content-length once put one client's bytes in another's error message).
      if (length !== undefined && length > 0) throw protocolError(`${head.status} with content-length ${length}`);
      return false;
    }
    if (te !== undefined) {
      // chunked last: the body is chunked, and any coding before it is the client's to undo (we ask
      // for none, and pass what comes). chunked anywhere else, or not at all: the body runs to the
      // close (RFC 9112 6.3).
      if (lastToken(te) === 'chunked') {
        this.#state = 'chunk-size';
        return true;
      }
      this.#reusable = false;
      this.#state = 'until-close';
      return true;
    }
    if (length !== undefined) {
      if (length > this.#origin.shared.maxBodyBytes) throw answerTooLarge(this.#origin.shared.maxBodyBytes, `content-length ${length}`);
      if (length === 0) return false;
      this.#remaining = length;
      this.#state = 'length';
      return true;
    }
    this.#reusable = false;
    this.#state = 'until-close';
    return true;
  }

  // The answer ended at `at` of `length` bytes read: its exchange is done, the socket goes back to
  // the pool or is closed.
  #complete(ex: Exchange, at: number, length: number): void {
    this.#ex = undefined;
    this.#state = 'idle';
    ex.end();
    // Bytes after the end of an answer we did not ask for: the engine and we disagree about
    // framing, so nothing more on this socket can be trusted.
    if (!this.#reusable || at < length) {
      this.destroy(undefined);
      return;
    }
    this.resume();
    this.#origin.release(this);
  }
}

interface ParsedHead {
  readonly minor: number;
  readonly status: number;
  readonly headers: Record<string, string>;
}

function parseHead(text: string): ParsedHead {
  let eol = text.indexOf('\r\n');
  if (eol < 0) eol = text.length;
  const line = text.slice(0, eol);
  const m = STATUS_LINE.exec(line);
  if (m === null || BAD_VALUE.test(line)) throw protocolError(`status line ${JSON.stringify(line.slice(0, 80))} is not "HTTP/1.x NNN reason"`);
  const headers: Record<string, string> = {};
  let at = eol + 2;
  while (at < text.length) {
    let next = text.indexOf('\r\n', at);
    if (next < 0) next = text.length;
    const c = text.charCodeAt(at);
    // Folded lines were deprecated by RFC 7230; a parser that joins them and one that does not
    // read different headers from the same bytes.
    if (c === 32 || c === 9) throw protocolError(`header line ${JSON.stringify(text.slice(at, Math.min(next, at + 80)))} is folded (obs-fold)`);
    const colon = text.indexOf(':', at);
    if (colon < 0 || colon >= next) throw protocolError(`header line ${JSON.stringify(text.slice(at, Math.min(next, at + 80)))} has no colon`);
    const name = text.slice(at, colon);
    if (!TOKEN.test(name)) throw protocolError(`header name ${JSON.stringify(name.slice(0, 80))} is not a token`);
    let from = colon + 1;
    let to = next;
    while (from < to && (text.charCodeAt(from) === 32 || text.charCodeAt(from) === 9)) from++;
    while (to > from && (text.charCodeAt(to - 1) === 32 || text.charCodeAt(to - 1) === 9)) to--;
    const value = text.slice(from, to);
    if (BAD_VALUE.test(value)) throw protocolError(`header ${name} has a control character in its value`);
    const key = name.toLowerCase();
    const prev = Object.hasOwn(headers, key) ? headers[key] : undefined;
    const joined = prev === undefined ? value : `${prev}, ${value}`;
    // Assigning "__proto__" on a plain object would set its prototype instead of a header.
    if (key === '__proto__') Object.defineProperty(headers, key, { value: joined, enumerable: true, writable: true, configurable: true });
    else headers[key] = joined;
    at = next + 2;
  }
  return { minor: m[1] === '1' ? 1 : 0, status: Number(m[2]), headers };
}

function hasToken(list: string, token: string): boolean {
  for (const t of list.split(',')) if (t.trim().toLowerCase() === token) return true;
  return false;
}

function lastToken(list: string): string {
  const comma = list.lastIndexOf(',');
  return list.slice(comma + 1).trim().toLowerCase();
}

const DIGITS = /^\d{1,15}$/;

// A body length: one non-negative integer on one header line. RFC 9110 allows the same value
// repeated ("5, 5", or two lines, which parseHead joins into that); llhttp refuses it, and an
// engine that sends it has a bug we would rather see than guess around.
function contentLengthOf(v: string): number {
  if (!DIGITS.test(v)) throw protocolError(`content-length ${JSON.stringify(v.slice(0, 40))} is not one non-negative integer`);
  return Number(v);
}

function answerTooLarge(max: number, what: string): UpstreamClientError {
  return new UpstreamClientError(upstreamAnswerTooLargeCode, `the engine's answer (${what}) is over ${max} bytes (gateway.upstream.max_answer_bytes)`);
}

function chunkSizeOf(b: Buffer, from: number, to: number): number {
  let size = 0;
  let i = from;
  for (; i < to; i++) {
    const c = b[i] ?? -1;
    const d = c >= 48 && c <= 57 ? c - 48 : c >= 97 && c <= 102 ? c - 87 : c >= 65 && c <= 70 ? c - 55 : -1;
    if (d < 0) break;
    if (i - from >= CHUNK_SIZE_MAX_DIGITS) throw protocolError(`a chunk size has more than ${CHUNK_SIZE_MAX_DIGITS} hex digits`);
    size = size * 16 + d;
  }
  const bad = (): UpstreamClientError => protocolError(`chunk-size line ${JSON.stringify(b.toString('latin1', from, Math.min(to, from + 80)))} is not hex digits and extensions`);
  if (i === from) throw bad();
  if (i < to) {
    // Extensions (";name=value") carry nothing for us; they are checked for control characters
    // and skipped.
    while (i < to && (b[i] === 32 || b[i] === 9)) i++;
    if (b[i] !== 59) throw bad();
    for (; i < to; i++) {
      const c = b[i] ?? -1;
      if ((c < 32 && c !== 9) || c === 127) throw bad();
    }
  }
  return size;
}

// One request from request() to the last byte of its answer, and that answer's body: one object
// per request, which is also the abort listener (handleEvent) and the body's iterator.
class Exchange implements AnswerBody, AsyncIterator<string | Buffer, undefined> {
  readonly origin: Origin;
  readonly head: string;
  readonly signal: AbortSignal;
  readonly #headersTimeoutMs: number;
  readonly #bodyTimeoutMs: number;
  #body: string | Uint8Array;
  #resolve: (a: UpstreamAnswer) => void;
  #reject: (e: unknown) => void;
  #phase: Phase = 'queued';
  #conn: Conn | undefined;
  // The headers timer until headers arrive, then the body idle timer (see watchBody).
  #timer: NodeJS.Timeout | undefined;
  #paused = false;
  #mode: ReadMode = 'none';
  #chunks: Buffer[] = [];
  #queuedBytes = 0;
  #failed = false;
  #failure: unknown;
  #decoder: StringDecoder | undefined;
  #nextWaiter: ((r: IteratorResult<string | Buffer, undefined>) => void) | undefined;
  #textWaiter: ((s: string) => void) | undefined;
  #dumpWaiter: (() => void) | undefined;
  #waitReject: ((e: unknown) => void) | undefined;
  #dumpedBytes = 0;
  #dumpUntil = 0;
  #receivedBytes = 0;

  constructor(origin: Origin, r: UpstreamRequest, head: string, resolve: (a: UpstreamAnswer) => void, reject: (e: unknown) => void) {
    this.origin = origin;
    this.head = head;
    this.signal = r.signal;
    this.#body = r.body;
    this.#headersTimeoutMs = r.headersTimeoutMs;
    this.#bodyTimeoutMs = r.bodyTimeoutMs;
    this.#resolve = resolve;
    this.#reject = reject;
  }

  // The request body, given up once written: a long stream should not hold a long prompt.
  takeBody(): string | Uint8Array {
    const b = this.#body;
    this.#body = '';
    return b;
  }

  begin(conn: Conn): void {
    this.#conn = conn;
    this.#phase = 'head';
    if (this.#headersTimeoutMs > 0) this.#timer = setTimeout(Exchange.#onTimer, this.#headersTimeoutMs, this);
  }

  answer(status: number, headers: Record<string, string>): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#phase = 'body';
    this.#resolve({ status, headers, body: this });
  }

  // After each read that left the body unfinished: the engine has bodyTimeoutMs for its next
  // byte. Armed here rather than when the head arrives, so the common short answer that comes
  // whole in one read never starts a body timer at all.
  watchBody(): void {
    if (this.#phase !== 'body' || this.#paused || this.#bodyTimeoutMs <= 0) return;
    if (this.#timer === undefined) this.#timer = setTimeout(Exchange.#onTimer, this.#bodyTimeoutMs, this);
    else this.#timer.refresh();
  }

  static #onTimer(ex: Exchange): void {
    ex.#timer = undefined;
    if (ex.#phase === 'head') {
      // Still connecting when the time ran out: the engine never saw the request, so it may go
      // elsewhere (proxy.ts retries UND_ERR_CONNECT_TIMEOUT, not a headers timeout).
      if (ex.#conn?.connecting === true) ex.fail(new UpstreamClientError('UND_ERR_CONNECT_TIMEOUT', `could not connect to the engine within ${ex.#headersTimeoutMs} ms`));
      else ex.fail(new UpstreamClientError('UND_ERR_HEADERS_TIMEOUT', `the engine sent no response head within ${ex.#headersTimeoutMs} ms`));
    } else if (ex.#phase === 'body') {
      ex.fail(new UpstreamClientError('UND_ERR_BODY_TIMEOUT', `the engine sent no body bytes for ${ex.#bodyTimeoutMs} ms`));
    }
  }

  /** The signal aborted. */
  handleEvent(): void {
    this.fail(this.signal.reason);
  }

  // Body bytes off the wire; false: the consumer is behind, stop reading the socket.
  push(b: Buffer): boolean {
    this.#receivedBytes += b.length;
    const max = this.origin.shared.maxBodyBytes;
    if (this.#receivedBytes > max) {
      // Chunked or to-the-close: the size shows only as the bytes come. A text() would have
      // buffered all of it (128 MiB once), a stream would have run for as long as the engine liked.
      this.fail(answerTooLarge(max, `${this.#receivedBytes} bytes so far`));
      return true;
    }
    if (this.#mode === 'dump') {
      this.#dumpedBytes += b.length;
      if (this.#dumpedBytes > DUMP_MAX_BYTES || Date.now() > this.#dumpUntil) {
        this.fail(new UpstreamClientError('UND_ERR_ABORTED', 'the dumped body was too long to read to its end'));
      }
      return true;
    }
    const w = this.#nextWaiter;
    if (w !== undefined) {
      // Someone is waiting, so nothing is queued: hand the bytes over directly.
      const v = this.#decoder === undefined ? b : this.#decoder.write(b);
      if (v !== '') {
        this.#nextWaiter = undefined;
        this.#waitReject = undefined;
        w({ value: v, done: false });
      }
      return true;
    }
    this.#chunks.push(b);
    this.#queuedBytes += b.length;
    if (this.#mode === 'text' || this.#queuedBytes < QUEUE_HIGH_BYTES) return true;
    // The engine may write for minutes into a consumer that stopped reading: the bound is TCP's
    // window, not our memory. The idle timer stops too: the silence is ours, not the engine's.
    this.#paused = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    return false;
  }

  #resume(): void {
    if (!this.#paused) return;
    this.#paused = false;
    if (this.#phase !== 'body') return;
    this.watchBody();
    this.#conn?.resume();
  }

  // The answer's last byte arrived.
  end(): void {
    this.#phase = 'ended';
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#conn = undefined;
    this.#paused = false;
    this.signal.removeEventListener('abort', this);
    const w = this.#nextWaiter;
    if (w !== undefined) {
      this.#nextWaiter = undefined;
      this.#waitReject = undefined;
      const tail = this.#decoder?.end();
      this.#decoder = undefined;
      w(tail === undefined || tail === '' ? { value: undefined, done: true } : { value: tail, done: false });
    }
    const t = this.#textWaiter;
    if (t !== undefined) {
      this.#textWaiter = undefined;
      this.#waitReject = undefined;
      t(this.#joined());
    }
    const d = this.#dumpWaiter;
    if (d !== undefined) {
      this.#dumpWaiter = undefined;
      d();
    }
  }

  /** Fails the request, or its body once headers are in; closes its socket. Later calls do nothing. */
  fail(err: unknown): void {
    const phase = this.#phase;
    if (phase === 'ended' || phase === 'failed') return;
    this.#phase = 'failed';
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.signal.removeEventListener('abort', this);
    this.#body = '';
    const conn = this.#conn;
    this.#conn = undefined;
    if (phase === 'queued') this.origin.dequeue(this);
    if (phase === 'queued' || phase === 'head') this.#reject(err);
    else {
      this.#failed = true;
      this.#failure = err;
      this.#chunks = [];
      this.#queuedBytes = 0;
      const reject = this.#waitReject;
      this.#waitReject = undefined;
      this.#nextWaiter = undefined;
      this.#textWaiter = undefined;
      if (reject !== undefined) reject(err);
      const d = this.#dumpWaiter;
      this.#dumpWaiter = undefined;
      if (d !== undefined) d();
    }
    // Aborted or failed mid-answer: the socket's position in the stream is unknown, never reuse it.
    if (conn !== undefined) conn.destroy(err);
  }

  #joined(): string {
    const c = this.#chunks;
    this.#chunks = [];
    this.#queuedBytes = 0;
    const only = c.length === 1 ? c[0] : undefined;
    return (only ?? Buffer.concat(c)).toString('utf8');
  }

  setEncoding(encoding: 'utf8'): this {
    this.#decoder ??= new StringDecoder(encoding);
    return this;
  }

  text(): Promise<string> {
    if (this.#mode !== 'none') return Promise.reject(new UpstreamClientError('UND_ERR_BODY_USED', 'the answer body was already read'));
    this.#mode = 'text';
    if (this.#failed) return Promise.reject(this.#failure);
    if (this.#phase === 'ended') return Promise.resolve(this.#joined());
    this.#resume();
    return new Promise<string>((resolve, reject) => {
      this.#textWaiter = resolve;
      this.#waitReject = reject;
    });
  }

  dump(): Promise<void> {
    this.#mode = 'dump';
    this.#chunks = [];
    this.#queuedBytes = 0;
    const w = this.#nextWaiter;
    if (w !== undefined) {
      this.#nextWaiter = undefined;
      this.#waitReject = undefined;
      w({ value: undefined, done: true });
    }
    if (this.#phase !== 'body') return Promise.resolve();
    this.#dumpedBytes = 0;
    this.#dumpUntil = Date.now() + DUMP_MAX_MS;
    this.#resume();
    return new Promise<void>((resolve) => {
      this.#dumpWaiter = resolve;
    });
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<IteratorResult<string | Buffer, undefined>> {
    if (this.#failed) return Promise.reject(this.#failure);
    if (this.#mode === 'none') this.#mode = 'iterate';
    else if (this.#mode !== 'iterate') return Promise.resolve({ value: undefined, done: true });
    for (;;) {
      const b = this.#chunks.shift();
      if (b === undefined) break;
      this.#queuedBytes -= b.length;
      if (this.#paused && this.#queuedBytes <= QUEUE_LOW_BYTES) this.#resume();
      if (this.#decoder === undefined) return Promise.resolve({ value: b, done: false });
      const s = this.#decoder.write(b);
      if (s !== '') return Promise.resolve({ value: s, done: false });
    }
    if (this.#phase === 'ended') {
      const tail = this.#decoder?.end();
      this.#decoder = undefined;
      return Promise.resolve(tail === undefined || tail === '' ? { value: undefined, done: true } : { value: tail, done: false });
    }
    return new Promise((resolve, reject) => {
      this.#nextWaiter = resolve;
      this.#waitReject = reject;
    });
  }

  // A `for await` left early (break, throw): the rest is not wanted, and closing the socket is
  // what tells the engine to stop generating it.
  return(): Promise<IteratorResult<string | Buffer, undefined>> {
    this.#chunks = [];
    this.#queuedBytes = 0;
    if (this.#phase === 'body') this.fail(new UpstreamClientError('UND_ERR_ABORTED', 'the answer body was left unread'));
    return Promise.resolve({ value: undefined, done: true });
  }
}
