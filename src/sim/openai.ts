// Request parsing for the OpenAI and vLLM routes the sim serves. Bodies arrive as unknown JSON and
// are narrowed here, field by field, into plain objects; a bad field becomes an OpenAI error object
// naming the field, as vLLM's validation does, never a crash or a silently ignored value.
import { LlmgwError } from '../errors/index.js';
import { ChatError, chatInputOf, conversationOf, vllmTools, type ChatInput, type ChatMessage } from '../tokenize/index.js';

/** A client error: the HTTP status and OpenAI error type it is answered with. */
export class SimRequestError extends LlmgwError {
  readonly status: number;
  readonly type: string;
  readonly param: string | null;
  constructor(message: string, o: { status?: number; type?: string; param?: string | null } = {}) {
    super('LLMGW_SIM_BAD_REQUEST', message);
    this.status = o.status ?? 400;
    this.type = o.type ?? 'BadRequestError';
    this.param = o.param ?? null;
  }
}

/** The OpenAI error body vLLM answers with. */
export function errorBody(message: string, type: string, status: number, param: string | null = null): { error: { message: string; type: string; param: string | null; code: number } } {
  return { error: { message, type, param, code: status } };
}

type Body = Record<string, unknown>;

/** Narrows a parsed JSON body to an object. */
export function asBody(raw: unknown): Body {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new SimRequestError('the request body is not a JSON object');
  return raw as Body;
}

const optString = (b: Body, k: string): string | undefined => {
  const v = b[k];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw new SimRequestError(`${k}: ${JSON.stringify(v)} is not a string`, { param: k });
  return v;
};

const optBool = (b: Body, k: string, d: boolean): boolean => {
  const v = b[k];
  if (v === undefined || v === null) return d;
  if (typeof v !== 'boolean') throw new SimRequestError(`${k}: ${JSON.stringify(v)} is not true or false`, { param: k });
  return v;
};

const optInt = (b: Body, k: string, min: number): number | undefined => {
  const v = b[k];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min) throw new SimRequestError(`${k}: ${JSON.stringify(v)} is not an integer >= ${min}`, { param: k });
  return v;
};

const optInteger = (b: Body, k: string): number | undefined => {
  const v = b[k];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v)) throw new SimRequestError(`${k}: ${JSON.stringify(v)} is not an integer`, { param: k });
  return v;
};

const optObject = (b: Body, k: string): Readonly<Record<string, unknown>> | undefined => {
  const v = b[k];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'object' || Array.isArray(v)) throw new SimRequestError(`${k}: ${JSON.stringify(v)} is not an object`, { param: k });
  return v as Record<string, unknown>;
};

const tokenIds = (v: unknown, k: string): number[] | undefined => {
  if (!Array.isArray(v)) return undefined;
  if (!v.every((t) => typeof t === 'number' && Number.isInteger(t) && t >= 0)) throw new SimRequestError(`${k}: not a list of token ids (non-negative integers)`, { param: k });
  return v as number[];
};

/** Sampling fields shared by both generation routes. */
export interface GenerationParams {
  readonly model: string | undefined;
  readonly maxTokens: number | undefined;
  readonly stop: readonly string[];
  readonly includeStopStrInOutput: boolean;
  readonly stream: boolean;
  readonly includeUsage: boolean;
  readonly cacheSalt: string | null;
  /** vLLM's request priority: lower is served first; 0 by default. */
  readonly priority: number;
}

function generationParams(b: Body, maxTokensKeys: readonly string[]): GenerationParams {
  const n = optInt(b, 'n', 1);
  if (n !== undefined && n !== 1) throw new SimRequestError(`n: ${n}; the sim generates one choice per request, send n=1 or leave it out`, { param: 'n' });
  const best = optInt(b, 'best_of', 1);
  if (best !== undefined && best !== 1) throw new SimRequestError(`best_of: ${best}; the sim generates one choice per request`, { param: 'best_of' });
  if (b.logprobs !== undefined && b.logprobs !== null && b.logprobs !== false) {
    throw new SimRequestError('logprobs: the sim does not compute log probabilities; leave logprobs out', { param: 'logprobs' });
  }
  let maxTokens: number | undefined;
  for (const k of maxTokensKeys) maxTokens ??= optInt(b, k, 1);
  const rawStop = b.stop;
  let stop: string[] = [];
  if (typeof rawStop === 'string') stop = [rawStop];
  else if (Array.isArray(rawStop) && rawStop.every((s) => typeof s === 'string')) stop = rawStop as string[];
  else if (rawStop !== undefined && rawStop !== null) throw new SimRequestError(`stop: ${JSON.stringify(rawStop)} is not a string or a list of strings`, { param: 'stop' });
  stop = stop.filter((s) => s !== '');
  const stream = optBool(b, 'stream', false);
  const so = optObject(b, 'stream_options');
  if (so !== undefined && !stream) throw new SimRequestError('stream_options: only allowed when stream is true', { param: 'stream_options' });
  const includeUsage = so !== undefined && so.include_usage === true;
  const cacheSalt = optString(b, 'cache_salt') ?? null;
  if (cacheSalt === '') throw new SimRequestError('cache_salt: an empty string; send a non-empty salt or leave it out', { param: 'cache_salt' });
  return {
    model: optString(b, 'model'),
    maxTokens,
    stop,
    includeStopStrInOutput: optBool(b, 'include_stop_str_in_output', false),
    stream,
    includeUsage,
    cacheSalt,
    priority: optInteger(b, 'priority') ?? 0,
  };
}

