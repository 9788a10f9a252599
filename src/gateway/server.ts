// The gateway's HTTP server: builds its parts from the options (parts.ts), listens, hands each
// request to the route table (routes.ts), answers protocol errors Node would answer with an empty
// body, and closes in reverse order of start.
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { LlmgwError } from '../errors/index.js';
import type { IndexWriter } from '../kv/index.js';
import type { LoadBook, Router } from '../routing/index.js';
import type { GatewayConfig } from './config.js';
import type { GatewayContext, GatewayOptions } from './context.js';
import { buildParts, loadTokenizers } from './parts.js';
import { sendError, writeRawError } from './reply.js';
import { dispatch } from './routes.js';

/** A running gateway. */
export interface Gateway {
  readonly url: URL;
  /** Where the agent's per-replica deltas go; undefined without a shared index. */
  readonly writer: IndexWriter | undefined;
  readonly router: Router;
  readonly load: LoadBook;
  /**
   * Resolves once no model's tokenizer is still loading: until then /ready says warming, and a
   * model's requests are tokenized by its engine and may be routed by load alone.
   */
  whenWarm(): Promise<void>;
  /**
   * Drains: /ready answers 503 from now on, new requests are served for gateway.drain_grace_ms and
   * refused after it (when the listener closes too), and the requests in flight finish; resolves
   * once none is left, or after gateway.drain_timeout_ms (or when `signal` aborts) with the ones
   * still running cut. Idempotent; close() after it releases the rest.
   */
  drain(o?: { signal?: AbortSignal }): Promise<DrainResult>;
  /** Stops accepting, lets requests finish (bounded), then releases everything; idempotent. */
  close(): Promise<void>;
}

/** How a drain ended: the requests still running when its bound came, cut. */
export interface DrainResult {
  readonly cut: number;
  readonly tookMs: number;
}

/** Starts the gateway's HTTP server on config.host:config.port (port 0: any free port). */
export async function startGateway(o: GatewayOptions): Promise<Gateway> {
  const cfg = o.config;
  const { ctx, writer, load, verified, release } = buildParts(o);
  const { log, router, debug } = ctx;
  const server = httpServer(ctx);
  let url: URL;
  try {
    url = await listen(server, cfg);
  } catch (e) {
    // A port in use must not leave the poller's loop keeping the process alive.
    await release();
    throw e;
  }
  log.info({ url: url.href, keys: cfg.apiKeys.length, precise: writer !== undefined && o.scorer !== undefined }, 'gateway.listening');
  let unsubscribe: (() => void) | undefined;
  if (verified !== undefined) {
    // A model's tokenizer loads once a replica of it is ready, while nothing waits for it; loading
    // Qwen3's takes the pool seconds and the event loop about 0.7 s, which a model's first requests
    // would otherwise sit through (routed by load meanwhile, and every request on the loop delayed).
    const loadReady = (): void => loadTokenizers(o.directory, router, verified);
    loadReady();
    unsubscribe = o.directory.onChange?.(loadReady);
  }

  let stopped: Promise<void> | undefined;
  // One close of the listener, shared by the drain and close(): a second server.close() would call
  // back at once with "not running" while connections are still open.
  const stopListening = (): Promise<void> => (stopped ??= new Promise<void>((resolve) => server.close(() => resolve())));
  let draining: Promise<DrainResult> | undefined;
  const drain = async (signal: AbortSignal | undefined): Promise<DrainResult> => {
    const started = Date.now();
    ctx.drain.begin();
    log.info({ inFlight: ctx.drain.inFlight, graceMs: cfg.drainGraceMs, timeoutMs: cfg.drainTimeoutMs }, 'gateway.draining');
    const bound = AbortSignal.any([AbortSignal.timeout(cfg.drainTimeoutMs), ...(signal === undefined ? [] : [signal])]);
    const grace = setTimeout(() => {
      void stopListening();
      server.closeIdleConnections();
    }, cfg.drainGraceMs);
    try {
      await new Promise<void>((resolve) => {
        const onBound = (): void => resolve();
        bound.addEventListener('abort', onBound, { once: true });
        void ctx.drain.whenIdle().then(() => {
          bound.removeEventListener('abort', onBound);
          resolve();
        });
      });
    } finally {
      clearTimeout(grace);
    }
    const cut = ctx.drain.inFlight;
    // Counted in the log, not a metric: the process exits next, before any scrape could read it.
    if (cut > 0) server.closeAllConnections();
    const result = { cut, tookMs: Date.now() - started };
    if (cut > 0) log.warn(result, 'gateway.drained');
    else log.info(result, 'gateway.drained');
    return result;
  };

  let closing: Promise<void> | undefined;
  const shutdown = async (): Promise<void> => {
    unsubscribe?.();
    debug?.close();
    await closeServer(server, stopListening, o.closeGraceMs ?? 10_000);
    await release();
    log.info({}, 'gateway.closed');
  };
  return {
    url,
    writer,
    router,
    load,
    whenWarm: async () => verified?.whenLoaded(),
    drain: (d) => (draining ??= drain(d?.signal)),
    close: () => (closing ??= shutdown()),
  };
}

