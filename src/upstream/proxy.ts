// Forwarding one request to one engine and passing its answer through. SSE events go to the client
// as each one completes (nothing is held back but a partial event), the client leaving aborts the
// engine's request, and an engine that dies mid-stream is reported to the caller, which continues the
// answer elsewhere or ends the client's stream with an error event.
// Engines on plain http:// (every engine the agent starts) are reached through our UpstreamPool,
// which costs a request about half of what undici's request() does (with a node:http server in
// front, under wrk: 0.04-0.08 ms of CPU a request against 0.066-0.17); an external replica on
// https:// goes through undici.
import type { ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import { request } from 'undici';
import { LlmgwError, UpstreamError } from '../errors/index.js';
import { upstreamAnswerTooLargeCode, upstreamHeadTooLargeCode, upstreamProtocolCode, type UpstreamPool } from './client.js';
import { eventData, isErrorEvent } from './migration.js';
import { EventSplitter } from './sse-events.js';

/** Token counts an engine reported for a request. */
export interface Usage {
  readonly promptTokens: number;
  readonly completionTokens: number;
  /** usage.prompt_tokens_details.cached_tokens; undefined when the engine did not say. */
  readonly cachedTokens: number | undefined;
}

/** An engine's answer body, read one way: iterated, text() or dump() (UpstreamPool's and undici's satisfy it). */
export interface UpstreamBody extends AsyncIterable<string | Buffer> {
  text(): Promise<string>;
  dump(): Promise<void>;
  setEncoding(encoding: 'utf8'): unknown;
}

/** The engine answered with headers: its status and a body still to read. */
export interface UpstreamResponse {
  readonly status: number;
  readonly contentType: string;
  readonly body: UpstreamBody;
}

/** How the gateway reaches engines: its pool for http://, undici for anything else. */
export interface UpstreamClients {
  readonly pool: UpstreamPool;
  readonly dispatcher: Dispatcher;
}

/** Where to send: the replica's base URL, its key, the path. */
export interface UpstreamTarget {
  readonly replica: string;
  readonly url: URL;
  readonly apiKey: string | undefined;
}

// undici's codes for a connection that never carried the request: safe to send elsewhere.
const connectFailures = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'UND_ERR_SOCKET', 'UND_ERR_CONNECT_TIMEOUT', 'ENOTFOUND', 'EHOSTUNREACH']);

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function codeOf(e: unknown): string {
  if (!isRecord(e)) return '';
  return typeof e.code === 'string' ? e.code : '';
}

/**
 * POSTs `body` to `path` (absolute, as the engine's API names it) on the engine and returns once it
 * answered with headers; throws UpstreamError otherwise.
 */
export async function sendUpstream(
  t: UpstreamTarget,
  path: string,
  body: string | Buffer,
  o: { clients: UpstreamClients; signal: AbortSignal; headersTimeoutMs: number; idleTimeoutMs: number; requestId?: string | undefined },
): Promise<UpstreamResponse> {
  o.signal.throwIfAborted();
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  // The two hops of a disaggregated request carry one id: NIXL's prefill keeps the blocks under it.
  if (o.requestId !== undefined) headers['x-request-id'] = o.requestId;
  if (t.apiKey !== undefined) headers.authorization = `Bearer ${t.apiKey}`;
  try {
    // The pool takes the replica's own URL as the origin: resolving the path against it on every
    // request parsed a URL the path's being absolute makes needless.
    if (t.url.protocol === 'http:') {
      const res = await o.clients.pool.request({
        origin: t.url,
        path,
        headers,
        body,
        signal: o.signal,
        headersTimeoutMs: o.headersTimeoutMs,
        bodyTimeoutMs: o.idleTimeoutMs,
      });
      return { status: res.status, contentType: res.headers['content-type'] ?? 'application/json', body: res.body };
    }
    const res = await request(new URL(path, t.url), {
      method: 'POST',
      dispatcher: o.clients.dispatcher,
      headers,
      body,
      signal: o.signal,
      headersTimeout: o.headersTimeoutMs,
      bodyTimeout: o.idleTimeoutMs,
    });
    const ct = res.headers['content-type'];
    return { status: res.statusCode, contentType: typeof ct === 'string' ? ct : 'application/json', body: res.body };
  } catch (e) {
    const code = codeOf(e);
    const bound = boundBreach(t.replica, e);
    if (bound !== undefined) throw bound;
    if (code === 'UND_ERR_HEADERS_TIMEOUT') {
      throw new UpstreamError(
        'LLMGW_UPSTREAM_TIMEOUT',
        t.replica,
        `replica ${t.replica} sent no answer within ${o.headersTimeoutMs} ms; raise gateway.upstream.headers_timeout_ms if its prompts are that long`,
        { cause: e },
      );
    }
    throw new UpstreamError(
      'LLMGW_UPSTREAM',
      t.replica,
      `replica ${t.replica} could not be reached (${code || (e instanceof Error ? e.message : 'error')})`,
      { cause: e },
    );
  }
}

