// Reading a client's request body, bounded in size while it arrives, and where it is parsed and
// checked (limits/request.ts): in the worker pool when it is long, so the event loop moves bytes.
import type { IncomingMessage } from 'node:http';
import { errorCodes, LlmgwError, RequestError, type ErrorCode } from '../errors/index.js';
import { ChatBodyParser, parseGenerationRequest, promptKeys, type Endpoint, type GenerationRequest, type ParseAnswer, type ParsedRequest, type ParseTask, type RequestPolicy } from '../limits/index.js';

// A body this large is read into shared memory: the worker pool that tokenizes it reads the same
// bytes, where a copy for the pool cost the event loop 0.3 ms for a 400 KB chat. Smaller ones are
// cloned in microseconds. keptBodies keeps a chat's body for its next turn from the same size, so
// every kept body fills a buffer of its own and is kept without a copy.
const sharedFrom = 16 * 1024;

/** A body's bytes as readBody gives them: in shared memory from 16 KiB on, else in a buffer of Node's. */
export function concatBody(chunks: readonly Buffer[], size: number): Buffer {
  if (size < sharedFrom) return Buffer.concat(chunks, size);
  const out = Buffer.from(new SharedArrayBuffer(size));
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

/**
 * Reads the body up to `maxBytes` within `timeoutMs` of being called; throws LLMGW_BODY_TOO_LARGE as
 * soon as it is known to be bigger, LLMGW_BODY_TIMEOUT when it has not all arrived in time. One
 * explicit timer, cleared however the read ends.
 */
export function readBody(req: IncomingMessage, maxBytes: number, timeoutMs = Infinity, setting = 'gateway.max_body_bytes'): Promise<Buffer> {
  const tooLarge = (n: number | string): LlmgwError =>
    new LlmgwError('LLMGW_BODY_TOO_LARGE', `request body of ${n} bytes is over the gateway's limit of ${maxBytes}; send less or raise ${setting}`);
  const declared = Number(req.headers['content-length'] ?? NaN);
  if (declared > maxBytes) return Promise.reject(tooLarge(declared));
  if (req.readableEnded) return Promise.resolve(Buffer.alloc(0));
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const finish = (e: Error | undefined): void => {
      clearTimeout(timer);
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', finish);
      req.off('close', onClose);
      if (e === undefined) resolve(concatBody(chunks, size));
      else {
        // Whatever else the client sends is not read; the error reply closes the connection.
        req.pause();
        reject(e);
      }
    };
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      // Stop at the limit instead of buffering whatever a client chooses to send.
      if (size > maxBytes) finish(tooLarge(`more than ${maxBytes}`));
      else chunks.push(chunk);
    };
    const onEnd = (): void => finish(undefined);
    const onClose = (): void => finish(new LlmgwError('LLMGW_CLIENT_GONE', 'the client closed the connection before sending its whole body'));
    const timer =
      timeoutMs === Infinity
        ? undefined
        : setTimeout(
            () =>
              finish(
                new LlmgwError(
                  'LLMGW_BODY_TIMEOUT',
                  `request body did not arrive within ${timeoutMs} ms (${size} bytes came); send it at once, or raise gateway.body_timeout_ms`,
                ),
              ),
            timeoutMs,
          );
    req.on('data', onData);
    req.once('end', onEnd);
    req.once('error', finish);
    req.once('close', onClose);
  });
}

/**
 * Reads and drops the rest of a refused body, within `timeoutMs`: a socket closed with unread bytes
 * sends a reset, and a client still sending its upload then sees only the reset, never the 413.
 */
export function discardBody(req: IncomingMessage, timeoutMs: number): Promise<void> {
  if (req.readableEnded || req.destroyed) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const timer = timeoutMs === Infinity ? undefined : setTimeout(done, timeoutMs);
    function done(): void {
      clearTimeout(timer);
      req.off('end', done);
      req.off('close', done);
      req.off('error', done);
      resolve();
    }
    req.once('end', done);
    req.once('close', done);
    req.once('error', done);
    // Flowing with no 'data' listener: the bytes are read and dropped.
    req.resume();
  });
}

// Bodies kept for their next turn: 32 MiB holds about 80 conversations of 100k tokens.
const keptBodyBytes = 32 * 1024 * 1024;

/** The gateway's kept request bodies, under its size and depth limits, for parseGenerationRequest. */
export function keptBodies(limits: { readonly maxJsonDepth: number; readonly maxBodyBytes: number }): ChatBodyParser {
  return new ChatBodyParser({ limits: { maxDepth: limits.maxJsonDepth, maxBytes: limits.maxBodyBytes }, minBytes: sharedFrom, maxBytes: keptBodyBytes });
}

