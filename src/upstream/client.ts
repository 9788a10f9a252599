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
import type { UpstreamAnswer, UpstreamPoolOptions, UpstreamRequest } from './client-types.js';
import { UpstreamClientError } from './client-types.js';
import { Conn } from './connection.js';
import { Exchange } from './exchange.js';
import { requestHead } from './http-heads.js';

export type { AnswerBody, UpstreamAnswer, UpstreamPoolOptions, UpstreamRequest } from './client-types.js';
export { UpstreamClientError, upstreamAnswerTooLargeCode, upstreamHeadTooLargeCode, upstreamProtocolCode } from './client-types.js';

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