// An answer that broke one of the bounds on what an engine may send, as the UpstreamError that names
// it. The engine's own bytes stay out of the message, which goes to the client: on a reused socket
// they could be another client's answer. The gateway's log has them, as the error's cause.
function boundBreach(replica: string, e: unknown): UpstreamError | undefined {
  const code = codeOf(e);
  const o = { cause: e };
  if (code === upstreamProtocolCode) {
    return new UpstreamError(upstreamProtocolCode, replica, `replica ${replica} answered something that is not well-formed HTTP/1.1; the gateway's log says what`, o);
  }
  if (code === upstreamHeadTooLargeCode || code === 'UND_ERR_HEADERS_OVERFLOW') {
    return new UpstreamError('LLMGW_UPSTREAM_HEAD_TOO_LARGE', replica, `replica ${replica} sent response headers over gateway.upstream.max_head_bytes`, o);
  }
  if (code === upstreamAnswerTooLargeCode || code === 'UND_ERR_RES_EXCEEDED_MAX_SIZE') {
    return new UpstreamError(
      'LLMGW_UPSTREAM_ANSWER_TOO_LARGE',
      replica,
      `replica ${replica} sent an answer over gateway.upstream.max_answer_bytes; raise it if answers that long are expected`,
      o,
    );
  }
  if (code === 'LLMGW_UPSTREAM_EVENT_TOO_LARGE') {
    return new UpstreamError('LLMGW_UPSTREAM_EVENT_TOO_LARGE', replica, `replica ${replica} sent an SSE event over gateway.upstream.max_event_bytes`, o);
  }
  if (code === 'UND_ERR_BODY_TIMEOUT') {
    return new UpstreamError('LLMGW_UPSTREAM_STALLED', replica, `replica ${replica} went silent in the middle of its answer for gateway.upstream.idle_timeout_ms`, o);
  }
  return undefined;
}

/**
 * What a failure while reading an answer's body is to the client: a bound the engine broke, or the
 * engine breaking off (truncated chunks, a content-length longer than what came, a reset). Never
 * a 500: the gateway did nothing wrong.
 */
export function answerFailure(replica: string, e: unknown): UpstreamError {
  if (e instanceof UpstreamError) return e;
  return boundBreach(replica, e) ?? new UpstreamError('LLMGW_UPSTREAM', replica, `replica ${replica} broke off its answer (${codeOf(e) || 'error'})`, { cause: e });
}

/** A whole (not streamed) answer as text; a body that breaks is thrown as answerFailure says. */
export async function answerText(up: UpstreamResponse, replica: string): Promise<string> {
  try {
    return await up.body.text();
  } catch (e) {
    throw answerFailure(replica, e);
  }
}