// The HTTP server over the route table, with the protocol errors Node would answer with an empty body
// answered as OpenAI errors.
function httpServer(ctx: GatewayContext): Server {
  const cfg = ctx.o.config;
  const log = ctx.log;
  // The response in progress on each connection, so a protocol error arriving after it started
  // is not answered with a second status line in the middle of it.
  const responses = new WeakMap<Duplex, ServerResponse>();

  const onRequest = (req: IncomingMessage, res: ServerResponse): void => {
    responses.set(req.socket, res);
    // A keep-alive connection's next request may be malformed: it gets its answer once this one is done.
    res.once('finish', () => {
      if (responses.get(req.socket) === res) responses.delete(req.socket);
    });
    // The handler settles every failure into a response itself; this catch is for its own bugs.
    dispatch(ctx, req, res).catch((e: unknown) => {
      log.error({ err: e }, 'gateway.handler_failed');
      if (!res.headersSent) sendError(res, e);
      else res.destroy();
    });
  };
  const server = createServer(
    {
      // Our own body timer (readBody) answers first with an OpenAI 408; Node's request timeout is the
      // backstop for a client that never finishes its headers, checked every second instead of 30.
      headersTimeout: cfg.bodyTimeoutMs,
      requestTimeout: cfg.bodyTimeoutMs + 1_000,
      connectionsCheckingInterval: Math.min(1_000, cfg.bodyTimeoutMs),
    },
    onRequest,
  );
  // Node answers protocol errors (431 headers too large, 400 bad framing, 408) with an empty body;
  // an OpenAI client then reports "unknown error". Each gets the OpenAI error object instead.
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    const res = responses.get(socket);
    if (err.code === 'ECONNRESET' || !socket.writable || res?.headersSent === true) {
      socket.destroy();
      return;
    }
    const e =
      err.code === 'HPE_HEADER_OVERFLOW'
        ? new LlmgwError('LLMGW_HEADERS_TOO_LARGE', 'request headers are over the gateway\'s limit of 16 KiB; send fewer or shorter headers')
        : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' || err.code === 'ERR_HTTP_HEADERS_TIMEOUT'
          ? new LlmgwError('LLMGW_BODY_TIMEOUT', `request did not arrive within ${cfg.bodyTimeoutMs} ms; send it at once, or raise gateway.body_timeout_ms`)
          : new LlmgwError('LLMGW_BAD_HTTP', `the request is not valid HTTP/1.1 (${err.code ?? err.message}); check the client's framing (Content-Length, Transfer-Encoding, header syntax)`);
    writeRawError(socket, e);
  });
  // An Expect other than 100-continue: Node's own 417 has no body.
  server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
    const want = String(req.headers.expect ?? '');
    sendError(res, new LlmgwError('LLMGW_EXPECTATION', `Expect: ${JSON.stringify(want).slice(0, 80)} is not supported; send no Expect header or "100-continue"`), {
      connection: 'close',
    });
  });
  // A client that asks first (Expect: 100-continue) is not invited to send a body it declared over
  // the limit: it gets the 413 at once instead of racing its upload against the closing connection.
  server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    if (!(Number(req.headers['content-length'] ?? NaN) > cfg.maxBodyBytes)) res.writeContinue();
    onRequest(req, res);
  });
  return server;
}

async function listen(server: Server, cfg: GatewayConfig): Promise<URL> {
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(cfg.port, cfg.host, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    throw new LlmgwError('LLMGW_LISTEN', `gateway cannot listen on ${cfg.host}:${cfg.port} (${why}); stop what holds it or change gateway.port`, { cause: e });
  }
  const addr: AddressInfo | string | null = server.address();
  if (addr === null || typeof addr === 'string') throw new LlmgwError('LLMGW_LISTEN', `gateway on ${cfg.host}:${cfg.port} has no TCP address`);
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  return new URL(`http://${host}:${addr.port}/`);
}

async function closeServer(server: Server, stopListening: () => Promise<void>, graceMs: number): Promise<void> {
  const closed = stopListening();
  server.closeIdleConnections();
  const timer = setTimeout(() => server.closeAllConnections(), graceMs);
  try {
    await closed;
  } finally {
    clearTimeout(timer);
  }
}
