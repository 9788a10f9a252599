// The sim's generation routes, /v1/chat/completions and /v1/completions: each parses its request,
// tokenizes the prompt, reads any blocks a prefill engine holds for it, and generates.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { generate } from './generate.js';
import { renderChecked } from './http-io.js';
import { transferIntent } from './kv-transfer.js';
import { parseChatRequest, parseCompletionRequest } from './openai.js';
import { requestIdOf, resolveModel, tokenizerOrBusy } from './sim-context.js';
import type { ModelChoice, SimContext } from './sim-context.js';

/** POST /v1/chat/completions: renders the messages with the chat template and generates the answer. */
export async function chatCompletions(ctx: SimContext, req: IncomingMessage, res: ServerResponse, body: () => Promise<unknown>, bytes: () => Promise<Buffer>): Promise<void> {
  const tk = tokenizerOrBusy(ctx);
  const r = parseChatRequest(await body(), await bytes());
  const model = resolveModel(ctx, r.model);
  const text = await renderChecked(tk, r.render, ctx.o.trustRequestChatTemplate);
  const ids = await tk.encode(text, r.render.addSpecialTokens);
  const raw = await body();
  const transfer = { ...(await remoteTokens(ctx, req, raw, ids, model, r.cacheSalt)), params: (raw as { kv_transfer_params?: unknown }).kv_transfer_params };
  const continued = r.render.continueFinalMessage ? (r.render.messages.at(-1)?.content ?? '') : '';
  generate(ctx, { kind: 'chat', req, res, params: r, promptIds: ids, model, continued, prompt: r.render.continueFinalMessage ? undefined : text, transfer });
}

/** POST /v1/completions: a prompt sent as text or token ids, answered with the generated text. */
export async function completions(ctx: SimContext, req: IncomingMessage, res: ServerResponse, body: () => Promise<unknown>): Promise<void> {
  const tk = tokenizerOrBusy(ctx);
  const r = parseCompletionRequest(await body());
  const model = resolveModel(ctx, r.model);
  const ids = 'ids' in r.prompt ? r.prompt.ids : await tk.encode(r.prompt.text, r.addSpecialTokens);
  const raw = await body();
  const transfer = { ...(await remoteTokens(ctx, req, raw, ids, model, r.cacheSalt)), params: (raw as { kv_transfer_params?: unknown }).kv_transfer_params };
  const text = 'text' in r.prompt ? r.prompt.text : undefined;
  generate(ctx, { kind: 'completion', req, res, params: r, promptIds: ids, model, continued: text ?? '', prompt: text, transfer });
}

// vLLM without a connector ignores kv_transfer_params with a warning, and so does the sim; with
// one, a decode half first reads its blocks from the prefill engine that holds them.
async function remoteTokens(ctx: SimContext, req: IncomingMessage, raw: unknown, ids: readonly number[], model: ModelChoice, salt: string | null): Promise<{ remote: number; offer: boolean }> {
  const intent = transferIntent(raw);
  if (intent.kind === 'none') return { remote: 0, offer: false };
  if (ctx.transfers === undefined) {
    ctx.log.warn({ kind: intent.kind }, 'sim.kv_transfer_params_ignored');
    return { remote: 0, offer: false };
  }
  if (intent.kind === 'prefill') return { remote: 0, offer: true };
  // As vLLM's connector: blocks the decode engine already caches are not read again.
  const local = Math.max(0, ...ctx.ranks.map((r) => r.cachedPrefixTokens(ids, model.loraName, salt)));
  return { remote: await ctx.transfers.receive(requestIdOf(req), intent.params, ids.length, local), offer: false };
}