/** How chat messages are rendered (also the /tokenize chat form). */
export interface ChatRender {
  readonly messages: readonly ChatMessage[];
  readonly addGenerationPrompt: boolean;
  readonly continueFinalMessage: boolean;
  readonly addSpecialTokens: boolean;
  readonly tools: readonly unknown[] | undefined;
  readonly chatTemplate: string | undefined;
  readonly chatTemplateKwargs: Readonly<Record<string, unknown>> | undefined;
  /**
   * The same chat read from the body's bytes as vLLM reads it (tool numbers as Python writes them:
   * 1.0, not 1), for the model's own template; undefined where that reading failed, and the
   * fields above render it and report the error.
   */
  readonly exact: ChatInput | undefined;
}

// Only a chat with tools or tool calls holds numbers JS and Python write apart, so only such a
// chat is read twice.
function holdsToolJson(b: Body): boolean {
  if (Array.isArray(b.tools) && b.tools.length > 0) return true;
  return Array.isArray(b.messages) && b.messages.some((m: unknown) => typeof m === 'object' && m !== null && 'tool_calls' in m);
}

function exactInput(b: Body, bytes: Uint8Array | undefined): ChatInput | undefined {
  if (bytes === undefined || !holdsToolJson(b)) return undefined;
  try {
    return chatInputOf(b, bytes);
  } catch (e) {
    if (e instanceof ChatError) return undefined;
    throw e;
  }
}

function templateInKwargs(kwargs: Readonly<Record<string, unknown>> | undefined): string | undefined {
  const t = kwargs?.chat_template;
  return typeof t === 'string' ? t : undefined;
}

function chatRender(b: Body, bytes: Uint8Array | undefined): ChatRender {
  let messages: ChatMessage[];
  try {
    messages = conversationOf(b.messages, { approximate: true });
  } catch (e) {
    if (e instanceof ChatError) throw new SimRequestError(e.message, { param: e.param });
    throw e;
  }
  const tools = b.tools;
  if (tools !== undefined && tools !== null && !Array.isArray(tools)) throw new SimRequestError('tools: not a list', { param: 'tools' });
  const addGenerationPrompt = optBool(b, 'add_generation_prompt', true);
  const continueFinalMessage = optBool(b, 'continue_final_message', false);
  if (addGenerationPrompt && continueFinalMessage) {
    throw new SimRequestError('Cannot set both `continue_final_message` and `add_generation_prompt` to True.', { param: 'continue_final_message' });
  }
  return {
    messages,
    addGenerationPrompt,
    continueFinalMessage,
    addSpecialTokens: optBool(b, 'add_special_tokens', false),
    tools: Array.isArray(tools) ? vllmTools(tools, { approximate: true }) : undefined,
    // A template given among the kwargs replaces the model's as the chat_template field does (transformers' apply_chat_template).
    chatTemplate: optString(b, 'chat_template') ?? templateInKwargs(optObject(b, 'chat_template_kwargs')),
    chatTemplateKwargs: optObject(b, 'chat_template_kwargs'),
    exact: exactInput(b, bytes),
  };
}

/** A parsed /v1/chat/completions body. */
export interface ChatRequest extends GenerationParams {
  readonly render: ChatRender;
}

/** Parses a chat completions body; with its bytes, its tool JSON is also read as vLLM reads it. */
export function parseChatRequest(raw: unknown, bytes?: Uint8Array): ChatRequest {
  const b = asBody(raw);
  return { ...generationParams(b, ['max_completion_tokens', 'max_tokens']), render: chatRender(b, bytes) };
}

