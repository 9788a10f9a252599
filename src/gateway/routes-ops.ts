// What operators and load balancers ask of the gateway itself: liveness, readiness, metrics, and the
// debug views (why a request went where it went, the admission queues, every actor's state).
import type { ServerResponse } from 'node:http';
import { LlmgwError } from '../errors/index.js';
import type { GatewayContext } from './context.js';
import { receiptsKept } from './context.js';
import { none, sendJson } from './reply.js';
import type { Call, Route } from './route.js';

/** GET /health, /ready, /metrics, /debug/receipts, /debug/queues, and the actors' pages under /debug/. */
export const opsRoutes: readonly Route[] = [
  // Liveness: the gateway process answers. Whether it can serve is /ready's question.
  { method: 'GET', path: '/health', auth: 'none', body: 'none', admission: false, run: (ctx, { res }) => sendJson(res, 200, { status: 'ok', ready: readyCounts(ctx) }) },
  { method: 'GET', path: '/ready', auth: 'none', body: 'none', admission: false, run: (ctx, { res }) => ready(ctx, res) },
  {
    method: 'GET',
    path: '/metrics',
    auth: 'none',
    body: 'none',
    admission: false,
    run: async (ctx, { res }) => {
      const text = await ctx.o.registry.metrics();
      res.writeHead(200, { 'content-type': ctx.o.registry.contentType, 'x-llmgw-replica': none, 'x-llmgw-route': none });
      res.end(text);
    },
  },
  // The other replicas' loads and caches are the operator's business, as the rest of /debug/ is.
  { method: 'GET', path: '/debug/receipts', auth: 'admin', body: 'none', admission: false, run: receipts },
  // Each model's admission queue: depth by class, bytes, who waits.
  {
    method: 'GET',
    path: '/debug/queues',
    auth: 'admin',
    body: 'none',
    admission: false,
    run: (ctx, { res }) => sendJson(res, 200, { object: 'list', enabled: ctx.o.config.admission.enabled, data: ctx.admission.view() }),
  },
  // The actors' page, its events and JSON (debug.ts), which check their own keys and methods.
  {
    method: '*',
    path: '/debug/',
    prefix: true,
    auth: 'handler',
    body: 'none',
    admission: false,
    run: (ctx, { req, res, path }) => {
      if (ctx.debug?.handle(req, res, path) !== true) throw new LlmgwError('LLMGW_NOT_FOUND', `no route ${req.method ?? 'GET'} ${path}; the debug routes are /debug/actors, /debug/receipts, /debug/queues`);
    },
  },
];

function readyCounts(ctx: GatewayContext): Record<string, number> {
  const ready: Record<string, number> = {};
  for (const m of ctx.o.directory.models()) ready[m] = ctx.o.directory.ready(m).length;
  return ready;
}

// For a load balancer: 200 only when every model has a replica to send a request to, so a
// gateway that just started (engines still loading) or lost a model gets no traffic.
// A model whose tokenizer is still loading is not ready either: its requests would be routed by load
// alone until it is (6-11 s after a restart, while /ready already said ready). A draining gateway
// is not ready whatever its replicas: the balancer must stop choosing it before it stops listening.
function ready(ctx: GatewayContext, res: ServerResponse): void {
  const counts = readyCounts(ctx);
  const waiting = Object.keys(counts).filter((m) => counts[m] === 0);
  const warming = Object.keys(counts).filter((m) => ctx.tokenizerState(m) === 'loading');
  const status = ctx.drain.draining
    ? 'draining'
    : Object.keys(counts).length === 0
      ? 'no models'
      : waiting.length > 0
        ? 'waiting'
        : warming.length > 0
          ? 'warming'
          : 'ready';
  sendJson(res, status === 'ready' ? 200 : 503, { status, ready: counts, waiting, warming });
}

// Why a request went where it went, by the x-request-id it was answered with; without an id, the newest.
function receipts(ctx: GatewayContext, { req, res }: Call): void {
  const id = new URL(req.url ?? '/', 'http://gateway').searchParams.get('id');
  if (id === null) {
    sendJson(res, 200, { object: 'list', data: ctx.receipts.recent(100) });
    return;
  }
  const r = ctx.receipts.get(id);
  if (r === undefined) throw new LlmgwError('LLMGW_NOT_FOUND', `no receipt for request ${JSON.stringify(id)}; the gateway keeps the last ${receiptsKept} (see x-request-id on a response)`);
  sendJson(res, 200, r);
}
