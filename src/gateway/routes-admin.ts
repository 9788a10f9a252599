// The operator's API: keys, budgets and usage under /admin/v1/ (admin.ts), and the cluster views
// under /llmgw/{view} (`ctl nodes --gateway` reads them), all for admin keys only. /admin/v1/ is a
// prefix of its own, so a proxy in front can keep it off the public side.
import { LlmgwError } from '../errors/index.js';
import { createKey, getKey, listKeys, revokeKey, rotateKey, updateKey, usage } from './admin.js';
import { sendJson } from './reply.js';
import type { Route } from './route.js';

/** The keys and usage routes, and GET /llmgw/{view}. */
export const adminRoutes: readonly Route[] = [
  { method: 'GET', path: '/admin/v1/keys', auth: 'admin', body: 'none', admission: false, run: listKeys },
  { method: 'POST', path: '/admin/v1/keys', auth: 'admin', body: 'admin', admission: false, run: createKey },
  { method: 'GET', path: '/admin/v1/keys/{id}', auth: 'admin', body: 'none', admission: false, run: getKey },
  { method: 'PATCH', path: '/admin/v1/keys/{id}', auth: 'admin', body: 'admin', admission: false, run: updateKey },
  { method: 'DELETE', path: '/admin/v1/keys/{id}', auth: 'admin', body: 'none', admission: false, run: revokeKey },
  { method: 'POST', path: '/admin/v1/keys/{id}/revoke', auth: 'admin', body: 'none', admission: false, run: revokeKey },
  { method: 'POST', path: '/admin/v1/keys/{id}/rotate', auth: 'admin', body: 'none', admission: false, run: rotateKey },
  { method: 'GET', path: '/admin/v1/usage', auth: 'admin', body: 'none', admission: false, run: usage },
  // The cluster's nodes, addresses and placement are an operator's business: an admin key, as /debug/.
  {
    method: 'GET',
    path: '/llmgw/{view}',
    auth: 'admin',
    body: 'none',
    admission: false,
    run: (ctx, { res, path, params }) => {
      const name = params.view ?? '';
      const view = Object.hasOwn(ctx.o.views ?? {}, name) ? ctx.o.views?.[name] : undefined;
      if (view === undefined) throw new LlmgwError('LLMGW_NOT_FOUND', `no view ${path}; the gateway has ${Object.keys(ctx.o.views ?? {}).map((v) => `/llmgw/${v}`).join(', ') || 'none'}`);
      sendJson(res, 200, view());
    },
  },
];
