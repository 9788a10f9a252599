// The gateway's route table: every method and path it answers, and what each needs before its handler
// runs. To add a route, declare it in the routes-<surface>.ts of its API (a new surface gets a new
// file) and add that file's list below; dispatch() finds it, checks its key, bounds its body and turns
// whatever it throws into the OpenAI (or its protocol's) error.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { LlmgwError } from '../errors/index.js';
import type { Caller } from './auth.js';
import type { GatewayContext } from './context.js';
import { sendError } from './reply.js';
import { discardBody, readBody } from './request.js';
import type { BodyLimit, Call, Route } from './route.js';
import { adminRoutes } from './routes-admin.js';
import { batchRoutes } from './routes-batch.js';
import { embeddingsRoutes } from './routes-embeddings.js';
import { messagesRoutes } from './routes-messages.js';
import { openaiRoutes } from './routes-openai.js';
import { opsRoutes } from './routes-ops.js';
import { responsesRoutes } from './routes-responses.js';

/** Every route, by API surface. */
export const routeTable: readonly Route[] = [...openaiRoutes, ...embeddingsRoutes, ...responsesRoutes, ...batchRoutes, ...messagesRoutes, ...adminRoutes, ...opsRoutes];

// A key's JSON is a few hundred bytes; anything near this is not a key.
const maxAdminBodyBytes = 64 * 1024;

// Looked up once per request: exact paths in a map, then the paths with `{name}` segments, then
// prefixes longest first so the narrower one wins.
const isPattern = (r: Route): boolean => r.prefix !== true && r.path.includes('{');
const exact = new Map<string, Route[]>();
for (const r of routeTable.filter((r) => r.prefix !== true && !isPattern(r))) exact.set(r.path, [...(exact.get(r.path) ?? []), r]);
const patterns = [...new Set(routeTable.filter(isPattern).map((r) => r.path))].map((p) => ({ path: p, segments: p.split('/') }));
const prefixes = [...new Set(routeTable.filter((r) => r.prefix === true).map((r) => r.path))].sort((a, b) => b.length - a.length);
const served = [...new Set(routeTable.map((r) => `${r.method === '*' ? '' : `${r.method} `}${r.path}${r.prefix === true ? '…' : ''}`))].join(', ');

// A pattern's `{name}` segments of `path`, decoded; undefined when the path does not fit it (a
// malformed escape does not fit: it names no key).
function paramsOf(segments: readonly string[], path: string): Record<string, string> | undefined {
  const parts = path.split('/');
  if (parts.length !== segments.length) return undefined;
  const params: Record<string, string> = {};
  for (const [i, seg] of segments.entries()) {
    const part = parts[i] ?? '';
    if (!(seg.startsWith('{') && seg.endsWith('}'))) {
      if (seg !== part) return undefined;
      continue;
    }
    if (part === '') return undefined;
    try {
      params[seg.slice(1, -1)] = decodeURIComponent(part);
    } catch (e) {
      if (e instanceof URIError) return undefined;
      throw e;
    }
  }
  return params;
}

/** The routes declared for `path` (all of one exact path, one pattern or one prefix), and its `{name}` segments. */
export function routesOf(path: string): { routes: readonly Route[]; params: Readonly<Record<string, string>> } {
  const found = exact.get(path);
  if (found !== undefined) return { routes: found, params: {} };
  for (const p of patterns) {
    const params = paramsOf(p.segments, path);
    if (params !== undefined) return { routes: routeTable.filter((r) => isPattern(r) && r.path === p.path), params };
  }
  const prefix = prefixes.find((p) => path.startsWith(p));
  return { routes: prefix === undefined ? [] : routeTable.filter((r) => r.prefix === true && r.path === prefix), params: {} };
}

/** Answers one request by the table; every failure becomes an error answer (or, once the answer started, a cut connection). */
export async function dispatch(ctx: GatewayContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = req.url ?? '/';
  const q = url.indexOf('?');
  const path = q < 0 ? url : url.slice(0, q);
  const method = req.method ?? 'GET';
  const { routes, params } = routesOf(path);
  const route = routes.find((r) => r.method === method || r.method === '*');
  try {
    if (routes.length === 0) throw new LlmgwError('LLMGW_NOT_FOUND', `no route ${method} ${path}; the gateway serves ${served}`);
    if (route === undefined) throw new LlmgwError('LLMGW_METHOD', `${path} takes ${routes.map((r) => r.method).join(' or ')}, not ${method}`);
    if (!opsRoutes.includes(route) && !admittedWhileDraining(ctx, res, route)) return;
    const call: Call = { req, res, path, params, body: () => bodyOf(ctx, req, route.body) };
    if (route.auth === 'none' || route.auth === 'handler') await route.run(ctx, call);
    else await route.run(ctx, call, authorize(ctx, route, call));
  } catch (e) {
    if (!res.headersSent) sendError(res, e, {}, (route ?? routes[0])?.api);
    else res.destroy();
  }
}

// API work is counted for the drain; once the gateway drains, each answer closes its connection so
// the client's next request opens one the balancer sends elsewhere, and past the grace it is refused.
// A refused request's body is left unread: the connection closes after the answer.
function admittedWhileDraining(ctx: GatewayContext, res: ServerResponse, route: Route): boolean {
  const drain = ctx.drain;
  if (drain.draining) {
    res.setHeader('connection', 'close');
    if (drain.refuses()) {
      const e = new LlmgwError('LLMGW_DRAINING', 'this gateway is shutting down and takes no new requests; send it to another gateway of the cluster (the load balancer does once /ready answers 503)');
      sendError(res, e, { 'retry-after': '1' }, route.api);
      return false;
    }
  }
  drain.track(res);
  return true;
}

function authorize(ctx: GatewayContext, route: Route, { req, path }: Call): Caller {
  const caller = ctx.authenticate(route.api === undefined ? req.headers.authorization : route.api.authorization(req.headers));
  if (route.auth === 'admin' && !caller.admin) {
    throw new LlmgwError('LLMGW_FORBIDDEN', `key "${caller.name}" may not call ${path}; use a key issued with admin: true (or admin: true in gateway.api_keys)`);
  }
  return caller;
}

function bodyOf(ctx: GatewayContext, req: IncomingMessage, limit: BodyLimit): Promise<Buffer> {
  const timeoutMs = ctx.o.config.bodyTimeoutMs;
  // A body refused as too large is read to its end and dropped (within the body timeout) before
  // the 413: a socket closed on unread bytes sends a reset, and a client still sending sees only
  // that, never the error (the openai SDK reported a connection error for an oversized upload).
  const read = (maxBytes: number, setting?: string): Promise<Buffer> =>
    readBody(req, maxBytes, timeoutMs, setting).catch(async (e: unknown) => {
      // One that asked `Expect: 100-continue` with a length over the limit was never invited, and sends nothing.
      const uninvited = /100-continue/i.test(req.headers.expect ?? '') && Number(req.headers['content-length']) > maxBytes;
      if (e instanceof LlmgwError && e.code === 'LLMGW_BODY_TOO_LARGE' && !uninvited) await discardBody(req, timeoutMs);
      throw e;
    });
  switch (limit) {
    case 'request':
      return read(ctx.o.config.maxBodyBytes);
    case 'admin':
      return read(maxAdminBodyBytes);
    case 'upload':
      return read(ctx.o.batches?.maxFileBytes ?? 0, 'gateway.batch.max_file_bytes');
    case 'none':
      return Promise.resolve(Buffer.alloc(0));
  }
}
