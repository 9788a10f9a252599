// Anthropic's Messages API (POST /v1/messages and /v1/messages/count_tokens) served as a chat:
// system, content blocks, tool_use and tool_result become chat messages and tool calls, and the
// engine's chat answer is written back as a Message or as Anthropic's event sequence. Usage is
// Anthropic's: input_tokens counts only the prompt tokens the engine had to compute, the rest are
// cache_read_input_tokens.
import { randomBytes } from 'node:crypto';
import { LlmgwError } from '../errors/index.js';
import { chatAnswerOf, chatDeltasOf, sseEvent, type ChatUsage } from './chat-answer.js';
import { badField, Fields } from './fields.js';
import type { ApiError, ApiTurn, ClientApi } from './turn.js';

type Message = Record<string, unknown>;

const newId = (prefix: string): string => `${prefix}_${randomBytes(12).toString('hex')}`;

const countFields = ['model', 'messages', 'system', 'tools', 'tool_choice', 'thinking'];
const requestFields = new Set([...countFields, 'max_tokens', 'stop_sequences', 'stream', 'temperature', 'top_p', 'top_k', 'metadata', 'service_tier']);
// cache_control marks where Anthropic caches a prefix; vLLM caches every prefix by itself.
const textBlockFields = new Set(['type', 'text', 'cache_control', 'citations']);

function textOfBlocks(v: unknown, at: string): string | { type: 'text'; text: string }[] {
  if (typeof v === 'string') return v;
  if (!Array.isArray(v)) throw badField(at, 'is not a string or a list of content blocks');
  const parts = v.map((b: unknown, i) => {
    const f = Fields.of(b, `${at}[${i}]`);
    if (f.needString('type') !== 'text') throw badField(f.path('type'), `"${f.string('type')}" blocks are not supported here (text only)`);
    f.only(textBlockFields, 'a text block');
    return { type: 'text' as const, text: f.needString('text') };
  });
  const first = parts[0];
  return parts.length === 1 && first !== undefined ? first.text : parts;
}

function userMessages(content: unknown, at: string): Message[] {
  if (typeof content === 'string') return [{ role: 'user', content }];
  if (!Array.isArray(content)) throw badField(at, 'is not a string or a list of content blocks');
  // Tool results answer the previous assistant turn's calls: they come first, as chat tool messages,
  // and the user's own text after them.
  const tools: Message[] = [];
  const texts: { type: 'text'; text: string }[] = [];
  content.forEach((b: unknown, i) => {
    const f = Fields.of(b, `${at}[${i}]`);
    const type = f.needString('type');
    if (type === 'text') {
      f.only(textBlockFields, 'a text block');
      texts.push({ type: 'text', text: f.needString('text') });
    } else if (type === 'tool_result') {
      f.only(new Set(['type', 'tool_use_id', 'content', 'is_error', 'cache_control']), 'a tool_result block');
      f.bool('is_error');
      tools.push({ role: 'tool', tool_call_id: f.needString('tool_use_id'), content: f.has('content') ? textOfBlocks(f.body.content, f.path('content')) : '' });
    } else throw badField(f.path('type'), `"${type}" blocks are not supported by this gateway in user turns (text, tool_result)`);
  });
  const first = texts[0];
  if (first === undefined) return tools;
  return [...tools, { role: 'user', content: texts.length === 1 ? first.text : texts }];
}

