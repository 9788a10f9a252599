// A chat rendered to text exactly as vLLM renders it: the OpenAI messages flattened the way vLLM's
// chat_utils flattens them (text parts joined by a newline, tool-call arguments parsed), then the
// model's Jinja template from tokenizer_config.json rendered with transformers' variables (the
// special tokens, tools, add_generation_prompt, chat_template_kwargs) and transformers' cut for
// continue_final_message. The sim renders with these same functions, and the gateway's workers
// render with them before tokenizing, so both get the ids the engine hashes.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Template } from '@huggingface/jinja';
import { ChatError } from './chat-error.js';
import { compileTemplate, type Compiled } from './compiled-template.js';
import { assertPyExact, NotExactHere, pyFloatRepr, pyJsonLoads, PyNumber, toolsText } from './py-json.js';
import { commonPrefixChars } from './segments.js';
import { NotCompiled } from './template-values.js';

/** One chat message as the template sees it (content already flattened to text). */
export type ChatMessage = Readonly<Record<string, unknown>> & { readonly role: string; readonly content: string };

/** How a chat is rendered: vLLM's chat and /tokenize request fields. */
export interface RenderOptions {
  readonly addGenerationPrompt: boolean;
  readonly continueFinalMessage: boolean;
  readonly tools?: readonly unknown[] | undefined;
  readonly chatTemplate?: string | undefined;
  readonly chatTemplateKwargs?: Readonly<Record<string, unknown>> | undefined;
}

/** A model's chat template and the special tokens transformers hands it. */
export interface TemplateConfig {
  readonly template: string;
  /** bos_token, eos_token, pad_token, unk_token…: what transformers' special_tokens_map holds. */
  readonly specialTokens: Readonly<Record<string, string>>;
}

/** ChatML, the format of Qwen and many others; used when a tokenizer ships no template of its own. */
export const chatmlTemplate =
  "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endfor %}" +
  "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

export { ChatError } from './chat-error.js';

const tokenKeys = ['bos_token', 'eos_token', 'unk_token', 'sep_token', 'pad_token', 'cls_token', 'mask_token'] as const;

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

// tokenizer_config.json writes a special token as a string or as an AddedToken object.
function tokenText(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (isRecord(v) && typeof v.content === 'string') return v.content;
  return undefined;
}

/** The template and special tokens of a parsed tokenizer_config.json (ChatML when it has no template). */
export function templateConfigOf(raw: unknown): TemplateConfig {
  const cfg = isRecord(raw) ? raw : {};
  const specialTokens: Record<string, string> = {};
  for (const k of tokenKeys) {
    const t = tokenText(cfg[k]);
    if (t !== undefined) specialTokens[k] = t;
  }
  let template = chatmlTemplate;
  const ct = cfg.chat_template;
  if (typeof ct === 'string') template = ct;
  else if (Array.isArray(ct)) {
    const named: unknown = ct.find((t: unknown) => isRecord(t) && t.name === 'default');
    if (isRecord(named) && typeof named.template === 'string') template = named.template;
  }
  return { template, specialTokens };
}

/** Reads tokenizer_config.json from `dir`; a directory without one renders ChatML rather than refusing to start. */
export async function readTemplateConfig(dir: string): Promise<TemplateConfig> {
  let text: string;
  try {
    text = await readFile(join(dir, 'tokenizer_config.json'), 'utf8');
  } catch (e) {
    if (e instanceof Error && 'code' in e && e.code === 'ENOENT') return templateConfigOf({});
    throw e;
  }
  return templateConfigOf(JSON.parse(text));
}

const stripName = '__llmgw_py_strip';
const stripModes: Readonly<Record<string, 'both' | 'start' | 'end'>> = { strip: 'both', lstrip: 'start', rstrip: 'end' };

// What Python's str.strip() strips when given nothing (str.isspace): JavaScript's trim() also strips
// U+FEFF and leaves U+001C-U+001F and U+0085, so a message ending in a byte-order mark rendered
// differently from vLLM's template (Jinja's trim filter is Python's strip).
const pythonWhitespace = '\t\n\v\f\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000';

// Python's str.strip/lstrip/rstrip with an argument strip those characters only; @huggingface/jinja
// (0.5.11) ignores the argument and strips whitespace. Qwen3's template writes
// content.split('</think>')[-1].lstrip('\n'), so an assistant turn starting with a space rendered
// differently from vLLM and every later block hashed differently.
function pyStrip(s: unknown, mode: unknown, chars: unknown): string {
  if (typeof s !== 'string') throw new Error(`strip: ${typeof s} has no strip()`);
  const set = typeof chars === 'string' ? chars : pythonWhitespace;
  let from = 0;
  let to = s.length;
  if (mode !== 'end') while (from < to && set.includes(s.charAt(from))) from++;
  if (mode !== 'start') while (to > from && set.includes(s.charAt(to - 1))) to--;
  return s.slice(from, to);
}

