// Continuing a streamed answer on another replica when its engine dies mid-answer. What the client
// was sent is recorded as it passes; when the stream breaks, the request is rebuilt with that answer
// so far appended (chat: a final assistant message the engine continues, with continue_final_message
// as vLLM, SGLang and llama-server take it; completions: the prompt plus the answer) and max_tokens
// reduced by what was sent. The new engine's events are then rewritten into the client's stream: the
// same id, no second role delta, and one usage where the prompt is counted once.
//
// A chat that has shown reasoning (a thinking model under a reasoning parser) is continued raw, on
// /v1/completions: its prompt rendered with the model's template, then <think>, the reasoning so far
// and, once the answer began, </think> and the content so far, so the engine continues from the very
// tokens it wrote (a chat continuation would render the think block otherwise, or drop it). The raw
// text that comes back is split again at </think> (tokenize's ReasoningSplitter, the parser the sim
// uses) and written into the client's stream as chat deltas in the field the first engine used.
//
// Only what can be continued exactly is: several choices (n, best_of) interleave and would each need
// their own continuation; logprobs after the seam would be those of a re-tokenized prefix, not of the
// tokens sampled; a structured-output grammar restarts from its first state; a tool call under way
// cannot be written back as plain assistant text, and a thinking chat offered tools could call one
// after the seam, which a raw completion would not parse; echo would echo the prompt again; a prompt
// of token ids cannot have text appended; a chat whose template renders a final assistant message
// otherwise than the generation prompt followed by its text (Qwen3's, thinking on, writes an empty
// think block first) would be continued from a prompt the answer was never generated from. Those
// end with the error event as before.
//
// Nothing here touches a socket: the gateway feeds events in and sends the continuation it is given.
import type { Endpoint } from '../limits/index.js';
import { ReasoningSplitter, thinkClose, thinkOpen } from '../tokenize/index.js';

/** Why a stream broke. */
export type BreakReason = 'reset' | 'timeout' | 'error-event' | 'bound';

/** Why a broken stream was not continued. */
export type Refusal =
  | 'choices'
  | 'logprobs'
  | 'structured'
  | 'echo'
  | 'token-prompt'
  | 'suffix'
  | 'content-parts'
  | 'blank-prefix'
  | 'tool-call'
  | 'reasoning'
  | 'tools'
  | 'template'
  | 'limit'
  | 'deadline'
  | 'no-replica'
  | 'rejected'
  | 'bound';

/** Token counts as an engine reports them (the gateway's Usage, structurally). */
export interface SpliceUsage {
  readonly promptTokens: number;
  readonly completionTokens: number;
  readonly cachedTokens: number | undefined;
}

type Body = Readonly<Record<string, unknown>>;

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

const isSet = (v: unknown): boolean => v !== undefined && v !== null && v !== false;

// vLLM's and SGLang's structured-output fields besides OpenAI's response_format.
const grammarKeys = ['guided_json', 'guided_regex', 'guided_choice', 'guided_grammar', 'structured_outputs', 'grammar', 'json_schema', 'regex', 'ebnf'];

/** Why this request's answer could not be continued exactly, whatever it says; undefined when it can. */
export function requestRefusal(endpoint: Endpoint, body: Body): Refusal | undefined {
  const count = (k: string): number => (typeof body[k] === 'number' ? (body[k] as number) : 1);
  if (count('n') > 1 || count('best_of') > 1) return 'choices';
  if (isSet(body.logprobs) || isSet(body.top_logprobs) || isSet(body.prompt_logprobs)) return 'logprobs';
  const format = body.response_format;
  if ((isRecord(format) && format.type !== 'text') || grammarKeys.some((k) => isSet(body[k]))) return 'structured';
  if (isSet(body.echo)) return 'echo';
  if (endpoint === 'completions') {
    if (isSet(body.suffix)) return 'suffix';
    if (promptText(body.prompt) === undefined) return 'token-prompt';
    return undefined;
  }
  if (body.continue_final_message === true) {
    const last = Array.isArray(body.messages) ? (body.messages.at(-1) as unknown) : undefined;
    if (!isRecord(last) || typeof last.content !== 'string') return 'content-parts';
  }
  return undefined;
}

function promptText(p: unknown): string | undefined {
  if (typeof p === 'string') return p;
  if (Array.isArray(p) && p.length === 1 && typeof p[0] === 'string') return p[0];
  return undefined;
}

// An engine that broke a bound on what it may send (an event or an answer too long, a head that is
// not HTTP) is broken or hostile in a way another replica would repeat for the same request: its
// answer is failed, not continued.
const boundCodes = new Set(['LLMGW_UPSTREAM_EVENT_TOO_LARGE', 'LLMGW_UPSTREAM_ANSWER_TOO_LARGE', 'LLMGW_UPSTREAM_HEAD_TOO_LARGE', 'LLMGW_UPSTREAM_PROTOCOL']);

