// Reading and checking a client's request body: bounded in size while it arrives, then narrowed from
// `unknown` field by field, so a wrong type is a 400 naming the field, never a crash further in.
import type { IncomingMessage } from 'node:http';
import { hasCode, LlmgwError } from '../errors/index.js';
import { ChatBodyParser, parseBoundedJson } from '../limits/index.js';
import { RequestError } from './errors.js';

/** Which OpenAI endpoint a body was sent to. */
export type Endpoint = 'chat' | 'completions';

/** A checked generation request; `body` is forwarded to the engine as the client wrote it. */
export interface GenerationRequest {
  readonly endpoint: Endpoint;
  readonly model: string;
  readonly stream: boolean;
  /** The client asked for the usage chunk at the end of a stream. */
  readonly streamUsage: boolean;
  readonly cacheSalt: string | undefined;
  /** Chat: the messages (and the fields /tokenize's chat form takes); completions: the prompt. */
  readonly messages: readonly unknown[] | undefined;
  readonly prompt: string | undefined;
  /** A completions prompt given as one list of token ids: the engine hashes exactly these. */
  readonly promptTokenIds: readonly number[] | undefined;
  readonly body: Readonly<Record<string, unknown>>;
}

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
export function readBody(req: IncomingMessage, maxBytes: number, timeoutMs = Infinity): Promise<Buffer> {
  const tooLarge = (n: number | string): LlmgwError =>
    new LlmgwError(
      'LLMGW_BODY_TOO_LARGE',
      `request body of ${n} bytes is over the gateway's limit of ${maxBytes}; send less or raise gateway.max_body_bytes`,
    );
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

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

const bad = (param: string, message: string): RequestError => new RequestError('LLMGW_BAD_REQUEST', message, param);

function optional<T>(body: Record<string, unknown>, key: string, is: (v: unknown) => v is T, want: string): T | undefined {
  const v = body[key];
  if (v === undefined || v === null) return undefined;
  if (!is(v)) throw bad(key, `${key}: ${JSON.stringify(v).slice(0, 80)} is not ${want}`);
  return v;
}

const isBool = (v: unknown): v is boolean => typeof v === 'boolean';
const isString = (v: unknown): v is string => typeof v === 'string';
const isPositiveInt = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v > 0;
const isNumber = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);
const isTokenList = (v: unknown): v is number[] => Array.isArray(v) && v.every((t: unknown) => typeof t === 'number' && Number.isInteger(t) && t >= 0);

function checkMessages(v: unknown): readonly unknown[] {
  if (!Array.isArray(v) || v.length === 0) throw bad('messages', 'messages: must be a non-empty list of { role, content }');
  v.forEach((m: unknown, i) => {
    if (!isRecord(m)) throw bad(`messages[${i}]`, `messages[${i}]: ${JSON.stringify(m).slice(0, 80)} is not an object`);
    if (typeof m.role !== 'string') throw bad(`messages[${i}].role`, `messages[${i}].role: must be a string such as "user"`);
    const c = m.content;
    if (!(c === undefined || c === null || typeof c === 'string' || Array.isArray(c))) {
      throw bad(`messages[${i}].content`, `messages[${i}].content: must be a string or a list of content parts`);
    }
  });
  return v;
}

/** What a request body may be: how deep its JSON nests, and which models take a client's chat template. */
export interface RequestPolicy {
  readonly maxJsonDepth: number;
  /** Models whose engines were started to trust a request's chat template (gateway.trust_request_chat_template). */
  readonly trustChatTemplate: readonly string[];
}

/** Depth 64 holds any real chat request (tool schemas included) with room to spare; nothing is trusted. */
export const defaultRequestPolicy: RequestPolicy = Object.freeze({ maxJsonDepth: 64, trustChatTemplate: Object.freeze([]) });

/**
 * Parses a client's JSON body with its depth bounded; throws RequestError (400) naming the limit.
 * With `bodies`, a chat's next turn parses only the messages it added to a body seen before: the
 * whole of a 400 KB conversation took the event loop 3.6 ms every turn.
 */