const stringName = '__llmgw_py_string';

// Jinja's string filter is Python's str(): True, None, 2.5 and 1e-05 where @huggingface/jinja
// writes true, nothing and 0.00001 (Qwen3-Coder's template prints every scalar argument with it).
// A list or dict would print as Python's repr, which is not written here: that chat is rendered by
// the engine instead.
function pyString(v: unknown): string {
  if (typeof v === 'string') return v;
  if (typeof v === 'boolean') return v ? 'True' : 'False';
  if (v === null || v === undefined) return 'None';
  if (typeof v === 'number') return Number.isInteger(v) ? String(v) : pyFloatRepr(v);
  if (v instanceof PyNumber) return v.str();
  throw new NotExactHere(`the string filter of a ${Array.isArray(v) ? 'list' : typeof v} is Python's repr, rendered by the engine`, 'messages');
}

// Rewrites x.strip(chars), x.strip() (and lstrip, rstrip), x | trim and x | string in a parsed
// template into calls of pyStrip and pyString. The parser's node classes are not exported, so the tree is walked by shape: a
// node is an object with a string `type`, and the interpreter reads nothing but `type` and the
// fields it names.
function rewriteStrips(node: unknown, seen = new Set<object>()): void {
  if (typeof node !== 'object' || node === null || seen.has(node)) return;
  seen.add(node);
  if (Array.isArray(node)) {
    for (const n of node) rewriteStrips(n, seen);
    return;
  }
  if (!isRecord(node)) return;
  for (const v of Object.values(node)) rewriteStrips(v, seen);
  if (node.type === 'FilterExpression') {
    const f = node.filter;
    const called = isRecord(f) && f.type === 'CallExpression' && Array.isArray(f.args) && f.args.length <= 1 ? f : undefined;
    const name = isRecord(called) ? called.callee : f;
    if (!isRecord(name) || name.type !== 'Identifier') return;
    const more: unknown[] = Array.isArray(called?.args) ? called.args : [];
    if (name.value === 'trim') {
      node.type = 'CallExpression';
      node.callee = { type: 'Identifier', value: stripName };
      node.args = [node.operand, { type: 'StringLiteral', value: 'both' }, ...more];
    } else if (name.value === 'string' && more.length === 0) {
      node.type = 'CallExpression';
      node.callee = { type: 'Identifier', value: stringName };
      node.args = [node.operand];
    }
    return;
  }
  if (node.type !== 'CallExpression' || !Array.isArray(node.args) || node.args.length > 1) return;
  const callee = node.callee;
  if (!isRecord(callee) || callee.type !== 'MemberExpression' || callee.computed === true) return;
  const prop = callee.property;
  const mode = isRecord(prop) && prop.type === 'Identifier' && typeof prop.value === 'string' ? stripModes[prop.value] : undefined;
  if (mode === undefined) return;
  node.args = [callee.object, { type: 'StringLiteral', value: mode }, ...node.args];
  node.callee = { type: 'Identifier', value: stripName };
}

// A template parsed once, compiled when it can be, and checked: the first renders of a compiled
// template are also rendered by the interpreter, and one difference sends that template back to
// the interpreter for good (the interpreter is what the tests hold against Python's jinja2). A
// checked render that agrees answers the compiled parts, so a conversation's turns are cut alike
// from its first turn on, checked or not.
interface Prepared {
  readonly template: Template;
  readonly compiled: Compiled;
  checksLeft: number;
  differs: string | undefined;
}

const selfChecks = 8;

// Parsing Qwen3's template costs more than rendering it; every request uses the same one or two.
const preparedTemplates = new Map<string, Prepared>();
const maxPrepared = 64;
function prepared(source: string): Prepared {
  let p = preparedTemplates.get(source);
  if (p === undefined) {
    // Clients may send their own chat_template: bounded, so a stream of distinct ones cannot grow it.
    if (preparedTemplates.size >= maxPrepared) preparedTemplates.clear();
    const template = new Template(source);
    rewriteStrips(template.parsed);
    p = { template, compiled: compileTemplate(template.parsed), checksLeft: selfChecks, differs: undefined };
    preparedTemplates.set(source, p);
  }
  return p;
}

