// One request's exchange with an engine: its timers, the answer's body as the consumer reads it
// (iterated, text() or dump()), backpressure on the socket, and how it ends or fails.
import { StringDecoder } from 'node:string_decoder';
import type { AnswerBody, UpstreamAnswer, UpstreamRequest } from './client-types.js';
import { UpstreamClientError } from './client-types.js';
import { answerTooLarge } from './http-heads.js';

// Body bytes queued for a consumer that is not reading: past HIGH the socket is paused (the
// engine's writes then block in TCP), under LOW it reads again.
const QUEUE_HIGH_BYTES = 64 * 1024;
const QUEUE_LOW_BYTES = 16 * 1024;
// dump() keeps the socket only when the rest of the body is this short and this quick: reading a
// long generation to the end to save one connect would keep the engine generating for nobody.
const DUMP_MAX_BYTES = 128 * 1024;
const DUMP_MAX_MS = 1000;

type Phase = 'queued' | 'head' | 'body' | 'ended' | 'failed';
type ReadMode = 'none' | 'iterate' | 'text' | 'dump';

/** What an exchange asks of its origin: to leave the queue, and the pool's body bound. */
export interface ExchangeOrigin {
  dequeue(ex: Exchange): void;
  readonly shared: { readonly maxBodyBytes: number };
}

/** What an exchange asks of the connection carrying it. */
export interface ExchangeConn {
  readonly connecting: boolean;
  resume(): void;
  destroy(err: unknown): void;
}

/** One request and its answer, from the queue to its end. */
export class Exchange implements AnswerBody, AsyncIterator<string | Buffer, undefined> {
  readonly origin: ExchangeOrigin;
  readonly head: string;
  readonly signal: AbortSignal;
  readonly #headersTimeoutMs: number;
  readonly #bodyTimeoutMs: number;
  #body: string | Uint8Array;
  #resolve: (a: UpstreamAnswer) => void;
  #reject: (e: unknown) => void;
  #phase: Phase = 'queued';
  #conn: ExchangeConn | undefined;
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

  constructor(origin: ExchangeOrigin, r: UpstreamRequest, head: string, resolve: (a: UpstreamAnswer) => void, reject: (e: unknown) => void) {
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

  begin(conn: ExchangeConn): void {
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