/** True when a failure happened before the engine could have started the request: another replica may take it. */
export const isRetryable = (e: unknown): boolean =>
  e instanceof UpstreamError && e.code === 'LLMGW_UPSTREAM' && connectFailures.has(codeOf(e.cause));

/** Reads `usage` out of an engine's JSON answer or usage chunk. */
export function usageOf(v: unknown): Usage | undefined {
  const u = isRecord(v) ? v.usage : undefined;
  if (!isRecord(u) || typeof u.prompt_tokens !== 'number') return undefined;
  const c = u.completion_tokens;
  const d = u.prompt_tokens_details;
  const cached = isRecord(d) ? d.cached_tokens : undefined;
  return { promptTokens: u.prompt_tokens, completionTokens: typeof c === 'number' ? c : 0, cachedTokens: typeof cached === 'number' ? cached : undefined };
}

/** What the engine said of its answer, for the trace: its id, the model that wrote it, why each choice ended. */
export interface ResponseFacts {
  readonly id: string | undefined;
  readonly model: string | undefined;
  readonly finishReasons: readonly string[];
}

/** Reads the answer's facts out of an engine's JSON answer or one of its stream's chunks. */
export function responseOf(v: unknown, before?: ResponseFacts): ResponseFacts {
  const r = isRecord(v) ? v : {};
  const reasons = Array.isArray(r.choices) ? r.choices.flatMap((c) => (isRecord(c) && typeof c.finish_reason === 'string' ? [c.finish_reason] : [])) : [];
  return {
    id: typeof r.id === 'string' ? r.id : before?.id,
    model: typeof r.model === 'string' ? r.model : before?.model,
    finishReasons: [...(before?.finishReasons ?? []), ...reasons],
  };
}

// The chunk that ends a choice; only it and the usage chunk are parsed, never the ones between.
const finishing = /"finish_reason":\s*"/;