/** How a template renders here: compiled to closures, or by the interpreter and why. */
export function templateMode(source: string): { readonly mode: 'compiled' } | { readonly mode: 'interpreted'; readonly reason: string } {
  const p = prepared(source);
  if (!p.compiled.ok) return { mode: 'interpreted', reason: p.compiled.reason };
  return p.differs === undefined ? { mode: 'compiled' } : { mode: 'interpreted', reason: p.differs };
}

// Whether a value holds a PyNumber, which the interpreter would take for a dict: walked only on
// the way to the interpreter, so an ordinary chat rendered compiled pays nothing for it.
function holdsPyNumber(v: unknown): boolean {
  if (v instanceof PyNumber) return true;
  if (Array.isArray(v)) return v.some(holdsPyNumber);
  return isRecord(v) && Object.values(v).some(holdsPyNumber);
}

function interpret(p: Prepared, vars: Record<string, unknown>): string {
  if (holdsPyNumber(vars.tools) || holdsPyNumber(vars.messages)) {
    throw new NotExactHere('tool JSON holds a number only the compiled template writes as Python does, and this chat needs the interpreter', 'messages');
  }
  return p.template.render(vars);
}

function render(p: Prepared, vars: Record<string, unknown>): readonly string[] {
  if (p.compiled.ok && p.differs === undefined) {
    let fast: readonly string[] | undefined;
    try {
      fast = p.compiled.render(vars);
    } catch (e) {
      // A value the compiled form cannot render exactly (or raise_exception): the interpreter
      // renders this chat, and reports the template's own errors in its words.
      if (!(e instanceof NotCompiled)) throw e;
    }
    if (fast !== undefined) {
      if (p.checksLeft <= 0) return fast;
      // A chat the interpreter cannot print is no check of the compiled form: it is not counted.
      if (holdsPyNumber(vars.tools) || holdsPyNumber(vars.messages)) return fast;
      p.checksLeft--;
      const slow = p.template.render(vars);
      const joined = fast.join('');
      if (slow === joined) return fast;
      p.differs = `compiled render differs from the interpreter at char ${commonPrefixChars(joined, slow)}`;
      return [slow];
    }
  }
  return [interpret(p, vars)];
}

/** Renders `messages` with the model's template (or the request's own), as vLLM's apply_hf_chat_template does. */
export function renderChat(cfg: TemplateConfig, messages: readonly ChatMessage[], o: RenderOptions): string {
  return renderChatParts(cfg, messages, o).join('');
}

/**
 * renderChat's text as the strings it is made of, in order: a message's content is the string the
 * message holds, so a caller comparing a chat's next turn with this one finds the shared part by
 * identity, and need not build the whole text.
 */
export function renderChatParts(cfg: TemplateConfig, messages: readonly ChatMessage[], o: RenderOptions): readonly string[] {
  if (o.addGenerationPrompt && o.continueFinalMessage) {
    throw new ChatError('add_generation_prompt and continue_final_message are both true; set add_generation_prompt to false to continue the final message', 'continue_final_message');
  }
  let rendered: readonly string[];
  try {
    // transformers: {**special_tokens_map, **kwargs}, and the request's chat_template_kwargs update
    // vLLM's own kwargs, so a client's kwarg overrides them; messages is always the conversation.
    rendered = render(prepared(o.chatTemplate ?? cfg.template), {
      ...cfg.specialTokens,
      tools: o.tools ?? null,
      documents: null,
      add_generation_prompt: o.addGenerationPrompt,
      ...(o.chatTemplateKwargs ?? {}),
      messages,
      [stripName]: pyStrip,
      [stringName]: pyString,
    });
  } catch (e) {
    // Not the chat's fault: the engine renders it, so it must reach the caller as what it is.
    if (e instanceof NotExactHere) throw e;
    throw new ChatError(`chat template: ${e instanceof Error ? e.message : String(e)}`, 'messages');
  }
  return o.continueFinalMessage ? [cutAfterFinal(rendered.join(''), messages.at(-1)?.content ?? '')] : rendered;
}

// transformers' cut: end the render right after the final message's text, so the model continues
// that message instead of seeing it closed by end-of-turn tokens; trailing spaces the template
// kept stay, ones it trimmed are not put back.
function cutAfterFinal(rendered: string, final: string): string {
  const stripped = final.trim();
  const at = stripped === '' ? -1 : rendered.lastIndexOf(stripped);
  if (at < 0) {
    throw new ChatError('continue_final_message: the final message text is not in the rendered chat; send a final message with text', 'continue_final_message');
  }
  const lead = final.trimStart();
  return rendered.slice(0, at + (rendered.slice(at, at + lead.length) === final ? lead.length : stripped.length));
}

