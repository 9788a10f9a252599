// Rendering a chat with a Jinja template: the model's own on the main thread (parsed once, fast),
// and one a request brought on a thread of its own with a deadline. A request template is code
// from a client: an 81-byte 3000 x 3000 loop held vLLM's event loop for a minute, and with it
// every other request on that engine.
import { Worker } from 'node:worker_threads';
import { Template } from '@huggingface/jinja';
import { LlmgwError } from '../errors/index.js';

/** One chat message as the template sees it (OpenAI shape, content already flattened to text). */
export type ChatMessage = Readonly<Record<string, unknown>> & { readonly role: string; readonly content: string };

/** How a chat is rendered: vLLM's /tokenize and chat request fields. */
export interface RenderOptions {
  readonly addGenerationPrompt: boolean;
  readonly continueFinalMessage: boolean;
  readonly tools?: readonly unknown[] | undefined;
  readonly chatTemplate?: string | undefined;
  readonly chatTemplateKwargs?: Readonly<Record<string, unknown>> | undefined;
}

/** The model's template and the special tokens it is rendered with. */
export interface TemplateConfig {
  readonly template: string;
  readonly bosToken: string;
  readonly eosToken: string;
}

// Parsing Qwen3's template costs more than rendering it; every request uses the same one.
const compiledTemplates = new Map<string, Template>();
function compiled(source: string): Template {
  let t = compiledTemplates.get(source);
  if (t === undefined) compiledTemplates.set(source, (t = new Template(source)));
  return t;
}

/** Renders `messages` with the request's template when it has one, else the model's. */
export function renderWith(cfg: TemplateConfig, messages: readonly ChatMessage[], o: RenderOptions): string {
  if (o.addGenerationPrompt && o.continueFinalMessage) {
    throw new LlmgwError(
      'LLMGW_SIM_BAD_REQUEST',
      'add_generation_prompt and continue_final_message are both true; set add_generation_prompt to false to continue the final message',
    );
  }
  const template = o.chatTemplate !== undefined ? new Template(o.chatTemplate) : compiled(cfg.template);
  const rendered = template.render({
    ...(o.chatTemplateKwargs ?? {}),
    messages,
    tools: o.tools,
    add_generation_prompt: o.addGenerationPrompt,
    bos_token: cfg.bosToken,
    eos_token: cfg.eosToken,
  });
  if (!o.continueFinalMessage) return rendered;
  // As transformers does: cut the render right after the final message's text, so the model
  // continues that message instead of seeing it closed by the end-of-turn tokens.
  const last = messages.at(-1)?.content ?? '';
  const at = last === '' ? -1 : rendered.lastIndexOf(last.trim());
  if (at < 0) {
    throw new LlmgwError('LLMGW_SIM_BAD_REQUEST', 'continue_final_message: the final message text is not in the rendered chat; send a final message with text');
  }
  return rendered.slice(0, at + last.trim().length);
}


/** What the template worker is given: plain data, cloned across the thread boundary. */
export interface RenderJob {
  readonly cfg: TemplateConfig;
  readonly messages: readonly ChatMessage[];
  readonly o: RenderOptions;
}

/** The worker's answer. */
export type RenderReply = { readonly ok: true; readonly text: string } | { readonly ok: false; readonly reason: string };

/**
 * Renders on a fresh worker thread, terminated when `timeoutMs` passes first (LLMGW_SIM_TEMPLATE_TIMEOUT).
 * A thread per request is costly (tens of ms) but only untrusted templates take this path, and a
 * thread stuck in a loop can only be stopped by terminating it.
 */
export function renderInWorker(cfg: TemplateConfig, messages: readonly ChatMessage[], o: RenderOptions, timeoutMs: number): Promise<string> {
  const worker = new Worker(new URL('./template-worker.js', import.meta.url), { workerData: { cfg, messages, o } satisfies RenderJob });
  return new Promise<string>((resolve, reject) => {
    const settle = (e: Error | undefined, text = ''): void => {
      clearTimeout(timer);
      worker.removeAllListeners();
      // Terminating is also how a finished worker is released; its end is not awaited.
      worker.terminate().catch(() => undefined);
      if (e === undefined) resolve(text);
      else reject(e);
    };
    const timer = setTimeout(
      () => settle(new LlmgwError('LLMGW_SIM_TEMPLATE_TIMEOUT', `the request's chat template did not render within ${timeoutMs} ms; send a simpler template or none`)),
      timeoutMs,
    );
    worker.once('message', (r: RenderReply) => settle(r.ok ? undefined : new LlmgwError('LLMGW_SIM_BAD_REQUEST', r.reason), r.ok ? r.text : ''));
    worker.once('error', (e) => settle(e));
    worker.once('exit', (code) => settle(new LlmgwError('LLMGW_SIM_BAD_REQUEST', `the chat template thread ended with code ${code} before answering`)));
  });
}
