// The OpenAI API's own routes: chat completions and completions (the generate path) and the model list.
import { generate } from './generate.js';
import { sendJson } from './reply.js';
import type { Route } from './route.js';
import { adaptersOf } from './served-models.js';

/** POST /v1/chat/completions, POST /v1/completions, GET /v1/models. */
export const openaiRoutes: readonly Route[] = [
  { method: 'POST', path: '/v1/chat/completions', auth: 'handler', body: 'request', admission: true, run: (ctx, call) => generate(ctx, 'chat', call) },
  { method: 'POST', path: '/v1/completions', auth: 'handler', body: 'request', admission: true, run: (ctx, call) => generate(ctx, 'completions', call) },
  {
    method: 'GET',
    path: '/v1/models',
    auth: 'key',
    body: 'none',
    admission: false,
    run: (ctx, { res }) => {
      const created = Math.floor(Date.now() / 1000);
      // As vLLM lists them: a base model is its own root, an adapter names its base as parent.
      const data = [
        ...ctx.o.directory.models().map((id) => ({ id, object: 'model', created, owned_by: 'llmgw', root: id, parent: null })),
        ...adaptersOf(ctx.o.directory).map((a) => ({ id: a.name, object: 'model', created, owned_by: 'llmgw', root: a.base, parent: a.base })),
      ];
      sendJson(res, 200, { object: 'list', data });
    },
  },
];
