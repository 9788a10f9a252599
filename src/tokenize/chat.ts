// A chat rendered to text exactly as vLLM renders it: the OpenAI messages flattened the way vLLM's
// chat_utils flattens them (text parts joined by a newline, tool-call arguments parsed), then the
// model's Jinja template from tokenizer_config.json rendered with transformers' variables (the
// special tokens, tools, add_generation_prompt, chat_template_kwargs) and transformers' cut for
// continue_final_message. The sim renders with these same functions, and the gateway's workers
// render with them before tokenizing, so both get the ids the engine hashes.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Template } from '@huggingface/jinja';
import { LlmgwError } from '../errors/index.js';
import { compileTemplate, NotCompiled, type Compiled } from './compiled-template.js';
import { commonPrefixChars } from './segments.js';

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

/** A chat request the template cannot render (a 400 for the client, a fallback for the router). */
export class ChatError extends LlmgwError {
  constructor(
    message: string,
    readonly param: string,
  ) {
    super('LLMGW_CHAT_TEMPLATE', message);
  }
}

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

// Python's str.strip/lstrip/rstrip with an argument strip those characters only; @huggingface/jinja
// (0.5.11) ignores the argument and strips whitespace. Qwen3's template writes
// content.split('</think>')[-1].lstrip('\n'), so an assistant turn starting with a space rendered
// differently from vLLM and every later block hashed differently.
function pyStrip(s: unknown, mode: unknown, chars: unknown): string {
  if (typeof s !== 'string') throw new Error(`strip: ${typeof s} has no strip()`);
  const set = typeof chars === 'string' ? chars : ' \t\n\r\v\f';
  let from = 0;
  let to = s.length;
  if (mode !== 'end') while (from < to && set.includes(s.charAt(from))) from++;
  if (mode !== 'start') while (to > from && set.includes(s.charAt(to - 1))) to--;
  return s.slice(from, to);
}

// Rewrites x.strip(chars) (and lstrip, rstrip) in a parsed template into a call of pyStrip. The
// parser's node classes are not exported, so the tree is walked by shape: a node is an object with
// a string `type`, and the interpreter reads nothing but `type` and the fields it names.
function rewriteStrips(node: unknown, seen = new Set<object>()): void {
  if (typeof node !== 'object' || node === null || seen.has(node)) return;
  seen.add(node);
  if (Array.isArray(node)) {
    for (const n of node) rewriteStrips(n, seen);
    return;
  }
  if (!isRecord(node)) return;
  for (const v of Object.values(node)) rewriteStrips(v, seen);
  if (node.type !== 'CallExpression' || !Array.isArray(node.args) || node.args.length !== 1) return;
  const callee = node.callee;
  if (!isRecord(callee) || callee.type !== 'MemberExpression' || callee.computed === true) return;
  const prop = callee.property;
  const mode = isRecord(prop) && prop.type === 'Identifier' && typeof prop.value === 'string' ? stripModes[prop.value] : undefined;
  if (mode === undefined) return;
  node.args = [callee.object, { type: 'StringLiteral', value: mode }, node.args[0]];
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
      p.checksLeft--;
      const slow = p.template.render(vars);
      const joined = fast.join('');
      if (slow === joined) return fast;
      p.differs = `compiled render differs from the interpreter at char ${commonPrefixChars(joined, slow)}`;
      return [slow];
    }
  }
  return [p.template.render(vars)];
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
    });
  } catch (e) {
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

// vLLM parses an assistant tool call's JSON arguments into an object before rendering, because
// templates (Llama's, Qwen's) print them with tojson.
function toolCallsOf(v: unknown): unknown {
  if (!Array.isArray(v)) return v;
  return v.map((c: unknown) => {
    if (!isRecord(c) || !isRecord(c.function) || typeof c.function.arguments !== 'string') return c;
    let args: unknown;
    try {
      args = JSON.parse(c.function.arguments);
    } catch {
      // Not JSON: vLLM renders such arguments as the string they are.
      return c;
    }
    return { ...c, function: { ...c.function, arguments: args } };
  });
}

/** OpenAI messages as vLLM hands them to the template: role, flattened content, name, tool fields. */
export function conversationOf(raw: unknown): ChatMessage[] {
  if (!Array.isArray(raw) || raw.length === 0) throw new ChatError('messages: a non-empty list of messages is required', 'messages');
  return raw.map((m: unknown, i): ChatMessage => {
    if (!isRecord(m)) throw new ChatError(`messages[${i}]: not an object`, 'messages');
    if (typeof m.role !== 'string') throw new ChatError(`messages[${i}].role: ${JSON.stringify(m.role)} is not a string`, 'messages');
    const out: Record<string, unknown> & { role: string; content: string } = { role: m.role, content: contentText(m.content, i) };
    if (typeof m.name === 'string') out.name = m.name;
    if (m.role === 'assistant' && m.tool_calls !== undefined && m.tool_calls !== null) out.tool_calls = toolCallsOf(m.tool_calls);
    if (m.role === 'tool' && m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
    if (typeof m.reasoning_content === 'string') out.reasoning_content = m.reasoning_content;
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

/** The render inputs of a chat body (vLLM's defaults: add_generation_prompt true, add_special_tokens false). */
export function chatInputOf(b: Record<string, unknown>): ChatInput {
  const messages = conversationOf(b.messages);
  const tools = b.tools;
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
    tools: Array.isArray(tools) ? tools : undefined,
    chatTemplate: typeof template === 'string' ? template : undefined,
    chatTemplateKwargs: isRecord(kwargs) ? kwargs : undefined,
  };
}
