// Anthropic's Messages API: POST /v1/messages served as a chat (apis/ translates both ways), and
// POST /v1/messages/count_tokens answered by an engine's own /tokenize.
import { messagesApi, messagesChat, messagesTurn } from '../apis/index.js';
import { LlmgwError, UpstreamError } from '../errors/index.js';
import { parseRequestJson } from '../limits/index.js';
import type { GatewayContext } from './context.js';
import { generate } from './generate.js';
import type { ApiRoute } from './generate.js';
import { sendJson } from './reply.js';
import { safeJson, sendToReplica, upstreamFailure } from './replica-send.js';
import type { Call, Route } from './route.js';
import { checkServed } from './served-models.js';

const messagesRoute: ApiRoute = { api: messagesApi, begin: (_ctx, body) => messagesTurn(body) };

/** POST /v1/messages, POST /v1/messages/count_tokens; Messages clients send their key as x-api-key. */
export const messagesRoutes: readonly Route[] = [
  { method: 'POST', path: '/v1/messages', auth: 'handler', body: 'request', admission: true, api: messagesApi, run: (ctx, call) => generate(ctx, 'chat', call, messagesRoute) },
  { method: 'POST', path: '/v1/messages/count_tokens', auth: 'key', body: 'request', admission: false, api: messagesApi, run: countTokens },
];

// POST /v1/messages/count_tokens: the engine's own count of the chat the request becomes, from
// its /tokenize (what it would prefill, special tokens and tool schemas included).
async function countTokens(ctx: GatewayContext, call: Call): Promise<void> {
  const cfg = ctx.o.config;
  const body = await call.body();
  const chat = messagesChat(parseRequestJson(body, cfg.maxJsonDepth), { counting: true });
  const model = String(chat.model);
  checkServed(ctx.o.directory, model);
  const target = ctx.o.directory.ready(model)[0];
  if (target === undefined) throw new LlmgwError('LLMGW_NO_REPLICA', `model "${model}" has no ready replica to count tokens with; see the agent's log or GET /health`);
  const signal = AbortSignal.timeout(cfg.upstream.headersTimeoutMs);
  const up = await sendToReplica(ctx, target, '/tokenize', JSON.stringify({ ...chat, add_generation_prompt: true }), signal);
  const answer = safeJson(await up.body.text());
  if (up.status !== 200) throw upstreamFailure(target.id, up.status);
  const count = typeof answer === 'object' && answer !== null && 'count' in answer ? answer.count : undefined;
  if (typeof count !== 'number') throw new UpstreamError('LLMGW_UPSTREAM', target.id, `replica ${target.id} answered /tokenize without a token count`);
  sendJson(call.res, 200, { input_tokens: count }, { 'x-llmgw-replica': target.id });
}