/** Parses request bodies in worker threads (workers' HashPool satisfies it). */
export interface RequestParsePool {
  parse(task: ParseTask): Promise<ParseAnswer>;
}

// The event loop's side: the request a worker parsed, its prompt parsed here only if something
// reads it (the /tokenize fallback, the approximate tree), as the whole body parsed here would be.
function requestOf(p: ParsedRequest, raw: Buffer, policy: RequestPolicy, bodies: ChatBodyParser | undefined): GenerationRequest {
  let whole: GenerationRequest | undefined;
  const parsed = (): GenerationRequest => (whole ??= parseGenerationRequest(p.endpoint, raw, policy, bodies));
  const body: Record<string, unknown> = {};
  for (const k of p.keys) {
    if (promptKeys.has(k)) Object.defineProperty(body, k, { enumerable: true, get: () => parsed().body[k] });
    else body[k] = p.top[k];
  }
  return {
    endpoint: p.endpoint,
    model: p.model,
    stream: p.stream,
    streamUsage: p.streamUsage,
    cacheSalt: p.cacheSalt,
    promptTokenIds: p.promptTokenIds,
    body,
    get messages() {
      return p.endpoint === 'chat' ? parsed().messages : undefined;
    },
    get prompt() {
      return p.endpoint === 'completions' ? parsed().prompt : undefined;
    },
  };
}

const isErrorCode = (c: string): c is ErrorCode => (errorCodes as readonly string[]).includes(c);

/** Where a body was parsed, and why there (llmgw_gateway_body_parses_total). */
export type ParsedWhere = { readonly thread: 'worker'; readonly reason: 'long' } | { readonly thread: 'event-loop'; readonly reason: 'short' | 'no-pool' | 'pool-busy' };

/**
 * Parses and checks a body for `endpoint`, as parseGenerationRequest does. A body in shared memory
 * (readBody puts one there from 16 KiB on) is parsed in the worker pool, which reads the same bytes:
 * the event loop then moves bytes and does not parse prompts (a 344 KB chat's first turn took it
 * 2.2 ms), and the worker that tokenizes the prompt next finds it parsed. Parsed here when smaller,
 * without a pool, or when the pool cannot take it; `parsed` hears which.
 */
export async function readRequest(
  endpoint: Endpoint,
  raw: Buffer,
  policy: RequestPolicy,
  o: { readonly pool?: RequestParsePool | undefined; readonly bodies?: ChatBodyParser | undefined; readonly parsed?: ((where: ParsedWhere) => void) | undefined } = {},
): Promise<GenerationRequest> {
  const here = (reason: 'short' | 'no-pool' | 'pool-busy'): GenerationRequest => {
    o.parsed?.({ thread: 'event-loop', reason });
    return parseGenerationRequest(endpoint, raw, policy, o.bodies);
  };
  if (!(raw.buffer instanceof SharedArrayBuffer)) return here('short');
  if (o.pool === undefined) return here('no-pool');
  const r = await o.pool.parse({ endpoint, body: raw, policy });
  if (r.ok) {
    o.parsed?.({ thread: 'worker', reason: 'long' });
    return requestOf(r.request, raw, policy, o.bodies);
  }
  if ('error' in r && isErrorCode(r.error.code)) {
    o.parsed?.({ thread: 'worker', reason: 'long' });
    throw new RequestError(r.error.code, r.error.message, r.error.param);
  }
  return here('pool-busy');
}

/**
 * The body to send upstream: the client's own bytes with `fields` set at the top level. A field the
 * client did not send is written before the closing brace, so the engine parses the same bytes the
 * client sent plus what the gateway adds, and a 400 KB conversation is neither parsed nor written
 * again on the event loop (it cost 3.3 ms a turn); a field the client did send is replaced, which
 * takes writing the whole body anew.
 */
export function forwardedBody(raw: Buffer, body: Readonly<Record<string, unknown>>, fields: Readonly<Record<string, unknown>>): Buffer | string {
  const keys = Object.keys(fields);
  if (keys.length === 0) return raw;
  let end = raw.length - 1;
  while (end > 0 && (raw[end] === 0x20 || raw[end] === 0x0a || raw[end] === 0x0d || raw[end] === 0x09)) end--;
  if (raw[end] !== 0x7d || Object.keys(body).length === 0 || keys.some((k) => Object.hasOwn(body, k))) return JSON.stringify({ ...body, ...fields });
  const added = keys.map((k) => `,${JSON.stringify(k)}:${JSON.stringify(fields[k])}`).join('');
  return Buffer.concat([raw.subarray(0, end), Buffer.from(`${added}}`)]);
}
