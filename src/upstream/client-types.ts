// The upstream client's public shapes: what a pool is configured with, the request it sends, the
// answer and body it hands back, and the errors (with the codes proxy.ts's retry logic branches on).
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