// vLLM's "string" content format: text parts joined with a newline.
function contentText(content: unknown, i: number): string {
  if (content === undefined || content === null) return '';
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((p: unknown, j) => {
        if (isRecord(p) && p.type === 'text' && typeof p.text === 'string') return p.text;
        throw new ChatError(`messages[${i}].content[${j}]: only text parts can be rendered here (got ${JSON.stringify(isRecord(p) ? p.type : p)})`, 'messages');
      })
      .join('\n');
  }
  throw new ChatError(`messages[${i}].content: ${JSON.stringify(content).slice(0, 80)} is not a string or a list of parts`, 'messages');
}

// vLLM's _postprocess_messages: an assistant tool call's arguments are json.loads'ed before
// rendering, because templates (Llama's, Qwen's) print them with tojson or walk them with items;
// empty ones (None, '', {}, [], Python's falsy values) become {}, an object or a list stays, and
// text that is not JSON fails the request there (so it is no prompt to tokenize here either).
// `numbers` says how object arguments were read: 'text' from the body's bytes (exact already),
// 'parsed' by JSON.parse (checked), 'approximate' for the sim.
function toolCallsOf(v: unknown, i: number, numbers: 'text' | 'parsed' | 'approximate'): unknown {
  if (!Array.isArray(v)) return v;
  return v.map((c: unknown, j) => {
    if (!isRecord(c) || !isRecord(c.function)) return c;
    const what = `messages[${i}].tool_calls[${j}].function.arguments`;
    const a = c.function.arguments;
    let args: unknown;
    if (a === undefined || a === null || a === '' || a === false || a === 0 || (a instanceof PyNumber && !a.truthy()) || (Array.isArray(a) && a.length === 0) || (isRecord(a) && Object.keys(a).length === 0)) args = {};
    else if (typeof a === 'string') args = pyJsonLoads(a, what, numbers === 'approximate');
    else if (typeof a === 'object' && !(a instanceof PyNumber)) {
      if (numbers === 'parsed') assertPyExact(a, what);
      args = a;
    } else throw new ChatError(`${what}: ${a instanceof PyNumber ? a.json : JSON.stringify(a)} is not a JSON string or an object; vLLM refuses it`, 'messages');
    return { ...c, function: { ...c.function, arguments: args } };
  });
}

// vLLM's request model for a tool (ChatCompletionToolsParam, FunctionDefinition) hands the template
// its model_dump: declared fields first, in their order, absent ones as None, then any other field
// in the order sent. Tools read from the body's text (`exact`) hold numbers as Python does; ones
// JSON.parse made are checked, and where Python would write them back differently, this request
// is tokenized by the engine.
/** Tools as vLLM hands them to the template; `approximate`: render numbers JS cannot hold exactly as JS holds them (the sim). */
export function vllmTools(tools: readonly unknown[], o: { readonly approximate?: boolean; readonly exact?: boolean } = {}): unknown[] {
  return tools.map((t: unknown, i) => {
    if (!isRecord(t) || !isRecord(t.function)) return t;
    if (o.approximate !== true && o.exact !== true) assertPyExact(t, `tools[${i}]`);
    const { name, description, parameters, ...fnExtra } = t.function;
    const { type, function: _fn, ...extra } = t;
    return { type: type ?? 'function', function: { name, description: description ?? null, parameters: parameters ?? null, ...fnExtra }, ...extra };
  });
}

/**
 * OpenAI messages as vLLM hands them to the template: role, flattened content, name, tool fields.
 * `approximate` is for the sim, its own engine: tool-call numbers JS cannot hold exactly render as
 * JS holds them. `argumentsFromText`: object arguments were read from the body's text (chatInputOf),
 * so they need no check that JSON.parse kept their numbers.
 */
