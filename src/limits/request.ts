// Checking a client's generation request body: parsed with its depth bounded, then narrowed from
// `unknown` field by field, so a wrong type is a 400 naming the field, never a crash further in.
// Here, below the gateway and the workers, because both run it: the gateway on the event loop for
// a short body, a worker for one in shared memory (the gateway's readRequest).
import { hasCode, RequestError } from '../errors/index.js';
import { parseBoundedJson } from './json.js';
import type { ChatBodyParser } from './json-extend.js';

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
  readonly promptTokenIds: ArrayLike<number> | undefined;
  readonly body: Readonly<Record<string, unknown>>;
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

/** The fields that hold a prompt, the bulk of a long request: left in the worker that parsed it. */
export const promptKeys: ReadonlySet<string> = new Set(['messages', 'prompt']);

/**
 * A request parsed and checked in a worker, as the event loop gets it: every field but the
 * prompt's (`messages`, `prompt`), and the body's top-level keys in their order.
 */
export interface ParsedRequest {
  readonly endpoint: Endpoint;
  readonly model: string;
  readonly stream: boolean;
  readonly streamUsage: boolean;
  readonly cacheSalt: string | undefined;
  /** In a typed array: a list of 100k numbers took the event loop 2.4 ms to take from the worker and check. */
  readonly promptTokenIds: Uint32Array | undefined;
  readonly keys: readonly string[];
  readonly top: Readonly<Record<string, unknown>>;
}

/** Whether a value that crossed from a worker is a ParsedRequest. */
export function isParsedRequest(v: unknown): v is ParsedRequest {
  if (!isRecord(v)) return false;
  const ids = v.promptTokenIds;
  return (
    (v.endpoint === 'chat' || v.endpoint === 'completions') &&
    typeof v.model === 'string' &&
    typeof v.stream === 'boolean' &&
    typeof v.streamUsage === 'boolean' &&
    (v.cacheSalt === undefined || typeof v.cacheSalt === 'string') &&
    (ids === undefined || ids instanceof Uint32Array) &&
    Array.isArray(v.keys) &&
    v.keys.every(isString) &&
    isRecord(v.top)
  );
}

/** One body for a worker to parse and check under the gateway's policy. */
export interface ParseTask {
  readonly endpoint: Endpoint;
  readonly body: Uint8Array;
  readonly policy: RequestPolicy;
}

/** A worker's answer: the request, the client's error (a 400), or why it could not say (busy, closed). */
export type ParseAnswer =
  | { readonly ok: true; readonly request: ParsedRequest }
  | { readonly ok: false; readonly error: { readonly code: string; readonly message: string; readonly param: string | null } }
  | { readonly ok: false; readonly reason: string };

/** The worker's side: a request as it crosses to the event loop, its prompt left behind. */
export function parsedRequestOf(g: GenerationRequest): ParsedRequest {
  const keys = Object.keys(g.body);
  const top: Record<string, unknown> = {};
  for (const k of keys) if (!promptKeys.has(k)) top[k] = g.body[k];
  const ids = g.promptTokenIds === undefined ? undefined : Uint32Array.from(g.promptTokenIds);
  return { endpoint: g.endpoint, model: g.model, stream: g.stream, streamUsage: g.streamUsage, cacheSalt: g.cacheSalt, promptTokenIds: ids, keys, top };
}