function assistantMessage(content: unknown, at: string): Message {
  if (typeof content === 'string') return { role: 'assistant', content };
  if (!Array.isArray(content)) throw badField(at, 'is not a string or a list of content blocks');
  const texts: string[] = [];
  const reasoning: string[] = [];
  const calls: Message[] = [];
  content.forEach((b: unknown, i) => {
    const f = Fields.of(b, `${at}[${i}]`);
    const type = f.needString('type');
    if (type === 'text') {
      f.only(textBlockFields, 'a text block');
      texts.push(f.needString('text'));
    } else if (type === 'thinking') reasoning.push(f.needString('thinking'));
    else if (type === 'tool_use') {
      f.only(new Set(['type', 'id', 'name', 'input', 'cache_control']), 'a tool_use block');
      const input = f.object('input')?.body ?? {};
      calls.push({ id: f.needString('id'), type: 'function', function: { name: f.needString('name'), arguments: JSON.stringify(input) } });
    } else throw badField(f.path('type'), `"${type}" blocks are not supported by this gateway in assistant turns (text, thinking, tool_use)`);
  });
  const m: Message = { role: 'assistant', content: texts.length === 0 && calls.length > 0 ? null : texts.join('') };
  if (reasoning.length > 0) m.reasoning = reasoning.join('\n');
  if (calls.length > 0) m.tool_calls = calls;
  return m;
}

function chatMessages(f: Fields): Message[] {
  const messages = f.list('messages');
  if (messages === undefined || messages.length === 0) throw badField('messages', 'is required: a non-empty list of { role, content }');
  const out: Message[] = [];
  if (f.has('system')) out.push({ role: 'system', content: textOfBlocks(f.body.system, 'system') });
  messages.forEach((m: unknown, i) => {
    const mf = Fields.of(m, `messages[${i}]`).only(new Set(['role', 'content']), 'a message');
    const role = mf.oneOf('role', ['user', 'assistant'] as const);
    if (role === undefined) throw badField(mf.path('role'), 'is required ("user" or "assistant")');
    if (role === 'user') out.push(...userMessages(mf.body.content, mf.path('content')));
    else out.push(assistantMessage(mf.body.content, mf.path('content')));
  });
  return out;
}

function chatTools(tools: readonly unknown[]): Message[] {
  return tools.map((t: unknown, i) => {
    const f = Fields.of(t, `tools[${i}]`);
    const type = f.string('type');
    if (type !== undefined && type !== 'custom') throw badField(f.path('type'), `"${type}" tools run on Anthropic's servers and are not served here; send custom tools`);
    f.only(new Set(['type', 'name', 'description', 'input_schema', 'cache_control']), 'a tool');
    const fn: Message = { name: f.needString('name') };
    if (f.has('description')) fn.description = f.string('description');
    fn.parameters = f.object('input_schema')?.body ?? { type: 'object', properties: {} };
    return { type: 'function', function: fn };
  });
}

function applyToolChoice(f: Fields, chat: Message): void {
  const tc = f.object('tool_choice');
  if (tc === undefined) return;
  const type = tc.oneOf('type', ['auto', 'any', 'tool', 'none'] as const);
  if (type === 'auto' || type === 'none') chat.tool_choice = type;
  else if (type === 'any') chat.tool_choice = 'required';
  else if (type === 'tool') chat.tool_choice = { type: 'function', function: { name: tc.needString('name') } };
  if (tc.bool('disable_parallel_tool_use') === true) chat.parallel_tool_calls = false;
}

function checkThinking(f: Fields): void {
  const t = f.object('thinking');
  if (t !== undefined && t.string('type') !== 'disabled') {
    throw badField('thinking.type', 'extended thinking with a budget is not supported by this gateway; send { "type": "disabled" } or leave thinking out (a reasoning model still shows its reasoning as thinking blocks)');
  }
}

