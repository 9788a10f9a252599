// A chat template a request brought, rendered on a thread of its own with a deadline (the model's
// own renders on the main thread with tokenize's renderChat, parsed once, fast). A request template is code
// from a client: an 81-byte 3000 x 3000 loop held vLLM's event loop for a minute, and with it
// every other request on that engine.
import { Worker } from 'node:worker_threads';
import { LlmgwError } from '../errors/index.js';
import type { ChatMessage, RenderOptions, TemplateConfig } from '../tokenize/index.js';

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
