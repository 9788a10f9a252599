// Reading and checking a client's request body: bounded in size while it arrives, then narrowed from
// `unknown` field by field, so a wrong type is a 400 naming the field, never a crash further in.
import type { IncomingMessage } from 'node:http';
import { LlmgwError } from '../errors/index.js';
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

/** Reads the body up to `maxBytes`; throws LLMGW_BODY_TOO_LARGE as soon as it is known to be bigger. */
export async function readBody(req: IncomingMessage, maxBytes: number): Promise<Buffer> {
  const tooLarge = (n: number | string): LlmgwError =>
    new LlmgwError(
      'LLMGW_BODY_TOO_LARGE',
      `request body of ${n} bytes is over the gateway's limit of ${maxBytes}; send less or raise gateway.max_body_bytes`,
    );
  const declared = Number(req.headers['content-length'] ?? NaN);
  if (declared > maxBytes) throw tooLarge(declared);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    // Stop at the limit instead of buffering whatever a client chooses to send.
    if (size > maxBytes) throw tooLarge(`more than ${maxBytes}`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks, size);
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

/** Parses and checks a body for `endpoint`; throws RequestError (400) naming the field at fault. */
export function parseGenerationRequest(endpoint: Endpoint, raw: Buffer): GenerationRequest {
  let body: unknown;
  try {
    body = JSON.parse(raw.toString('utf8'));
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    throw new RequestError('LLMGW_BAD_JSON', `request body is not valid JSON (${why})`, null, { cause: e });
  }
  if (!isRecord(body)) throw new RequestError('LLMGW_BAD_JSON', 'request body must be a JSON object');
  const model = body.model;
  if (typeof model !== 'string' || model === '') throw bad('model', 'model: must name a model, see GET /v1/models');
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
