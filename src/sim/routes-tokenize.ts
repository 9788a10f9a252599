// The sim's /tokenize and /detokenize: vLLM's token ids for a prompt or chat, and the text of ids.
import type { ServerResponse } from 'node:http';
import { renderChecked, sendJson } from './http-io.js';
import { parseDetokenizeRequest, parseTokenizeRequest } from './openai.js';
import { resolveModel, tokenizerOrBusy } from './sim-context.js';
import type { SimContext } from './sim-context.js';

/** POST /tokenize: a prompt's ids, or a chat's after its template, with their strings on request. */
export async function tokenize(ctx: SimContext, res: ServerResponse, body: () => Promise<unknown>, bytes: () => Promise<Buffer>): Promise<void> {
  const tk = tokenizerOrBusy(ctx);
  const r = parseTokenizeRequest(await body(), await bytes());
  resolveModel(ctx, r.model);
  const ids =
    r.kind === 'chat'
      ? await tk.encode(await renderChecked(tk, r.render, ctx.o.trustRequestChatTemplate), r.render.addSpecialTokens)
      : await tk.encode(r.prompt, r.addSpecialTokens);
  sendJson(res, 200, { count: ids.length, max_model_len: ctx.o.maxModelLen, tokens: ids, token_strs: r.returnTokenStrs ? await tk.tokenStrs(ids) : null });
}

/** POST /detokenize: the text of token ids. */
export async function detokenize(ctx: SimContext, res: ServerResponse, body: () => Promise<unknown>): Promise<void> {
  const tk = tokenizerOrBusy(ctx);
  const r = parseDetokenizeRequest(await body());
  resolveModel(ctx, r.model);
  sendJson(res, 200, { prompt: await tk.decode(r.tokens, false) });
}
