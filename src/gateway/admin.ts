// The admin API under /admin/v1/: keys issued, listed, revoked and rotated, and usage totals, for a
// caller with an admin key. Its own prefix, so a proxy in front can keep it off the public side.
// The store validates what it is given (a 400 names the field); this file only routes.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { LlmgwError, RequestError } from '../errors/index.js';
import type { Caller } from './auth.js';

/** What the admin API asks of the store (src/store's Store satisfies it). */
export interface KeyAdmin {
  listKeys(o: { revoked: boolean }): unknown[];
  getKey(idOrName: string): unknown;
  createKey(body: unknown): Promise<unknown>;
  revokeKey(idOrName: string): Promise<unknown>;
  rotateKey(idOrName: string): Promise<unknown>;
  usage(params: URLSearchParams): Promise<{ contentType: string; body: string }>;
}

/** The admin prefix. */
export const adminPrefix = '/admin/v1/';

const routesText = 'GET|POST /admin/v1/keys, GET|DELETE /admin/v1/keys/{id}, POST /admin/v1/keys/{id}/revoke, POST /admin/v1/keys/{id}/rotate, GET /admin/v1/usage';

function send(res: ServerResponse, status: number, contentType: string, text: string): void {
  res.writeHead(status, { 'content-type': contentType, 'content-length': Buffer.byteLength(text), 'cache-control': 'no-store', 'x-llmgw-replica': 'none', 'x-llmgw-route': 'none' });
  res.end(text);
}

async function jsonBody(body: () => Promise<Buffer>): Promise<unknown> {
  const raw = (await body()).toString('utf8');
  if (raw.trim() === '') return {};
  try {
    return JSON.parse(raw) as unknown;
  } catch (e) {
    throw new RequestError('LLMGW_BAD_JSON', `the body is not JSON (${e instanceof Error ? e.message : String(e)}); send a JSON object`, null, { cause: e });
  }
}

/** Answers one admin request; throws for the gateway's error reply (401, 403, 400, 404, 405). */
export async function handleAdmin(
  o: { admin: KeyAdmin | undefined; authenticate: (authorization: string | undefined) => Caller; body: () => Promise<Buffer> },
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const caller = o.authenticate(req.headers.authorization);
  if (!caller.admin) throw new LlmgwError('LLMGW_FORBIDDEN', `key "${caller.name}" may not use the admin API; use a key issued with admin: true (or admin: true in gateway.api_keys)`);
  const admin = o.admin;
  if (admin === undefined) throw new LlmgwError('LLMGW_NOT_FOUND', 'this gateway runs without a store, so it has no admin API; run it through llmgw serve (store: in llmgw.yaml)');
  const url = new URL(req.url ?? '/', 'http://gateway');
  const parts = url.pathname.slice(adminPrefix.length).split('/').map(decodeURIComponent);
  const method = req.method ?? 'GET';
  const wrong = (takes: string): LlmgwError => new LlmgwError('LLMGW_METHOD', `${url.pathname} takes ${takes}, not ${method}`);
  const json = (status: number, v: unknown): void => send(res, status, 'application/json', JSON.stringify(v));
  const [what, id, action, ...rest] = parts;
  if (what === 'keys' && rest.length === 0) {
    if (id === undefined || id === '') {
      if (method === 'GET') return json(200, { object: 'list', data: admin.listKeys({ revoked: url.searchParams.get('revoked') === 'true' }) });
      if (method === 'POST') return json(201, await admin.createKey(await jsonBody(o.body)));
      throw wrong('GET or POST');
    }
    if (action === undefined) {
      if (method === 'GET') {
        const k = admin.getKey(id);
        if (k === undefined) throw new LlmgwError('LLMGW_NOT_FOUND', `no key ${JSON.stringify(id)}; list them with GET /admin/v1/keys`);
        return json(200, k);
      }
      if (method === 'DELETE') return json(200, await admin.revokeKey(id));
      throw wrong('GET or DELETE');
    }
    if (action === 'revoke' || action === 'rotate') {
      if (method !== 'POST') throw wrong('POST');
      return json(200, action === 'revoke' ? await admin.revokeKey(id) : await admin.rotateKey(id));
    }
  }
  if (what === 'usage' && id === undefined) {
    if (method !== 'GET') throw wrong('GET');
    const u = await admin.usage(url.searchParams);
    return send(res, 200, u.contentType, u.body);
  }
  throw new LlmgwError('LLMGW_NOT_FOUND', `no admin route ${method} ${url.pathname}; the admin API serves ${routesText}`);
}
