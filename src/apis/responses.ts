// OpenAI's Responses API (POST /v1/responses) served as a chat: input items become chat messages,
// a previous_response_id is rebuilt from the stored conversation, and the engine's chat answer is
// written back as a Response object or as the Responses event sequence. Translated rather than
// passed to vLLM's own /v1/responses: vLLM keeps stored responses in one engine process's memory,
// so a follow-up routed to another replica (or after a restart) would not find its conversation,
// and this way every turn goes through the same router, tokenizer, quotas and usage as a chat.
import { randomBytes } from 'node:crypto';
import { LlmgwError } from '../errors/index.js';
import { chatAnswerOf, chatDeltasOf, sseEvent, type ChatAnswer, type ChatToolCall, type ChatUsage } from './chat-answer.js';
import { badField, Fields, isRecord } from './fields.js';
import type { ResponseStore } from './response-store.js';
import type { ApiError, ApiTurn, ClientApi } from './turn.js';

/** What a Responses request needs beyond its body: whose it is and where responses are kept. */
export interface ResponsesContext {
  readonly store: ResponseStore;
  /** The key's name: stored responses are its own. */
  readonly owner: string;
  readonly retentionMs: number;
  readonly now?: () => number;
}

type Message = Record<string, unknown>;

const newId = (prefix: string): string => `${prefix}_${randomBytes(16).toString('hex')}`;

const requestFields = new Set([
  'model',
  'input',
  'instructions',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'stream',
  'stream_options',
  'store',
  'previous_response_id',
  'max_output_tokens',
  'temperature',
  'top_p',
  'metadata',
  'user',
  'safety_identifier',
  'prompt_cache_key',
  'service_tier',
  'text',
  'reasoning',
  'truncation',
  'include',
  'background',
]);

// A message's text parts as vLLM takes them: one string as it is, several as text parts (vLLM joins
// them with a newline, as it does a chat's).
function textContent(v: unknown, at: string): string | { type: 'text'; text: string }[] {
  if (typeof v === 'string') return v;
  if (!Array.isArray(v)) throw badField(at, 'is not a string or a list of content parts');
  const parts = v.map((p: unknown, i) => {
    const f = Fields.of(p, `${at}[${i}]`);
    const type = f.needString('type');
    if (type !== 'input_text' && type !== 'output_text' && type !== 'refusal') {
      throw badField(f.path('type'), `"${type}" parts are not supported by this gateway (text only: input_text, output_text)`);
    }
    return { type: 'text' as const, text: f.string(type === 'refusal' ? 'refusal' : 'text') ?? '' };
  });
  const first = parts[0];
  return parts.length === 1 && first !== undefined ? first.text : parts;
}

const roles: Readonly<Record<string, string>> = { user: 'user', assistant: 'assistant', system: 'system', developer: 'system' };

/** The chat messages of a Responses `input` (a string, or a list of input items). */
export function messagesOfInput(input: unknown): Message[] {
  if (typeof input === 'string') return [{ role: 'user', content: input }];
  if (!Array.isArray(input)) throw badField('input', 'is not a string or a list of input items');
  const out: Message[] = [];
  // Reasoning an earlier answer showed goes with the assistant turn that follows it, as `reasoning`:
  // what vLLM reads and hands the template (as reasoning_content too); it drops reasoning_content.
  let reasoning: string | undefined;
  const assistant = (): Message => {
    const last = out.at(-1);
    if (last?.role === 'assistant') return last;
    const m: Message = { role: 'assistant', content: null };
    out.push(m);
    return m;
  };
  const withReasoning = (m: Message): void => {
    if (reasoning !== undefined) m.reasoning = reasoning;
    reasoning = undefined;
  };
  input.forEach((item: unknown, i) => {
    const f = Fields.of(item, `input[${i}]`);
    const type = f.string('type') ?? 'message';
    switch (type) {
      case 'message': {
        const role = roles[f.needString('role')];
        if (role === undefined) throw badField(f.path('role'), `"${f.string('role')}" is not user, assistant, system or developer`);
        const content = textContent(f.body.content, f.path('content'));
        if (role === 'assistant') {
          const m: Message = { role, content };
          withReasoning(m);
          out.push(m);
        } else out.push({ role, content });
        return;
      }
      case 'function_call': {
        const m = assistant();
        withReasoning(m);
        const calls = Array.isArray(m.tool_calls) ? m.tool_calls : [];
        calls.push({ id: f.needString('call_id'), type: 'function', function: { name: f.needString('name'), arguments: f.string('arguments') ?? '' } });
        m.tool_calls = calls;
        return;
      }
      case 'function_call_output': {
        const output = f.body.output;
        out.push({ role: 'tool', tool_call_id: f.needString('call_id'), content: textContent(output, f.path('output')) });
        return;
      }
      case 'reasoning': {
        const texts = [...(f.list('content') ?? []), ...(f.list('summary') ?? [])].map((p) => (isRecord(p) && typeof p.text === 'string' ? p.text : ''));
        reasoning = texts.filter((t) => t !== '').join('\n');
        return;
      }
      default:
        throw badField(f.path('type'), `"${type}" input items are not supported by this gateway (message, function_call, function_call_output, reasoning)`);
    }
  });
  return out;
}

