// OpenAI's Batch API: /v1/files (upload JSONL with purpose batch, list, retrieve, content, delete)
// and /v1/batches (create, retrieve, list, cancel). The work is the batch service's (cli wires
// src/batch's); these rows only authenticate, read and answer. Everything is its key's own: another
// key's file or batch answers as not found.
import type { ServerResponse } from 'node:http';
import { LlmgwError } from '../errors/index.js';
import { parseRequestJson } from '../limits/index.js';
import { bearerKey, hashApiKey } from './auth.js';
import type { BatchApi } from './batch-api.js';
import type { GatewayContext } from './context.js';
import { sendJson } from './reply.js';
import type { Route } from './route.js';

function api(ctx: GatewayContext): BatchApi {
  const b = ctx.o.batches;
  if (b === undefined) throw new LlmgwError('LLMGW_NOT_FOUND', 'this gateway serves no Batch API: it runs without a store (llmgw serve has one; a bare gateway needs batches wired in)');
  return b;
}

const queryOf = (url: string | undefined): URLSearchParams => new URLSearchParams((url ?? '').split('?')[1] ?? '');

function sendText(res: ServerResponse, text: string): void {
  res.writeHead(200, { 'content-type': 'application/jsonl', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/** POST/GET /v1/files, GET/DELETE /v1/files/{id}, GET /v1/files/{id}/content, POST/GET /v1/batches, GET /v1/batches/{id}, POST /v1/batches/{id}/cancel. */
export const batchRoutes: readonly Route[] = [
  {
    method: 'POST',
    path: '/v1/files',
    auth: 'key',
    body: 'upload',
    admission: false,
    run: async (ctx, { req, res, body }, caller) => sendJson(res, 200, await api(ctx).upload(caller.name, req.headers['content-type'], await body())),
  },
  { method: 'GET', path: '/v1/files', auth: 'key', body: 'none', admission: false, run: async (ctx, { req, res }, caller) => sendJson(res, 200, await api(ctx).listFiles(caller.name, queryOf(req.url))) },
  { method: 'GET', path: '/v1/files/{id}', auth: 'key', body: 'none', admission: false, run: async (ctx, { res, params }, caller) => sendJson(res, 200, await api(ctx).file(caller.name, params.id ?? '')) },
  {
    method: 'DELETE',
    path: '/v1/files/{id}',
    auth: 'key',
    body: 'none',
    admission: false,
    run: async (ctx, { res, params }, caller) => sendJson(res, 200, await api(ctx).deleteFile(caller.name, params.id ?? '')),
  },
  {
    method: 'GET',
    path: '/v1/files/{id}/content',
    auth: 'key',
    body: 'none',
    admission: false,
    run: async (ctx, { res, params }, caller) => sendText(res, await api(ctx).fileContent(caller.name, params.id ?? '')),
  },
  {
    method: 'POST',
    path: '/v1/batches',
    auth: 'key',
    body: 'request',
    admission: false,
    // The batch's lines run as the key that created it, found again by its sha256 (the store keeps
    // only that); a gateway without keys runs them anonymously.
    run: async (ctx, { req, res, body }, caller) => {
      const sha256 = req.headers.authorization === undefined ? '' : hashApiKey(bearerKey(req.headers.authorization));
      sendJson(res, 200, await api(ctx).createBatch(caller.name, sha256, parseRequestJson(await body(), ctx.o.config.maxJsonDepth)));
    },
  },
  { method: 'GET', path: '/v1/batches', auth: 'key', body: 'none', admission: false, run: async (ctx, { req, res }, caller) => sendJson(res, 200, await api(ctx).listBatches(caller.name, queryOf(req.url))) },
  { method: 'GET', path: '/v1/batches/{id}', auth: 'key', body: 'none', admission: false, run: async (ctx, { res, params }, caller) => sendJson(res, 200, await api(ctx).batch(caller.name, params.id ?? '')) },
  {
    method: 'POST',
    path: '/v1/batches/{id}/cancel',
    auth: 'key',
    body: 'none',
    admission: false,
    run: async (ctx, { res, params }, caller) => sendJson(res, 200, await api(ctx).cancelBatch(caller.name, params.id ?? '')),
  },
];
