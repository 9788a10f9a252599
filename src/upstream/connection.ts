// One kept-alive socket to an engine and the parser of the answers that come back on it: it writes
// an exchange's request, frames the answer (Content-Length, chunked, or until close), hands body
// bytes to the exchange and tells its origin when it is free again or gone.
import { connect, type Socket } from 'node:net';
import { UpstreamClientError } from './client-types.js';
import type { Exchange } from './exchange.js';
import { answerTooLarge, chunkSizeOf, CHUNK_LINE_MAX_BYTES, contentLengthOf, CRLF, hasToken, headTooLarge, lastToken, parseHead, protocolError, STATUS_PREFIX } from './http-heads.js';
import type { ParsedHead } from './http-heads.js';

// Under this a request goes out as one buffer in one write: head and body in one TCP segment is
// what makes a short request cheap for both sides. Above it, copying the body costs more than the
// second write.
const ONE_WRITE_MAX_BYTES = 64 * 1024;
type ReadState = 'idle' | 'head' | 'length' | 'chunk-size' | 'chunk-data' | 'chunk-end' | 'trailers' | 'until-close';

/** What a connection asks of its origin: where to connect, the pool's bounds, and to be told it is free or gone. */
export interface ConnOrigin {
  readonly host: string;
  readonly port: number;
  readonly shared: { readonly keepAliveTimeoutMs: number; readonly maxHeaderBytes: number; readonly maxBodyBytes: number };
  release(c: Conn): void;
  gone(c: Conn): void;
}

/** One socket and the parser of the answers that come back on it. */
export class Conn {
  readonly #socket: Socket;
  readonly #origin: ConnOrigin;
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

  constructor(origin: ConnOrigin) {
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

