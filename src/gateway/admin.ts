// The admin API's handlers under /admin/v1/: keys issued, listed, updated, revoked and rotated, and usage
// totals. routes-admin.ts declares their routes (admin keys only); the store validates what it is
// given (a 400 names the field), so these only read the request and answer.
import type { ServerResponse } from 'node:http';
import { LlmgwError, RequestError } from '../errors/index.js';
import type { GatewayContext, KeyAdmin } from './context.js';
import type { Call } from './route.js';

// Keys and usage change with every call: a cache in between must not answer for the store.
function send(res: ServerResponse, status: number, contentType: string, text: string): void {
  res.writeHead(status, { 'content-type': contentType, 'content-length': Buffer.byteLength(text), 'cache-control': 'no-store', 'x-llmgw-replica': 'none', 'x-llmgw-route': 'none' });
  res.end(text);
}

const sendJson = (res: ServerResponse, status: number, v: unknown): void => send(res, status, 'application/json', JSON.stringify(v));

function storeOf(ctx: GatewayContext): KeyAdmin {
  const admin = ctx.o.store;
  if (admin === undefined) throw new LlmgwError('LLMGW_NOT_FOUND', 'this gateway runs without a store, so it has no admin API; run it through llmgw serve (store: in llmgw.yaml)');
  return admin;
}

const searchOf = (call: Call): URLSearchParams => new URL(call.req.url ?? '/', 'http://gateway').searchParams;

// `{id}` is a key's id or its name; the route table has decoded it.
function idOf(call: Call): string {
  return call.params.id ?? '';
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

/** GET /admin/v1/keys: every key (revoked ones too with ?revoked=true). */
export function listKeys(ctx: GatewayContext, call: Call): void {
  sendJson(call.res, 200, { object: 'list', data: storeOf(ctx).listKeys({ revoked: searchOf(call).get('revoked') === 'true' }) });
}

/** POST /admin/v1/keys: issues a key; the answer is the only time its secret is shown. */
export async function createKey(ctx: GatewayContext, call: Call): Promise<void> {
  const admin = storeOf(ctx);
  sendJson(call.res, 201, await admin.createKey(await jsonBody(call.body)));
}

/** GET /admin/v1/keys/{id}. */
export function getKey(ctx: GatewayContext, call: Call): void {
  const k = storeOf(ctx).getKey(idOf(call));
  if (k === undefined) throw new LlmgwError('LLMGW_NOT_FOUND', `no key ${JSON.stringify(idOf(call))}; list them with GET /admin/v1/keys`);
  sendJson(call.res, 200, k);
}

/** PATCH /admin/v1/keys/{id}: the limits, budgets, models, team or expiry it names; the key as GET answers it. */
export async function updateKey(ctx: GatewayContext, call: Call): Promise<void> {
  const admin = storeOf(ctx);
  sendJson(call.res, 200, await admin.updateKey(idOf(call), await jsonBody(call.body)));
}

/** DELETE /admin/v1/keys/{id} and POST /admin/v1/keys/{id}/revoke. */
export async function revokeKey(ctx: GatewayContext, call: Call): Promise<void> {
  sendJson(call.res, 200, await storeOf(ctx).revokeKey(idOf(call)));
}

/** POST /admin/v1/keys/{id}/rotate: a new secret for the same key, budget and usage. */
export async function rotateKey(ctx: GatewayContext, call: Call): Promise<void> {
  sendJson(call.res, 200, await storeOf(ctx).rotateKey(idOf(call)));
}

/** GET /admin/v1/usage: the ledger's totals, grouped and filtered by the query, as JSON or CSV. */
export async function usage(ctx: GatewayContext, call: Call): Promise<void> {
  const u = await storeOf(ctx).usage(searchOf(call));
  send(call.res, 200, u.contentType, u.body);
}