function chatTools(tools: readonly unknown[]): Message[] {
  return tools.map((t: unknown, i) => {
    const f = Fields.of(t, `tools[${i}]`);
    const type = f.needString('type');
    if (type !== 'function') throw badField(f.path('type'), `"${type}" tools are hosted by OpenAI and not served here; send function tools`);
    f.only(new Set(['type', 'name', 'description', 'parameters', 'strict']), 'a function tool');
    const fn: Message = { name: f.needString('name') };
    if (f.has('description')) fn.description = f.string('description');
    if (f.has('parameters')) fn.parameters = f.object('parameters')?.body;
    if (f.has('strict')) fn.strict = f.bool('strict');
    return { type: 'function', function: fn };
  });
}

function chatToolChoice(v: unknown): unknown {
  if (v === undefined || v === null) return undefined;
  if (v === 'none' || v === 'auto' || v === 'required') return v;
  const f = Fields.of(v, 'tool_choice');
  if (f.string('type') !== 'function') throw badField('tool_choice', `${JSON.stringify(v).slice(0, 80)} is not supported; send "none", "auto", "required" or { "type": "function", "name": ... }`);
  return { type: 'function', function: { name: f.needString('name') } };
}

function responseFormat(text: Fields | undefined): unknown {
  const format = text?.object('format');
  if (format === undefined) return undefined;
  const type = format.oneOf('type', ['text', 'json_object', 'json_schema'] as const);
  if (type === 'json_object') return { type };
  if (type !== 'json_schema') return undefined;
  const schema: Message = { name: format.needString('name'), schema: format.object('schema')?.body ?? {} };
  if (format.has('strict')) schema.strict = format.bool('strict');
  if (format.has('description')) schema.description = format.string('description');
  return { type, json_schema: schema };
}

// What a request asked for, echoed in its Response object as OpenAI's API echoes it.
interface Echo {
  readonly model: string;
  readonly instructions: string | null;
  readonly tools: readonly unknown[];
  readonly toolChoice: unknown;
  readonly parallelToolCalls: boolean;
  readonly maxOutputTokens: number | null;
  readonly temperature: number | null;
  readonly topP: number | null;
  readonly previousResponseId: string | null;
  readonly store: boolean;
  readonly metadata: Readonly<Record<string, unknown>>;
  readonly text: unknown;
  readonly reasoningEffort: string | null;
  readonly user: string | null;
}

function checkOptions(f: Fields): void {
  if (f.bool('background') === true) throw badField('background', 'background responses are not supported by this gateway; send the request and wait for it');
  f.oneOf('truncation', ['disabled'] as const);
  f.oneOf('service_tier', ['auto', 'default'] as const);
  for (const [i, v] of (f.list('include') ?? []).entries()) {
    if (v !== 'reasoning.encrypted_content') throw badField(`include[${i}]`, `${JSON.stringify(v)} is not supported by this gateway`);
  }
  f.string('safety_identifier');
  f.string('prompt_cache_key');
  f.object('stream_options');
}

