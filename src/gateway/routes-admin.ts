// The operator's API: keys, budgets and usage under /admin/v1/ (admin.ts), and the cluster views
// under /llmgw/<name> (`ctl nodes --gateway` reads them), both for admin keys only.
import { LlmgwError } from '../errors/index.js';
import { adminPrefix, handleAdmin } from './admin.js';
import { sendJson } from './reply.js';
import type { Route } from './route.js';

/** /admin/v1/* (every method; the admin API tells them apart) and GET /llmgw/{view}. */
export const adminRoutes: readonly Route[] = [
  {
    method: '*',
    path: adminPrefix,
    prefix: true,
    // The admin API words its own refusal (a key issued with admin: true, from the store).
    auth: 'handler',
    body: 'admin',
    admission: false,
    run: (ctx, { req, res, body }) => handleAdmin({ admin: ctx.o.store, authenticate: ctx.authenticate, body }, req, res),
  },
  // The cluster's nodes, addresses and placement are an operator's business: an admin key, as /debug/.
  {
    method: 'GET',
    path: '/llmgw/',
    prefix: true,
    auth: 'admin',
    body: 'none',
    admission: false,
    run: (ctx, { res, path, rest }) => {
      const view = Object.hasOwn(ctx.o.views ?? {}, rest) ? ctx.o.views?.[rest] : undefined;
      if (view === undefined) throw new LlmgwError('LLMGW_NOT_FOUND', `no view ${path}; the gateway has ${Object.keys(ctx.o.views ?? {}).map((v) => `/llmgw/${v}`).join(', ') || 'none'}`);
      sendJson(res, 200, view());
    },
  },
];