/** The chat body of a Messages request (or of a count_tokens request, which has no max_tokens). */
export function messagesChat(body: unknown, o: { readonly counting: boolean }): Message {
  const f = Fields.of(body, '').only(o.counting ? new Set(countFields) : requestFields, o.counting ? 'a count_tokens request' : 'a Messages request');
  checkThinking(f);
  const chat: Message = { model: f.needString('model'), messages: chatMessages(f) };
  const tools = f.list('tools') ?? [];
  if (tools.length > 0) chat.tools = chatTools(tools);
  applyToolChoice(f, chat);
  if (o.counting) return chat;
  const maxTokens = f.positiveInt('max_tokens');
  if (maxTokens === undefined) throw badField('max_tokens', 'is required (a positive whole number)');
  chat.max_tokens = maxTokens;
  const stream = f.bool('stream') ?? false;
  chat.stream = stream;
  if (stream) chat.stream_options = { include_usage: true };
  const stops = f.list('stop_sequences');
  if (stops !== undefined) {
    stops.forEach((s, i) => {
      if (typeof s !== 'string') throw badField(`stop_sequences[${i}]`, 'is not a string');
    });
    chat.stop = stops;
  }
  for (const k of ['temperature', 'top_p'] as const) {
    const v = f.number(k);
    if (v !== undefined) chat[k] = v;
  }
  const topK = f.positiveInt('top_k');
  if (topK !== undefined) chat.top_k = topK;
  const user = f.object('metadata')?.string('user_id');
  if (user !== undefined) chat.user = user;
  f.oneOf('service_tier', ['auto', 'standard_only'] as const);
  return chat;
}

/** The Messages request as a turn the gateway serves like a chat. */
export function messagesTurn(body: unknown): ApiTurn {
  const chat = messagesChat(body, { counting: false });
  const stops = Array.isArray(chat.stop) ? chat.stop.filter((s): s is string => typeof s === 'string') : [];
  return new MessagesTurn(chat, chat.stream === true, typeof chat.model === 'string' ? chat.model : '', stops);
}

// A stop string the engine reports (vLLM's stop_reason) is Anthropic's stop_sequence when the
// client asked for it; any other end of a complete answer is end_turn.
function stopOf(finish: string | null, stopReason: string | number | null, stops: readonly string[]): { stop_reason: string; stop_sequence: string | null } {
  if (finish === 'tool_calls') return { stop_reason: 'tool_use', stop_sequence: null };
  if (finish === 'length') return { stop_reason: 'max_tokens', stop_sequence: null };
  if (typeof stopReason === 'string' && stops.includes(stopReason)) return { stop_reason: 'stop_sequence', stop_sequence: stopReason };
  return { stop_reason: 'end_turn', stop_sequence: null };
}

function usageOut(u: ChatUsage | undefined): Record<string, number> {
  const cached = u?.cachedTokens ?? 0;
  return { input_tokens: (u?.promptTokens ?? 0) - cached, output_tokens: u?.completionTokens ?? 0, cache_read_input_tokens: cached, cache_creation_input_tokens: 0 };
}

// A tool call's arguments as Anthropic's `input` object; text that is no JSON object (a model's
// malformed call) is kept whole under one key rather than dropped.
function inputOf(args: string): unknown {
  try {
    const v: unknown = JSON.parse(args === '' ? '{}' : args);
    if (typeof v === 'object' && v !== null && !Array.isArray(v)) return v;
  } catch {
    // Not JSON: kept as text below.
  }
  return { arguments: args };
}

class MessagesTurn implements ApiTurn {
  readonly #id = newId('msg');
  readonly #model: string;
  readonly #stops: readonly string[];
  #started = false;
  #index = -1;
  #open: { type: 'text' | 'thinking' | 'tool_use'; tool: number | undefined } | undefined;
  #finish: string | null = null;
  #stopReason: string | number | null = null;
  #usage: ChatUsage | undefined;

  constructor(
    readonly chat: Readonly<Record<string, unknown>>,
    readonly stream: boolean,
    model: string,
    stops: readonly string[],
  ) {
    this.#model = model;
    this.#stops = stops;
  }