/** Parses a Responses request and rebuilds its conversation; `chat` is what the engine runs. */
export async function responsesTurn(body: unknown, c: ResponsesContext): Promise<ApiTurn> {
  const f = Fields.of(body, '').only(requestFields, 'a Responses request');
  checkOptions(f);
  const model = f.needString('model');
  if (!f.has('input')) throw badField('input', 'is required (a string or a list of input items)');
  const instructions = f.string('instructions');
  const previousId = f.string('previous_response_id');
  const fresh = messagesOfInput(f.body.input);
  const history = previousId === undefined ? [] : await conversationOf(c, previousId);
  // Instructions are the request's own: a previous response's are not carried over (OpenAI's rule).
  const conversation = [...history, ...fresh];
  const messages = instructions === undefined ? conversation : [{ role: 'system', content: instructions }, ...conversation];
  const stream = f.bool('stream') ?? false;
  const tools = f.list('tools') ?? [];
  const reasoning = f.object('reasoning');
  const reasoningEffort = reasoning?.string('effort');
  const text = f.object('text');
  const chat: Message = { model, messages, stream };
  if (stream) chat.stream_options = { include_usage: true };
  const set = (k: string, v: unknown): void => {
    if (v !== undefined) chat[k] = v;
  };
  set('max_tokens', f.positiveInt('max_output_tokens'));
  set('temperature', f.number('temperature'));
  set('top_p', f.number('top_p'));
  if (tools.length > 0) chat.tools = chatTools(tools);
  set('tool_choice', chatToolChoice(f.body.tool_choice));
  set('parallel_tool_calls', f.bool('parallel_tool_calls'));
  set('user', f.string('user'));
  set('response_format', responseFormat(text));
  set('reasoning_effort', reasoningEffort);
  const metadata = f.object('metadata')?.body ?? {};
  const echo: Echo = {
    model,
    instructions: instructions ?? null,
    tools,
    toolChoice: f.body.tool_choice ?? 'auto',
    parallelToolCalls: f.bool('parallel_tool_calls') ?? true,
    maxOutputTokens: f.positiveInt('max_output_tokens') ?? null,
    temperature: f.number('temperature') ?? null,
    topP: f.number('top_p') ?? null,
    previousResponseId: previousId ?? null,
    store: f.bool('store') ?? true,
    metadata,
    text: text?.body ?? { format: { type: 'text' } },
    reasoningEffort: reasoningEffort ?? null,
    user: f.string('user') ?? null,
  };
  return new ResponsesTurn(chat, stream, echo, conversation, c);
}

async function conversationOf(c: ResponsesContext, id: string): Promise<Message[]> {
  const stored = await c.store.get(c.owner, id);
  if (stored === undefined) {
    throw new LlmgwError(
      'LLMGW_NOT_FOUND',
      `previous_response_id: no stored response "${id}" for this key (never stored, store: false, deleted, expired after the gateway's retention, or made by another key)`,
    );
  }
  const parsed: unknown = JSON.parse(stored.body);
  const messages = isRecord(parsed) ? parsed.messages : undefined;
  if (!Array.isArray(messages)) throw new Error(`stored response ${id} holds no conversation`);
  return messages.filter(isRecord);
}

/** The stored Response object of this key, for GET /v1/responses/{id}. */
export async function storedResponse(store: ResponseStore, owner: string, id: string): Promise<unknown> {
  const stored = await store.get(owner, id);
  if (stored === undefined) throw new LlmgwError('LLMGW_NOT_FOUND', `no stored response "${id}" for this key (never stored, deleted, expired, or made by another key)`);
  const parsed: unknown = JSON.parse(stored.body);
  return isRecord(parsed) ? parsed.response : undefined;
}

/** DELETE /v1/responses/{id}: OpenAI's deletion object, or a 404. */
export async function deleteStoredResponse(store: ResponseStore, owner: string, id: string): Promise<unknown> {
  if (!(await store.delete(owner, id))) throw new LlmgwError('LLMGW_NOT_FOUND', `no stored response "${id}" for this key`);
  return { id, object: 'response', deleted: true };
}

type OutputItem = Record<string, unknown> & { type: string; id: string };

function usageOut(u: ChatUsage | undefined): unknown {
  const p = u?.promptTokens ?? 0;
  const o = u?.completionTokens ?? 0;
  return { input_tokens: p, input_tokens_details: { cached_tokens: u?.cachedTokens ?? 0 }, output_tokens: o, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: p + o };
}

const messageItem = (id: string, text: string, status: string): OutputItem => ({
  type: 'message',
  id,
  status,
  role: 'assistant',
  content: status === 'in_progress' ? [] : [outputText(text)],
});
const outputText = (text: string): Record<string, unknown> => ({ type: 'output_text', text, annotations: [], logprobs: [] });
const reasoningItem = (id: string, text: string): OutputItem => ({ type: 'reasoning', id, summary: [], content: [{ type: 'reasoning_text', text }], encrypted_content: null, status: 'completed' });
const callItem = (id: string, call: ChatToolCall, status: string): OutputItem => ({
  type: 'function_call',
  id,
  call_id: call.id,
  name: call.name,
  arguments: call.arguments,
  status,
});

