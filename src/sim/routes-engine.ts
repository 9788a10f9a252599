// The sim's routes about the engine rather than a request: /health, /metrics, /version,
// /v1/models, /reset_prefix_cache, and the sim's own /sim/requests.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { sendJson } from './http-io.js';
import { errorBody } from './openai.js';
import type { SimContext } from './sim-context.js';

/** GET /health: 200 once loaded, 503 while loading or after the failing-health fault. */
export async function health(ctx: SimContext, res: ServerResponse): Promise<void> {
  if (ctx.tokenizer !== undefined && !ctx.healthFailing) res.writeHead(200).end();
  else sendJson(res, 503, errorBody(ctx.healthFailing ? 'engine is unhealthy' : 'Loading model', 'ServiceUnavailableError', 503));
}

/** GET /metrics: the vllm:* metrics in Prometheus text. */
export async function scrapeMetrics(ctx: SimContext, res: ServerResponse): Promise<void> {
  const text = await ctx.metrics.registry.metrics();
  res.writeHead(200, { 'content-type': ctx.metrics.registry.contentType }).end(text);
}

/** GET /version. */
export async function version(res: ServerResponse): Promise<void> {
  sendJson(res, 200, { version: 'llmgw-sim' });
}

/** GET /v1/models: a card per served name and per loaded adapter, whose parent is the base model. */
export async function listModels(ctx: SimContext, res: ServerResponse): Promise<void> {
  const { o } = ctx;
  const created = Math.floor(Date.now() / 1000);
  const card = (id: string, root: string, parent: string | null) => ({ id, object: 'model', created, owned_by: 'vllm', root, parent, max_model_len: o.maxModelLen, permission: [] });
  sendJson(res, 200, {
    object: 'list',
    data: [...o.servedModelNames.map((n) => card(n, o.model, null)), ...[...ctx.loras].map(([name, l]) => card(name, l.path, ctx.baseName))],
  });
}

/** POST /reset_prefix_cache: every rank drops its cached blocks, unless some are in use. */
export async function resetPrefixCache(ctx: SimContext, res: ServerResponse): Promise<void> {
  const refused = ctx.ranks.filter((r) => !r.resetPrefixCache()).map((r) => r.rank);
  // vLLM answers 200 either way and only logs a refusal; the header tells a test which it was.
  if (refused.length > 0) ctx.log.warn({ ranks: refused }, 'sim.reset_prefix_cache.refused_blocks_in_use');
  res.writeHead(200, { 'x-llmgw-sim-reset': refused.length > 0 ? 'refused' : 'ok' }).end();
}

/** GET /sim/requests[?id=]: the accounts of the last finished requests, or of the one named. */
export async function simRequests(ctx: SimContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const want = new URL(req.url ?? '/', 'http://sim').searchParams.get('id');
  sendJson(res, 200, { data: want === null ? ctx.accounts : ctx.accounts.filter((a) => a.id === want) });
}