/** Classifies an error a stream broke with: a body timeout (raw or as proxy named it), a bound broken, or a connection gone. */
export function breakReasonOf(e: unknown): BreakReason {
  const code = isRecord(e) ? e.code : undefined;
  if (code === 'UND_ERR_BODY_TIMEOUT' || code === 'LLMGW_UPSTREAM_STALLED') return 'timeout';
  return typeof code === 'string' && boundCodes.has(code) ? 'bound' : 'reset';
}

/** The data of one SSE event, parsed; undefined for [DONE], comments and anything not JSON. */
export function eventData(event: string): unknown {
  // The common shape, one data line, without splitting the event into lines.
  const one = /^data: ?([^\r\n]*)\r?\n\r?\n$/.exec(event);
  if (one !== null) return one[1] === '[DONE]' || one[1] === '' ? undefined : parseOrUndefined(one[1] ?? '');
  const data = event
    .split(/\r?\n/)
    .filter((l) => l.startsWith('data:'))
    .map((l) => l.slice(5).trimStart())
    .join('\n');
  if (data === '' || data === '[DONE]') return undefined;
  return parseOrUndefined(data);
}

function parseOrUndefined(data: string): unknown {
  try {
    return JSON.parse(data);
  } catch {
    // A malformed event is the engine's business and the client's to see; it carries nothing to record.
    return undefined;
  }
}

/** True for an engine's mid-stream error event (vLLM writes one when a request fails after its headers). */
export function isErrorEvent(data: unknown): boolean {
  return isRecord(data) && isRecord(data.error) && !('choices' in data);
}

// Events kept unparsed before they are folded into the answer: an answer of some 5k tokens (an event
// is about 200 characters a token) is never parsed unless its stream breaks, and a longer one is
// parsed in batches, never held whole twice. bench/splice measures what it costs a stream: on a
// loaded 2-core machine its figures were too noisy to pin down (pipeEvents at 0.6-3.6 us an event
// without, 3-8 us with).
const foldChars = 1024 * 1024;

/** A continuation to send: the body, and which hop it is (1 for the first migration). */
export interface Continuation {
  readonly body: Record<string, unknown>;
  readonly hop: number;
  /** Completion tokens the client already has. */
  readonly sentTokens: number;
  /**
   * A chat's answer so far handed back as a final assistant message, and the request it was first
   * generated from: the continuation is exact only if the engine's template renders it as that
   * request's prompt followed by the text, which the gateway checks where it renders the template.
   */
  readonly seam?: { readonly original: Body; readonly text: string };
  /**
   * A thinking chat continued raw: `body` is a completions body whose prompt is the original chat's
   * rendered prompt (the gateway renders `original`) followed by `suffix`.
   */
  readonly raw?: { readonly original: Body; readonly suffix: string };
}

// Chat fields a completions body has no place for; the sampling fields carry over as they are.
const chatOnlyKeys = ['messages', 'tools', 'tool_choice', 'parallel_tool_calls', 'chat_template', 'chat_template_kwargs', 'add_generation_prompt', 'continue_final_message', 'reasoning_effort', 'documents', 'max_completion_tokens', 'prompt'];

/**
 * One client stream across the engines that served it. `pass` sees every event on its way to the
 * client; `continuation` builds the request for the next engine; `usage` is what the client is charged.
 */
export class StreamSplice {
  readonly #endpoint: Endpoint;
  readonly #body: Body;
  readonly #maxHops: number;
  readonly #refusal: Refusal | undefined;
  #hops = 0;
  #raw: string[] = [];
  #rawChars = 0;
  #text = '';
  #tokens = 0;
  #prefixTokens = 0;
  #id: string | undefined;
  #toolCall = false;
  #reasoning = '';
  // The field the client gets reasoning in: the first engine's name for it.
  #reasoningKey: 'reasoning' | 'reasoning_content' = 'reasoning';
  // Content that came after reasoning: the engine wrote </think> between them.
  #answered = false;
  // Set while a raw continuation streams: its text is split back into the two fields.
  #splitter: ReasoningSplitter | undefined;
  #finished = false;

  /** `body` is the request as the gateway forwarded it; `maxHops` bounds the migrations. */
  constructor(endpoint: Endpoint, body: Body, maxHops: number) {
    this.#endpoint = endpoint;
    this.#body = body;
    this.#maxHops = maxHops;
    this.#refusal = requestRefusal(endpoint, body);
  }

  /** How many migrations this stream took. */
  get hops(): number {
    return this.#hops;
  }

  /** The client already has the answer's end (a finish_reason): a break after it loses nothing. */
  get finished(): boolean {
    this.#fold();
    return this.#finished;
  }