class ResponsesTurn implements ApiTurn {
  readonly #id = newId('resp');
  readonly #createdAt: number;
  readonly #c: ResponsesContext;
  readonly #echo: Echo;
  readonly #conversation: readonly Message[];
  // Streaming: the items so far, the one being written, and the next sequence number.
  readonly #items: OutputItem[] = [];
  #open: { item: OutputItem; text: string; call?: ChatToolCall & { index: number } } | undefined;
  #seq = 0;
  #started = false;
  #finish: string | null = null;
  #usage: ChatUsage | undefined;

  constructor(
    readonly chat: Readonly<Record<string, unknown>>,
    readonly stream: boolean,
    echo: Echo,
    conversation: readonly Message[],
    c: ResponsesContext,
  ) {
    this.#c = c;
    this.#echo = echo;
    this.#conversation = conversation;
    this.#createdAt = (c.now ?? Date.now)();
  }

  async answer(engine: unknown): Promise<unknown> {
    const a = chatAnswerOf(engine);
    if (a === undefined) throw new LlmgwError('LLMGW_UPSTREAM', 'the engine answered with something that is not a chat completion');
    // The call's id is what the client's function_call_output answers: one is made if the engine gave none.
    const toolCalls = a.toolCalls.map((call) => ({ ...call, id: call.id || newId('call') }));
    const items: OutputItem[] = [];
    if (a.reasoning !== '') items.push(reasoningItem(newId('rs'), a.reasoning));
    if (a.text !== '' || toolCalls.length === 0) items.push(messageItem(newId('msg'), a.text, 'completed'));
    for (const call of toolCalls) items.push(callItem(newId('fc'), call, 'completed'));
    const response = this.#response(items, a.finishReason, a.usage);
    await this.#save(response, { ...a, toolCalls });
    return response;
  }

  event(data: unknown): string {
    let out = '';
    if (!this.#started) {
      this.#started = true;
      const response = this.#response([], null, undefined, 'in_progress');
      out += this.#emit('response.created', { response }) + this.#emit('response.in_progress', { response });
    }
    for (const d of chatDeltasOf(data)) {
      switch (d.type) {
        case 'reasoning':
          out += this.#into('reasoning', undefined) + this.#emit('response.reasoning_text.delta', { ...this.#where(), content_index: 0, delta: d.text });
          this.#appendText(d.text);
          break;
        case 'text':
          out += this.#into('message', undefined) + this.#emit('response.output_text.delta', { ...this.#where(), content_index: 0, delta: d.text, logprobs: [] });
          this.#appendText(d.text);
          break;
        case 'tool':
          out += this.#into('function_call', d);
          if (d.arguments !== '') {
            out += this.#emit('response.function_call_arguments.delta', { ...this.#where(), delta: d.arguments });
            this.#appendText(d.arguments);
          }
          break;
        case 'finish':
          this.#finish = d.reason;
          break;
        case 'usage':
          this.#usage = d.usage;
          break;
      }
    }
    return out;
  }

  async end(): Promise<string> {
    let out = this.event(undefined) + this.#close();
    const response = this.#response(this.#items, this.#finish, this.#usage);
    await this.#save(response, this.#answerOfItems());
    out += this.#emit(response.status === 'incomplete' ? 'response.incomplete' : 'response.completed', { response });
    return out;
  }

  failure(message: string): string {
    return this.#emit('error', { code: 'upstream', message, param: null });
  }

  #where(): { item_id: string; output_index: number } {
    return { item_id: this.#open?.item.id ?? '', output_index: this.#items.length };
  }

  #appendText(t: string): void {
    if (this.#open !== undefined) this.#open.text += t;
  }

