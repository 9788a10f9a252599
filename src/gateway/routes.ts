// The gateway's route table: every method and path it answers, and what each needs before its handler
// runs. To add a route, declare it in the routes-<surface>.ts of its API (a new surface gets a new
// file) and add that file's list below; dispatch() finds it, checks its key, bounds its body and turns
// whatever it throws into the OpenAI (or its protocol's) error.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { LlmgwError } from '../errors/index.js';
import type { Caller } from './auth.js';
import type { GatewayContext } from './context.js';
import { sendError } from './reply.js';
import { readBody } from './request.js';
import type { BodyLimit, Call, Route } from './route.js';
import { adminRoutes } from './routes-admin.js';
import { messagesRoutes } from './routes-messages.js';
import { openaiRoutes } from './routes-openai.js';
import { opsRoutes } from './routes-ops.js';
import { responsesRoutes } from './routes-responses.js';

/** Every route, by API surface. */
export const routeTable: readonly Route[] = [...openaiRoutes, ...responsesRoutes, ...messagesRoutes, ...adminRoutes, ...opsRoutes];

// A key's JSON is a few hundred bytes; anything near this is not a key.
const maxAdminBodyBytes = 64 * 1024;

// Looked up once per request: exact paths in a map, prefixes longest first so the narrower one wins.
const exact = new Map<string, Route[]>();
for (const r of routeTable.filter((r) => r.prefix !== true)) exact.set(r.path, [...(exact.get(r.path) ?? []), r]);
const prefixes = [...new Set(routeTable.filter((r) => r.prefix === true).map((r) => r.path))].sort((a, b) => b.length - a.length);
const served = [...new Set(routeTable.map((r) => `${r.method === '*' ? '' : `${r.method} `}${r.path}${r.prefix === true ? '…' : ''}`))].join(', ');

/** The routes declared for `path` (all of one exact path or one prefix), and what follows a prefix. */
function routesOf(path: string): { routes: readonly Route[]; rest: string } {
  const found = exact.get(path);
  if (found !== undefined) return { routes: found, rest: '' };
  const prefix = prefixes.find((p) => path.startsWith(p));
  return prefix === undefined ? { routes: [], rest: '' } : { routes: routeTable.filter((r) => r.prefix === true && r.path === prefix), rest: path.slice(prefix.length) };
}

/** Answers one request by the table; every failure becomes an error answer (or, once the answer started, a cut connection). */
export async function dispatch(ctx: GatewayContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = req.url ?? '/';
  const q = url.indexOf('?');
  const path = q < 0 ? url : url.slice(0, q);
  const method = req.method ?? 'GET';
  const { routes, rest } = routesOf(path);
  const route = routes.find((r) => r.method === method || r.method === '*');
  try {
    if (routes.length === 0) throw new LlmgwError('LLMGW_NOT_FOUND', `no route ${method} ${path}; the gateway serves ${served}`);
    if (route === undefined) throw new LlmgwError('LLMGW_METHOD', `${path} takes ${routes.map((r) => r.method).join(' or ')}, not ${method}`);
    const call: Call = { req, res, path, rest, body: () => bodyOf(ctx, req, route.body) };
    if (route.auth === 'none' || route.auth === 'handler') await route.run(ctx, call);
    else await route.run(ctx, call, authorize(ctx, route, call));
  } catch (e) {
    if (!res.headersSent) sendError(res, e, {}, (route ?? routes[0])?.api);
    else res.destroy();
  }
}

function authorize(ctx: GatewayContext, route: Route, { req, path }: Call): Caller {
  const caller = ctx.authenticate(route.api === undefined ? req.headers.authorization : route.api.authorization(req.headers));
  if (route.auth === 'admin' && !caller.admin) throw new LlmgwError('LLMGW_FORBIDDEN', `key "${caller.name}" may not read ${path}; use a key with admin: true in gateway.api_keys`);
  return caller;
}

function bodyOf(ctx: GatewayContext, req: IncomingMessage, limit: BodyLimit): Promise<Buffer> {
  const timeoutMs = ctx.o.config.bodyTimeoutMs;
  switch (limit) {
    case 'request':
      return readBody(req, ctx.o.config.maxBodyBytes, timeoutMs);
    case 'admin':
      return readBody(req, maxAdminBodyBytes, timeoutMs);
    case 'none':
      return Promise.resolve(Buffer.alloc(0));
  }
}