export function conversationOf(raw: unknown, o: { readonly approximate?: boolean; readonly argumentsFromText?: boolean } = {}): ChatMessage[] {
  const numbers = o.approximate === true ? 'approximate' : o.argumentsFromText === true ? 'text' : 'parsed';
  if (!Array.isArray(raw) || raw.length === 0) throw new ChatError('messages: a non-empty list of messages is required', 'messages');
  return raw.map((m: unknown, i): ChatMessage => {
    if (!isRecord(m)) throw new ChatError(`messages[${i}]: not an object`, 'messages');
    if (typeof m.role !== 'string') throw new ChatError(`messages[${i}].role: ${JSON.stringify(m.role)} is not a string`, 'messages');
    const out: Record<string, unknown> & { role: string; content: string } = { role: m.role, content: contentText(m.content, i) };
    if (typeof m.name === 'string') out.name = m.name;
    // vLLM drops an empty list of calls so templates take the plain assistant path.
    const calls = m.tool_calls;
    if (m.role === 'assistant' && calls !== undefined && calls !== null && !(Array.isArray(calls) && calls.length === 0)) out.tool_calls = toolCallsOf(calls, i, numbers);
    if (m.role === 'tool' && m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
    // vLLM reads an assistant's `reasoning` and hands it to templates under both names (they read
    // reasoning_content); a client's own reasoning_content it drops, and so does this.
    if (m.role === 'assistant' && m.reasoning !== undefined && m.reasoning !== null) {
      out.reasoning = m.reasoning;
      out.reasoning_content = m.reasoning;
    }
    return out;
  });
}

/** A chat request's render inputs: vLLM's chat and /tokenize fields, checked. */
export interface ChatInput extends RenderOptions {
  readonly messages: readonly ChatMessage[];
  readonly addSpecialTokens: boolean;
}

function flag(b: Record<string, unknown>, key: string, fallback: boolean): boolean {
  const v = b[key];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'boolean') throw new ChatError(`${key}: ${JSON.stringify(v)} is not true or false`, key);
  return v;
}

const hasObjectArguments = (m: unknown): boolean =>
  isRecord(m) && Array.isArray(m.tool_calls) && m.tool_calls.some((c: unknown) => isRecord(c) && isRecord(c.function) && typeof c.function.arguments === 'object' && c.function.arguments !== null);

// Tool-call arguments sent as objects (OpenAI's are JSON strings, and those json.loads reads from
// their own text) went through JSON.parse with the body, which made 1.0 into 1. Only when a body
// holds such arguments is its whole text read again as Python reads it, and the calls of each
// message taken from there. A body the caller grew past its bytes (a next turn made ready from
// the answer) keeps its added messages as they are: they hold no object arguments.
function messagesFromText(messages: unknown, raw: Uint8Array): unknown[] | undefined {
  if (!Array.isArray(messages) || !messages.some(hasObjectArguments)) return undefined;
  const body = pyJsonLoads(Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength).toString('utf8'), 'request body');
  const read: unknown = isRecord(body) ? body.messages : undefined;
  if (!Array.isArray(read)) return undefined;
  const out: unknown[] = [];
  for (const [i, m] of messages.entries()) {
    if (!hasObjectArguments(m)) out.push(m);
    else {
      const r: unknown = read[i];
      // Not the message the bytes hold at its place: all object arguments are checked as parsed instead.
      if (!isRecord(m) || !isRecord(r) || r.role !== m.role) return undefined;
      out.push({ ...m, tool_calls: r.tool_calls });
    }
  }
  return out;
}

/**
 * The render inputs of a chat body (vLLM's defaults: add_generation_prompt true, add_special_tokens
 * false). With the body's bytes, its tools and any tool-call arguments sent as objects are read
 * from their text as Python reads them (numbers as written, keys in the order sent) rather than
 * from what JSON.parse made of them.
 */
export function chatInputOf(b: Record<string, unknown>, raw?: Uint8Array): ChatInput {
  const exactMessages = raw === undefined ? undefined : messagesFromText(b.messages, raw);
  const messages = conversationOf(exactMessages ?? b.messages, { argumentsFromText: exactMessages !== undefined });
  const text = raw !== undefined && Array.isArray(b.tools) && b.tools.length > 0 ? toolsText(raw) : undefined;
  const tools = text === undefined ? b.tools : pyJsonLoads(text, 'tools');
  if (tools !== undefined && tools !== null && !Array.isArray(tools)) throw new ChatError('tools: not a list', 'tools');
  const template = b.chat_template;
  if (template !== undefined && template !== null && typeof template !== 'string') throw new ChatError('chat_template: not a string', 'chat_template');
  const kwargs = b.chat_template_kwargs;
  if (kwargs !== undefined && kwargs !== null && !isRecord(kwargs)) throw new ChatError('chat_template_kwargs: not an object', 'chat_template_kwargs');
  const addGenerationPrompt = flag(b, 'add_generation_prompt', true);
  const continueFinalMessage = flag(b, 'continue_final_message', false);
  if (addGenerationPrompt && continueFinalMessage) {
    throw new ChatError('Cannot set both `continue_final_message` and `add_generation_prompt` to True.', 'continue_final_message');
  }
  return {
    messages,
    addGenerationPrompt,
    continueFinalMessage,
    addSpecialTokens: flag(b, 'add_special_tokens', false),
    tools: Array.isArray(tools) ? vllmTools(tools, { exact: text !== undefined }) : undefined,
    chatTemplate: typeof template === 'string' ? template : undefined,
    chatTemplateKwargs: isRecord(kwargs) ? kwargs : undefined,
  };
}