  // Opens an item of `type` unless it is the one open (a new tool index is a new item).
  #into(type: 'message' | 'reasoning' | 'function_call', tool: { index: number; id: string | undefined; name: string | undefined } | undefined): string {
    const o = this.#open;
    if (o !== undefined && o.item.type === type && (tool === undefined || o.call?.index === tool.index)) return '';
    let out = this.#close();
    let item: OutputItem;
    if (type === 'message') item = messageItem(newId('msg'), '', 'in_progress');
    else if (type === 'reasoning') item = { type, id: newId('rs'), summary: [], content: [], encrypted_content: null, status: 'in_progress' };
    else item = callItem(newId('fc'), { id: tool?.id ?? newId('call'), name: tool?.name ?? '', arguments: '' }, 'in_progress');
    this.#open = { item, text: '', ...(tool === undefined ? {} : { call: { index: tool.index, id: String(item.call_id), name: String(item.name), arguments: '' } }) };
    out += this.#emit('response.output_item.added', { output_index: this.#items.length, item });
    if (type === 'message') out += this.#emit('response.content_part.added', { ...this.#where(), content_index: 0, part: outputText('') });
    if (type === 'reasoning') out += this.#emit('response.content_part.added', { ...this.#where(), content_index: 0, part: { type: 'reasoning_text', text: '' } });
    return out;
  }

  #close(): string {
    const o = this.#open;
    if (o === undefined) return '';
    const w = this.#where();
    let out = '';
    let done: OutputItem;
    if (o.item.type === 'message') {
      const part = outputText(o.text);
      out += this.#emit('response.output_text.done', { ...w, content_index: 0, text: o.text, logprobs: [] });
      out += this.#emit('response.content_part.done', { ...w, content_index: 0, part });
      done = messageItem(o.item.id, o.text, 'completed');
    } else if (o.item.type === 'reasoning') {
      out += this.#emit('response.reasoning_text.done', { ...w, content_index: 0, text: o.text });
      out += this.#emit('response.content_part.done', { ...w, content_index: 0, part: { type: 'reasoning_text', text: o.text } });
      done = reasoningItem(o.item.id, o.text);
    } else {
      out += this.#emit('response.function_call_arguments.done', { ...w, name: o.item.name, arguments: o.text });
      done = { ...o.item, arguments: o.text, status: 'completed' };
    }
    out += this.#emit('response.output_item.done', { output_index: w.output_index, item: done });
    this.#items.push(done);
    this.#open = undefined;
    return out;
  }

  #emit(type: string, fields: Record<string, unknown>): string {
    return sseEvent(type, { type, sequence_number: this.#seq++, ...fields });
  }

  #answerOfItems(): ChatAnswer {
    const texts = (type: string): string =>
      this.#items
        .filter((i) => i.type === type)
        .map((i) => {
          const part: unknown = Array.isArray(i.content) ? i.content[0] : undefined;
          return isRecord(part) && typeof part.text === 'string' ? part.text : '';
        })
        .join('');
    const toolCalls = this.#items.filter((i) => i.type === 'function_call').map((i) => ({ id: String(i.call_id), name: String(i.name), arguments: String(i.arguments) }));
    return { text: texts('message'), reasoning: texts('reasoning'), toolCalls, finishReason: this.#finish, stopReason: null, usage: this.#usage };
  }

  #response(output: readonly OutputItem[], finish: string | null, usage: ChatUsage | undefined, status?: string): Record<string, unknown> & { status: string } {
    const e = this.#echo;
    const st = status ?? (finish === 'length' ? 'incomplete' : 'completed');
    return {
      id: this.#id,
      object: 'response',
      created_at: Math.floor(this.#createdAt / 1000),
      status: st,
      error: null,
      incomplete_details: st === 'incomplete' ? { reason: 'max_output_tokens' } : null,
      instructions: e.instructions,
      max_output_tokens: e.maxOutputTokens,
      model: e.model,
      output: output,
      parallel_tool_calls: e.parallelToolCalls,
      previous_response_id: e.previousResponseId,
      reasoning: { effort: e.reasoningEffort, summary: null },
      store: e.store,
      temperature: e.temperature,
      text: e.text,
      tool_choice: e.toolChoice,
      tools: e.tools,
      top_p: e.topP,
      truncation: 'disabled',
      usage: status === 'in_progress' ? null : usageOut(usage),
      user: e.user,
      metadata: e.metadata,
    };
  }

  // Stored before the client has the whole answer, so a follow-up sent the moment it arrives finds it.
  async #save(response: Record<string, unknown>, a: ChatAnswer): Promise<void> {
    if (!this.#echo.store) return;
    const reply: Message = { role: 'assistant', content: a.text === '' && a.toolCalls.length > 0 ? null : a.text };
    if (a.reasoning !== '') reply.reasoning = a.reasoning;
    if (a.toolCalls.length > 0) reply.tool_calls = a.toolCalls.map((t) => ({ id: t.id, type: 'function', function: { name: t.name, arguments: t.arguments } }));
    const now = (this.#c.now ?? Date.now)();
    await this.#c.store.put({
      id: this.#id,
      owner: this.#c.owner,
      createdAt: now,
      expiresAt: now + this.#c.retentionMs,
      body: JSON.stringify({ response, messages: [...this.#conversation, reply] }),
    });
  }
}

/** How Responses clients authenticate and read errors: OpenAI's way. */
export const responsesApi: ClientApi = {
  name: 'responses',
  authorization: (h) => {
    const a = h.authorization;
    return typeof a === 'string' ? a : undefined;
  },
  errorBody: (e: ApiError) => ({ error: { message: e.message, type: e.type, param: e.param, code: e.code } }),
};