/** A parsed /v1/completions body: text to encode, or token ids as given. */
export interface CompletionRequest extends GenerationParams {
  readonly prompt: { readonly text: string } | { readonly ids: readonly number[] };
  readonly addSpecialTokens: boolean;
}

/** Parses a completions body (one prompt: a string, token ids, or a one-element list of either). */
export function parseCompletionRequest(raw: unknown): CompletionRequest {
  const b = asBody(raw);
  let p = b.prompt;
  if (Array.isArray(p) && p.length === 1 && (typeof p[0] === 'string' || Array.isArray(p[0]))) p = p[0];
  let prompt: CompletionRequest['prompt'];
  if (typeof p === 'string') prompt = { text: p };
  else {
    const ids = tokenIds(p, 'prompt');
    if (ids === undefined || ids.length === 0) {
      throw new SimRequestError('prompt: send one prompt, a string or a non-empty list of token ids (the sim serves one prompt per request)', { param: 'prompt' });
    }
    prompt = { ids };
  }
  if (optBool(b, 'echo', false)) throw new SimRequestError('echo: not supported by the sim; leave it out', { param: 'echo' });
  return { ...generationParams(b, ['max_tokens']), prompt, addSpecialTokens: optBool(b, 'add_special_tokens', true) };
}

/** A parsed /tokenize body: vLLM's prompt form or chat form (chosen by `messages`). */
export type TokenizeRequest =
  | { readonly kind: 'prompt'; readonly model: string | undefined; readonly prompt: string; readonly addSpecialTokens: boolean; readonly returnTokenStrs: boolean }
  | { readonly kind: 'chat'; readonly model: string | undefined; readonly render: ChatRender; readonly returnTokenStrs: boolean };

/** Parses a /tokenize body; with its bytes, a chat's tool JSON is also read as vLLM reads it. */
export function parseTokenizeRequest(raw: unknown, bytes?: Uint8Array): TokenizeRequest {
  const b = asBody(raw);
  const model = optString(b, 'model');
  const returnTokenStrs = optBool(b, 'return_token_strs', false);
  if (b.messages !== undefined) return { kind: 'chat', model, render: chatRender(b, bytes), returnTokenStrs };
  const prompt = optString(b, 'prompt');
  if (prompt === undefined) throw new SimRequestError('prompt: a string is required (or send messages for the chat form)', { param: 'prompt' });
  return { kind: 'prompt', model, prompt, addSpecialTokens: optBool(b, 'add_special_tokens', true), returnTokenStrs };
}

/** Parses a /detokenize body. */
export function parseDetokenizeRequest(raw: unknown): { readonly model: string | undefined; readonly tokens: readonly number[] } {
  const b = asBody(raw);
  const tokens = tokenIds(b.tokens, 'tokens');
  if (tokens === undefined) throw new SimRequestError('tokens: a list of token ids is required', { param: 'tokens' });
  return { model: optString(b, 'model'), tokens };
}

/**
 * Finds stop strings in generated text. While generating it holds back the tail that could still
 * become a stop string, so a stream never shows half of one (vLLM does the same).
 */
export class StopMatcher {
  readonly #stops: readonly string[];
  readonly #include: boolean;
  readonly #hold: number;
  #text = '';
  #sent = 0;
  #stopped = false;

  constructor(stops: readonly string[], includeStopStr: boolean) {
    this.#stops = stops;
    this.#include = includeStopStr;
    this.#hold = stops.reduce((m, s) => Math.max(m, s.length - 1), 0);
  }

  /** Adds a token's text; returns the text now safe to send and whether a stop string ended generation. */
  push(piece: string): { delta: string; stopped: boolean } {
    if (this.#stopped) return { delta: '', stopped: true };
    const searchFrom = Math.max(0, this.#text.length - this.#hold);
    this.#text += piece;
    let cut = -1;
    let len = 0;
    for (const s of this.#stops) {
      const at = this.#text.indexOf(s, searchFrom);
      if (at >= 0 && (cut < 0 || at < cut)) {
        cut = at;
        len = s.length;
      }
    }
    if (cut >= 0) {
      this.#stopped = true;
      this.#text = this.#text.slice(0, this.#include ? cut + len : cut);
      return { delta: this.#take(this.#text.length), stopped: true };
    }
    return { delta: this.#take(Math.max(this.#sent, this.#text.length - this.#hold)), stopped: false };
  }

  /** Everything not yet sent (at the end of generation). */
  flush(): string {
    return this.#take(this.#text.length);
  }

  get text(): string {
    return this.#text;
  }

  #take(upTo: number): string {
    const d = this.#text.slice(this.#sent, upTo);
    this.#sent = Math.max(this.#sent, upTo);
    return d;
  }
}