  answer(engine: unknown): Promise<unknown> {
    const a = chatAnswerOf(engine);
    if (a === undefined) throw new LlmgwError('LLMGW_UPSTREAM', 'the engine answered with something that is not a chat completion');
    const content: unknown[] = [];
    if (a.reasoning !== '') content.push({ type: 'thinking', thinking: a.reasoning, signature: '' });
    if (a.text !== '' || a.toolCalls.length === 0) content.push({ type: 'text', text: a.text });
    for (const c of a.toolCalls) content.push({ type: 'tool_use', id: c.id || newId('toolu'), name: c.name, input: inputOf(c.arguments) });
    return Promise.resolve({
      id: this.#id,
      type: 'message',
      role: 'assistant',
      model: this.#model,
      content,
      ...stopOf(a.finishReason, a.stopReason, this.#stops),
      usage: usageOut(a.usage),
    });
  }

  event(data: unknown): string {
    let out = '';
    if (!this.#started) {
      this.#started = true;
      const message = { id: this.#id, type: 'message', role: 'assistant', model: this.#model, content: [], stop_reason: null, stop_sequence: null, usage: usageOut(undefined) };
      out += sseEvent('message_start', { type: 'message_start', message });
    }
    for (const d of chatDeltasOf(data)) {
      switch (d.type) {
        case 'reasoning':
          out += this.#into('thinking', undefined, { type: 'thinking', thinking: '', signature: '' });
          out += this.#delta({ type: 'thinking_delta', thinking: d.text });
          break;
        case 'text':
          out += this.#into('text', undefined, { type: 'text', text: '' });
          out += this.#delta({ type: 'text_delta', text: d.text });
          break;
        case 'tool':
          out += this.#into('tool_use', d.index, { type: 'tool_use', id: d.id ?? newId('toolu'), name: d.name ?? '', input: {} });
          if (d.arguments !== '') out += this.#delta({ type: 'input_json_delta', partial_json: d.arguments });
          break;
        case 'finish':
          this.#finish = d.reason;
          this.#stopReason = d.stopReason;
          break;
        case 'usage':
          this.#usage = d.usage;
          break;
      }
    }
    return out;
  }

  end(): Promise<string> {
    const out =
      this.event(undefined) +
      this.#close() +
      sseEvent('message_delta', { type: 'message_delta', delta: stopOf(this.#finish, this.#stopReason, this.#stops), usage: usageOut(this.#usage) }) +
      sseEvent('message_stop', { type: 'message_stop' });
    return Promise.resolve(out);
  }

  failure(message: string): string {
    return sseEvent('error', { type: 'error', error: { type: 'api_error', message } });
  }

  #into(type: 'text' | 'thinking' | 'tool_use', tool: number | undefined, block: Record<string, unknown>): string {
    if (this.#open?.type === type && this.#open.tool === tool) return '';
    const out = this.#close();
    this.#index++;
    this.#open = { type, tool };
    return out + sseEvent('content_block_start', { type: 'content_block_start', index: this.#index, content_block: block });
  }

  #delta(delta: Record<string, unknown>): string {
    return sseEvent('content_block_delta', { type: 'content_block_delta', index: this.#index, delta });
  }

  #close(): string {
    if (this.#open === undefined) return '';
    this.#open = undefined;
    return sseEvent('content_block_stop', { type: 'content_block_stop', index: this.#index });
  }
}

// Anthropic's error types by status, as its API and SDK name them.
function anthropicType(status: number): string {
  if (status === 400 || status === 405 || status === 408 || status === 417 || status === 431) return 'invalid_request_error';
  if (status === 401) return 'authentication_error';
  if (status === 403) return 'permission_error';
  if (status === 404) return 'not_found_error';
  if (status === 413) return 'request_too_large';
  if (status === 429) return 'rate_limit_error';
  if (status === 503) return 'overloaded_error';
  return 'api_error';
}

/** How Messages clients authenticate (x-api-key, or a bearer token) and read errors: Anthropic's way. */
export const messagesApi: ClientApi = {
  name: 'messages',
  authorization: (h) => {
    const key = h['x-api-key'];
    if (typeof key === 'string' && key !== '') return `Bearer ${key}`;
    const a = h.authorization;
    return typeof a === 'string' ? a : undefined;
  },
  errorBody: (e: ApiError) => ({ type: 'error', error: { type: anthropicType(e.status), message: e.message } }),
};
