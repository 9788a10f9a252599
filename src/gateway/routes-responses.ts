// OpenAI's Responses API: POST /v1/responses served as a chat (apis/ translates both ways and keeps
// stored responses for previous_response_id), and GET and DELETE of a stored response by its id.
import { deleteStoredResponse, responsesApi, responsesTurn, storedResponse } from '../apis/index.js';
import { generate } from './generate.js';
import type { ApiRoute } from './generate.js';
import { sendJson } from './reply.js';
import type { Route } from './route.js';

const responsesRoute: ApiRoute = {
  api: responsesApi,
  begin: (ctx, body, caller) => responsesTurn(body, { store: ctx.responses, owner: caller.name, retentionMs: ctx.o.config.responses.retentionS * 1000 }),
};

/** POST /v1/responses, GET and DELETE /v1/responses/{id}. */
export const responsesRoutes: readonly Route[] = [
  { method: 'POST', path: '/v1/responses', auth: 'handler', body: 'request', admission: true, api: responsesApi, run: (ctx, call) => generate(ctx, 'chat', call, responsesRoute) },
  // A stored response is its owner's: another key's id answers as not found.
  {
    method: 'GET',
    path: '/v1/responses/{id}',
    auth: 'key',
    body: 'none',
    admission: false,
    run: async (ctx, { res, params }, caller) => sendJson(res, 200, await storedResponse(ctx.responses, caller.name, params.id ?? '')),
  },
  {
    method: 'DELETE',
    path: '/v1/responses/{id}',
    auth: 'key',
    body: 'none',
    admission: false,
    run: async (ctx, { res, params }, caller) => sendJson(res, 200, await deleteStoredResponse(ctx.responses, caller.name, params.id ?? '')),
  },
];