function writeOrWait(res: ServerResponse, chunk: string | Buffer): Promise<void> | undefined {
  if (res.write(chunk)) return undefined;
  // The client reads slower than the engine writes: stop pulling from the engine until it catches up.
  return new Promise((resolve) => {
    const done = (): void => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}

/** What a finished stream did. */
export interface StreamOutcome {
  readonly usage: Usage | undefined;
  /** Id, model and finish reasons from the chunks that carry them. */
  readonly response: ResponseFacts | undefined;
  /** The engine failed after the client got part of the answer; the client's stream is still open. */
  readonly failed: Error | undefined;
  /** The engine's own error event, when that is how it failed (held back from the client). */
  readonly errorEvent: string | undefined;
  /** The answer's events as they were passed on, when asked for and no longer than asked. */
  readonly answer: string | undefined;
  /** What was held back to be written last (the `[DONE]` event, when asked to hold it). */
  readonly tail: string;
}

/** Writes an engine's chat events in another protocol (apis/ ApiTurn satisfies it). */
export interface EventTranslator {
  /** One event's parsed data (undefined for [DONE]) as the client's events. */
  event(data: unknown): string;
  /** The client's event for an engine that failed mid-stream. */
  failure(message: string): string;
}

/** Sees every event on its way to the client: returns what to send instead, or undefined to drop it. */
export interface EventSplice {
  pass(event: string): string | undefined;
}

/** The error event that ends a client's stream the engine broke off, in OpenAI's shape. */
export function streamErrorEvent(message: string, code = 'LLMGW_UPSTREAM'): string {
  // The code as the gateway's error bodies write it (LLMGW_UPSTREAM_STALLED: upstream_stalled).
  const err = { message, type: 'server_error', param: null, code: code.replace(/^LLMGW_/, '').toLowerCase() };
  return `data: ${JSON.stringify({ error: err })}\n\n`;
}

/**
 * Pipes an engine's SSE body to the client event by event. `hideUsage` drops the usage-only chunk
 * the gateway asked for on the client's behalf (it did not ask for it and may not expect it);
 * `splice` sees each event first (a migrated stream's seam), then `translate` writes it in the
 * client's protocol instead of as it came. An engine that breaks off (its connection lost or
 * silent, or an error event of its own) leaves the client's stream open for the caller to continue
 * or end.
 */
export async function pipeEvents(
  up: UpstreamResponse,
  res: ServerResponse,
  o: {
    /** The replica answering, named in a failure. */
    replica: string;
    /** The longest SSE event accepted (gateway.upstream.max_event_bytes). */
    maxEventChars: number;
    hideUsage: boolean;
    onFirstByte: () => void;
    keepAnswerChars?: number;
    splice?: EventSplice | undefined;
    translate?: EventTranslator | undefined;
    holdDone?: boolean;
  },
): Promise<StreamOutcome> {
  let usage: Usage | undefined;
  let response: ResponseFacts | undefined;
  let tail = '';
  const splitter = new EventSplitter(o.maxEventChars);
  let first = true;
  // The events are kept by reference (joined once at the end) for the pool to read the answer
  // from; nothing is parsed here for it.
  const kept: string[] = [];
  let keptChars = 0;
  let keeping = (o.keepAnswerChars ?? 0) > 0;
  try {
    up.body.setEncoding('utf8');
    for await (const chunk of up.body as AsyncIterable<string>) {
      if (first) {
        first = false;
        o.onFirstByte();
      }
      if (res.destroyed) break;
      let out = '';
      for (const whole of splitter.push(chunk)) {
        let event: string | undefined = whole;
        const hasUsage = event.includes('"usage"');
        if (hasUsage || finishing.test(event)) {
          const parsed = eventData(event);
          response = responseOf(parsed, response);
          const u = hasUsage ? usageOf(parsed) : undefined;
          if (u !== undefined) usage = u;
          const choices = isRecord(parsed) ? parsed.choices : undefined;
          if (o.hideUsage && u !== undefined && Array.isArray(choices) && choices.length === 0) continue;
        }
        // A key "error" cannot occur inside a JSON string (its quotes would be escaped): only an
        // engine's error event has it, and only those are parsed for it.
        if (event.includes('"error"') && isErrorEvent(eventData(event))) {
          if (out !== '') await writeOrWait(res, out);
          const failed = new LlmgwError('LLMGW_UPSTREAM', `the engine sent an error event mid-stream: ${event.slice(0, 300).trim()}`);
          return { usage, response, failed, errorEvent: event, answer: undefined, tail: '' };
        }
        if (o.splice !== undefined) event = o.splice.pass(event);
        if (event === undefined) continue;
        // The end of the answer waits for the caller (the ledger's commit): a client that saw it has been accounted.
        if (o.holdDone === true && /^data:\s*\[DONE\]\s*$/.test(event)) {
          tail += o.translate === undefined ? event : o.translate.event(undefined);
          continue;
        }
        out += o.translate === undefined ? event : o.translate.event(eventData(event));
        if (keeping) {
          keptChars += event.length;
          keeping = keptChars <= (o.keepAnswerChars ?? 0);
          if (keeping) kept.push(event);
          // Past the bound nothing is prepared from this answer: let go of what was kept.
          else kept.length = 0;
        }
      }
      if (out !== '') await writeOrWait(res, out);
    }
    const rest = splitter.rest();
    if (rest !== '' && !res.destroyed && o.translate === undefined) res.write(rest);
    return { usage, response, failed: undefined, errorEvent: undefined, answer: keeping ? kept.join('') : undefined, tail };
  } catch (e) {
    // The engine died, went silent or broke a bound mid-answer (leaving the for-await closed its
    // socket). Headers are sent, so the status cannot change: the caller continues the answer
    // elsewhere or ends the stream with an error event naming what happened.
    return { usage, response, failed: answerFailure(o.replica, e), errorEvent: undefined, answer: undefined, tail: '' };
  }
}