  /** The event to send the client in place of `event`, or undefined to drop it. */
  pass(event: string): string | undefined {
    if (this.#hops === 0) {
      // The first engine's events go through untouched; they are read only if its stream breaks.
      this.#raw.push(event);
      this.#rawChars += event.length;
      if (this.#rawChars > foldChars) this.#fold();
      return event;
    }
    const parsed = eventData(event);
    if (!isRecord(parsed)) return event;
    const data = this.#splitter === undefined ? parsed : this.#asChat(parsed, this.#splitter);
    if (data === undefined) return undefined;
    if (this.#id !== undefined && 'id' in data) data.id = this.#id;
    const choice = Array.isArray(data.choices) && isRecord(data.choices[0]) ? data.choices[0] : undefined;
    const delta = choice !== undefined && isRecord(choice.delta) ? choice.delta : undefined;
    if (delta !== undefined && 'role' in delta) {
      // The client had its role delta from the first engine; a second one would start a new message.
      delete delta.role;
      const empty = Object.values(delta).every((v) => v === null || v === '');
      if (empty && !isSet(choice?.finish_reason) && !isRecord(data.usage)) return undefined;
    }
    const usage = isRecord(data.usage) ? data.usage : undefined;
    if (usage !== undefined && typeof usage.prompt_tokens === 'number') {
      const u = this.usage({ promptTokens: usage.prompt_tokens, completionTokens: Number(usage.completion_tokens ?? 0), cachedTokens: cachedOf(usage) });
      usage.prompt_tokens = u.promptTokens;
      usage.completion_tokens = u.completionTokens;
      usage.total_tokens = u.promptTokens + u.completionTokens;
      if (u.cachedTokens !== undefined && isRecord(usage.prompt_tokens_details)) usage.prompt_tokens_details.cached_tokens = u.cachedTokens;
    }
    this.#record(data);
    return `data: ${JSON.stringify(data)}\n\n`;
  }

  /**
   * The request that continues the answer on another engine, or why it cannot be: the request's kind,
   * what the answer holds so far, or the migration limit.
   */
  continuation(): Continuation | { readonly refused: Refusal } {
    this.#fold();
    if (this.#refusal !== undefined) return { refused: this.#refusal };
    if (this.#toolCall) return { refused: 'tool-call' };
    if (this.#hops >= this.#maxHops) return { refused: 'limit' };
    if (this.#reasoning !== '') return this.#rawContinuation();
    // Only spaces so far: engines refuse a final message of no text to continue (transformers' cut
    // strips it), and sending the request as it came would repeat them.
    if (this.#endpoint === 'chat' && this.#text !== '' && this.#text.trim() === '') return { refused: 'blank-prefix' };
    const body: Record<string, unknown> = { ...this.#body };
    // An engine that died right after the last token but before its finish leaves nothing to write:
    // one more token is asked for rather than a request the engine would refuse.
    for (const k of ['max_tokens', 'max_completion_tokens']) {
      if (typeof body[k] === 'number') body[k] = Math.max(1, (body[k] as number) - this.#tokens);
    }
    if (typeof body.min_tokens === 'number') body.min_tokens = Math.max(0, body.min_tokens - this.#tokens);
    // Nothing written yet (the client has at most its role delta): the request goes again as it came,
    // since an empty assistant message to continue is one engines refuse.
    if (this.#text !== '') this.#append(body);
    // The usage of the continuation is what the client's is made from, whether or not it asked.
    body.stream_options = { ...(isRecord(body.stream_options) ? body.stream_options : {}), include_usage: true };
    this.#hops++;
    this.#prefixTokens = this.#tokens;
    const seam = this.#endpoint === 'chat' && this.#text !== '' ? { original: this.#body, text: this.#text } : undefined;
    return { body, hop: this.#hops, sentTokens: this.#tokens, ...(seam === undefined ? {} : { seam }) };
  }

  /**
   * What the client is charged, from the last engine's usage: the prompt once (the engine's prompt
   * less the answer it was handed back) and every completion token the client got. The continuations'
   * prefill of the answer so far is the gateway's cost, not the client's.
   */
  usage(last: SpliceUsage): SpliceUsage {
    if (this.#hops === 0) return last;
    const promptTokens = Math.max(0, last.promptTokens - this.#prefixTokens);
    return {
      promptTokens,
      completionTokens: this.#prefixTokens + last.completionTokens,
      cachedTokens: last.cachedTokens === undefined ? undefined : Math.min(last.cachedTokens, promptTokens),
    };
  }

  // A thinking chat as a raw completion. The tags are tokens the engine wrote and the client never
  // saw (the parser drops them): each is counted with what the client was sent.
  #rawContinuation(): Continuation | { readonly refused: Refusal } {
    if (this.#endpoint !== 'chat') return { refused: 'reasoning' };
    if (Array.isArray(this.#body.tools) && this.#body.tools.length > 0) return { refused: 'tools' };
    const sent = this.#tokens + 1 + (this.#answered ? 1 : 0);
    const body: Record<string, unknown> = { ...this.#body };
    for (const k of chatOnlyKeys) delete body[k];
    const max = typeof this.#body.max_completion_tokens === 'number' ? this.#body.max_completion_tokens : this.#body.max_tokens;
    if (typeof max === 'number') body.max_tokens = Math.max(1, max - sent);
    if (typeof body.min_tokens === 'number') body.min_tokens = Math.max(0, body.min_tokens - sent);
    // The rendered prompt holds every special token the template writes; the tokenizer adds none.
    body.add_special_tokens = false;
    body.stream_options = { ...(isRecord(body.stream_options) ? body.stream_options : {}), include_usage: true };
    const suffix = `${thinkOpen}${this.#reasoning}${this.#answered ? `${thinkClose}${this.#text}` : ''}`;
    this.#hops++;
    this.#prefixTokens = sent;
    this.#splitter = new ReasoningSplitter('qwen3', this.#answered ? 'answering' : 'thinking');
    return { body, hop: this.#hops, sentTokens: sent, raw: { original: this.#body, suffix } };
  }

  // A raw continuation's completion event as the chat chunk the client's stream is made of; undefined
  // when it shows nothing yet (a tag under way, the tag itself).
  #asChat(data: Record<string, unknown>, splitter: ReasoningSplitter): Record<string, unknown> | undefined {
    const choice = Array.isArray(data.choices) && isRecord(data.choices[0]) ? data.choices[0] : undefined;
    const base = { id: this.#id ?? data.id, object: 'chat.completion.chunk', created: data.created, model: data.model };
    const usage = isRecord(data.usage) ? { usage: data.usage } : {};
    if (choice === undefined) return { ...base, choices: [], ...usage };
    const finish = isSet(choice.finish_reason) ? choice.finish_reason : null;
    const d = splitter.push(typeof choice.text === 'string' ? choice.text : '');
    const tail = finish === null ? { reasoning: '', content: '' } : splitter.flush();
    const delta: Record<string, string> = {};
    if (d.reasoning + tail.reasoning !== '') delta[this.#reasoningKey] = d.reasoning + tail.reasoning;
    if (d.content + tail.content !== '') delta.content = d.content + tail.content;
    if (Object.keys(delta).length === 0 && finish === null && !('usage' in usage)) return undefined;
    return { ...base, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...usage };
  }

  // The answer so far, where the engine will continue it.
  #append(body: Record<string, unknown>): void {
    if (this.#endpoint === 'completions') {
      body.prompt = `${promptText(body.prompt) ?? ''}${this.#text}`;
      return;
    }
    const messages = Array.isArray(body.messages) ? [...(body.messages as unknown[])] : [];
    const last = messages.at(-1);
    if (body.continue_final_message === true && isRecord(last)) messages[messages.length - 1] = { ...last, content: `${String(last.content)}${this.#text}` };
    else messages.push({ role: 'assistant', content: this.#text });
    body.messages = messages;
    body.continue_final_message = true;
    body.add_generation_prompt = false;
  }

  #fold(): void {
    for (const event of this.#raw) {
      const data = eventData(event);
      if (isRecord(data)) this.#record(data);
    }
    this.#raw = [];
    this.#rawChars = 0;
  }

  #record(data: Record<string, unknown>): void {
    if (this.#id === undefined && typeof data.id === 'string') this.#id = data.id;
    const choice = Array.isArray(data.choices) && isRecord(data.choices[0]) ? data.choices[0] : undefined;
    if (choice === undefined) return;
    if (isSet(choice.finish_reason)) this.#finished = true;
    let piece: unknown;
    if (this.#endpoint === 'completions') piece = choice.text;
    else if (isRecord(choice.delta)) {
      const d = choice.delta;
      piece = d.content;
      if (Array.isArray(d.tool_calls) && d.tool_calls.length > 0) this.#toolCall = true;
      // vLLM named it reasoning_content until 0.11 (llama-server still does); one delta has one or the other.
      const thought = typeof d.reasoning === 'string' && d.reasoning !== '' ? d.reasoning : d.reasoning_content;
      if (typeof thought === 'string' && thought !== '') {
        if (this.#reasoning === '') this.#reasoningKey = thought === d.reasoning ? 'reasoning' : 'reasoning_content';
        this.#reasoning += thought;
        this.#tokens++;
      }
    }
    if (typeof piece === 'string' && piece !== '') {
      if (this.#reasoning !== '') this.#answered = true;
      this.#text += piece;
      this.#tokens++;
    }
  }
}

function cachedOf(usage: Record<string, unknown>): number | undefined {
  const d = usage.prompt_tokens_details;
  return isRecord(d) && typeof d.cached_tokens === 'number' ? d.cached_tokens : undefined;
}
