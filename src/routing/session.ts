// Session affinity that needs no shared state between gateways. A client is told where its request
// went in a token it sends back (llm-d's x-session-token: the replica's id in base64), so any gateway
// it reaches next can send it to the same replica without having seen it before; with a secret the
// token carries an HMAC, so a client cannot forge placement onto a replica of its choosing. A client
// that names its conversation (X-Session-ID) instead is hashed over the replicas serving the model,
// the same way on every gateway that sees the same replicas.
//
// The tier sits after the precise one: the engines' own events say where a prefix is, which beats a
// guess by the conversation's past, and a replica the precise tier passed over for being saturated is
// not forced back on either. It sits before the approximate tree and the load: the tree is this
// gateway's own memory (another gateway's turns of the conversation are not in it), and a
// conversation sent where its earlier turns went builds its prefix in one cache instead of several.
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import type { RouteTier, SessionPoint } from './facts.js';
import { affinityCap, boundedCount, estimateMs } from './tiers.js';

/** The request header the token is sent back in, and the response header it is given in. */
export const sessionTokenHeader = 'x-session-token';
/** The request header naming the client's conversation. */
export const sessionIdHeader = 'x-session-id';

// 128 bits of HMAC-SHA256: forging one is 2^128 guesses; the whole 256 would only lengthen a header.
const macBytes = 16;

const macOf = (secret: string, replicaId: string): Buffer => createHmac('sha256', secret).update(replicaId).digest().subarray(0, macBytes);

/**
 * The token naming `replicaId`: without a secret llm-d's own, the id in standard base64; with one,
 * the id and its HMAC in base64url joined by a dot.
 */
export function sessionTokenOf(replicaId: string, secret: string): string {
  if (secret === '') return Buffer.from(replicaId).toString('base64');
  return `${Buffer.from(replicaId).toString('base64url')}.${macOf(secret, replicaId).toString('base64url')}`;
}

/** The replica id a token names, or undefined for one this secret did not sign (or that is not a token). */
export function replicaOfToken(token: string, secret: string): string | undefined {
  if (secret === '') {
    // Node's decoder skips what is not base64; a token that does not survive the round trip is not one.
    const id = Buffer.from(token, 'base64').toString('utf8');
    return id !== '' && Buffer.from(id).toString('base64') === token ? id : undefined;
  }
  const dot = token.indexOf('.');
  if (dot <= 0) return undefined;
  const id = Buffer.from(token.slice(0, dot), 'base64url').toString('utf8');
  const mac = Buffer.from(token.slice(dot + 1), 'base64url');
  if (id === '' || mac.length !== macBytes) return undefined;
  return timingSafeEqual(mac, macOf(secret, id)) ? id : undefined;
}

// A header sent twice counts once: the first, as for every header the gateway reads.
const firstOf = (v: string | readonly string[] | undefined): string | undefined => (typeof v === 'string' ? v : v?.[0]);

// A 64-bit weight of (session, replica); the replica with the highest weight owns the session.
const weightOf = (sessionId: string, replicaId: string): bigint => createHash('sha256').update(sessionId).update('\0').update(replicaId).digest().readBigUInt64BE(0);

/**
 * The replica among `replicaIds` that owns `sessionId`, by rendezvous hashing: every gateway with
 * the same replicas picks the same one, whatever their order, and a replica leaving moves only the
 * sessions it owned (a ring needs virtual nodes to spread a handful of replicas as evenly).
 */
export function hashedReplica(sessionId: string, replicaIds: readonly string[]): string | undefined {
  let best: { id: string; w: bigint } | undefined;
  for (const id of replicaIds) {
    const w = weightOf(sessionId, id);
    if (best === undefined || w > best.w || (w === best.w && id < best.id)) best = { id, w };
  }
  return best?.id;
}

/**
 * Where a request's session points among the replicas it may go to, by its headers (Node's, lower
 * case): the token's replica when the token is valid and that replica is among them, else the hashed X-Session-ID, else nowhere. A
 * token for a replica that is gone falls back to the id, then to the later tiers, as if new.
 */
export function sessionTarget(headers: Readonly<Record<string, string | readonly string[] | undefined>>, replicaIds: readonly string[], secret: string): SessionPoint | undefined {
  const h = { token: firstOf(headers[sessionTokenHeader]), sessionId: firstOf(headers[sessionIdHeader]) };
  const named = h.token === undefined || h.token === '' ? undefined : replicaOfToken(h.token, secret);
  if (named !== undefined && replicaIds.includes(named)) return { replicaId: named, via: 'token' };
  if (h.sessionId === undefined || h.sessionId === '') return undefined;
  const hashed = hashedReplica(h.sessionId, replicaIds);
  return hashed === undefined ? undefined : { replicaId: hashed, via: 'session-id' };
}

/**
 * The session tier: the replica the session points at, unless it is saturated by the same rule the
 * cache tiers break affinity by (its queue over the TTFT budget, or too many requests waiting), so a
 * hot session cannot pile onto one replica while others idle.
 */
export const sessionTier: RouteTier = (f, cs) => {
  const s = f.session;
  if (s === undefined) return undefined;
  const c = cs.find((x) => x.view.id === s.replicaId);
  if (c === undefined || estimateMs(c, 0) > f.ttftBudgetMs || boundedCount(c) >= affinityCap(f, cs)) return undefined;
  return { replica: c.view, tier: 'session', predictedCachedTokens: f.precise?.get(c.view.id) ?? f.approximate?.get(c.view.id) ?? 0 };
};