export function parseRequestJson(raw: Buffer, maxDepth: number, bodies?: ChatBodyParser): unknown {
  try {
    // Size was bounded while the body was read (gateway.max_body_bytes); depth is bounded here.
    return bodies?.parse(raw, 'request body') ?? parseBoundedJson(raw, { maxDepth, maxBytes: raw.length }, 'request body');
  } catch (e) {
    if (hasCode(e, 'LLMGW_JSON_LIMIT')) {
      throw new RequestError('LLMGW_BAD_REQUEST', `${e.message} (gateway.max_json_depth); flatten the request`, null, { cause: e });
    }
    if (hasCode(e, 'LLMGW_BAD_JSON')) throw new RequestError('LLMGW_BAD_JSON', e.message, null, { cause: e });
    throw e;
  }
}

// A client's template runs inside the engine: vLLM refuses one unless started with
// --trust-request-chat-template, because an 81-byte template with a 3000 x 3000 loop stalled an
// engine for a minute while the gateway kept routing innocent requests to it.
function refuseUntrustedTemplate(body: Record<string, unknown>, model: string, policy: RequestPolicy): void {
  if (policy.trustChatTemplate.includes(model)) return;
  const kwargs = body.chat_template_kwargs;
  const param =
    body.chat_template !== undefined && body.chat_template !== null
      ? 'chat_template'
      : isRecord(kwargs) && kwargs.chat_template !== undefined && kwargs.chat_template !== null
        ? 'chat_template_kwargs.chat_template'
        : undefined;
  if (param === undefined) return;
  throw bad(
    param,
    `${param}: model "${model}" does not accept a chat template from the request; leave it out, or list the model in gateway.trust_request_chat_template and start its engine with --trust-request-chat-template`,
  );
}

// Bodies kept for their next turn: 32 MiB holds about 80 conversations of 100k tokens.
const keptBodyBytes = 32 * 1024 * 1024;

/** The gateway's kept request bodies, under its size and depth limits, for parseGenerationRequest. */
export function keptBodies(limits: { readonly maxJsonDepth: number; readonly maxBodyBytes: number }): ChatBodyParser {
  return new ChatBodyParser({ limits: { maxDepth: limits.maxJsonDepth, maxBytes: limits.maxBodyBytes }, minBytes: sharedFrom, maxBytes: keptBodyBytes });
}

/** Parses and checks a body for `endpoint`; throws RequestError (400) naming the field at fault. */
export function parseGenerationRequest(endpoint: Endpoint, raw: Buffer, policy: RequestPolicy = defaultRequestPolicy, bodies?: ChatBodyParser): GenerationRequest {
  const body = parseRequestJson(raw, policy.maxJsonDepth, bodies);
  if (!isRecord(body)) throw new RequestError('LLMGW_BAD_JSON', 'request body must be a JSON object');
  const model = body.model;
  if (typeof model !== 'string' || model === '') throw bad('model', 'model: must name a model, see GET /v1/models');
  refuseUntrustedTemplate(body, model, policy);
  const stream = optional(body, 'stream', isBool, 'true or false') ?? false;
  const so = optional(body, 'stream_options', isRecord, 'an object');
  const streamUsage = so?.include_usage === true;
  const cacheSalt = optional(body, 'cache_salt', isString, 'a string');
  optional(body, 'max_tokens', isPositiveInt, 'a positive whole number');
  optional(body, 'max_completion_tokens', isPositiveInt, 'a positive whole number');
  optional(body, 'n', isPositiveInt, 'a positive whole number');
  optional(body, 'temperature', isNumber, 'a number');
  optional(body, 'top_p', isNumber, 'a number');
  if (endpoint === 'chat') {
    const messages = checkMessages(body.messages);
    return { endpoint, model, stream, streamUsage, cacheSalt, messages, prompt: undefined, promptTokenIds: undefined, body };
  }
  const p = body.prompt;
  const ok = typeof p === 'string' || isTokenList(p) || (Array.isArray(p) && p.length > 0 && p.every((x) => isString(x) || isTokenList(x)));
  if (!ok) throw bad('prompt', 'prompt: must be a string, a list of strings, or token ids');
  // Only a single prompt is routed by its content; a batch of prompts goes by load.
  return {
    endpoint,
    model,
    stream,
    streamUsage,
    cacheSalt,
    messages: undefined,
    prompt: typeof p === 'string' ? p : undefined,
    promptTokenIds: isTokenList(p) && p.length > 0 ? p : undefined,
    body,
  };
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
