// The EPP's decision for one request, the same pipeline as serve's generate path: the body parsed
// and checked as the gateway parses it (chat, completions; Responses and Messages turned into the
// chat they become), the model checked and rewritten, admission (fairness by the gateway's fairness
// id), then the router's facts, tiers and commit. What it returns is where Envoy sends the request:
// the chosen endpoint, then the others as fallbacks, fastest estimated first.
import { randomUUID } from 'node:crypto';
import { maxWaitOf, requestPriority, type Permit, type PriorityClass } from '../admission/index.js';
import { messagesChat, responsesTurn, type ResponseStore } from '../apis/index.js';
import { LlmgwError, RequestError } from '../errors/index.js';
import { checkServed, concatBody, forwardedBody, readRequest, type GatewayContext } from '../gateway/index.js';
import { parseRequestJson, type Endpoint, type GenerationRequest } from '../limits/index.js';
import type { Routed } from '../routing/index.js';
import type { PoolEndpoint } from './endpoints.js';
import type { EppPool } from './pool.js';
import { hostPortOf } from './pool.js';

/** The headers the EPP reads its controls from (llm-d's names first, GIE's older ones after). */
export const controlHeaders = {
  fairness: ['x-llm-d-inference-fairness-id', 'x-gateway-inference-fairness-id'],
  rewrite: ['x-llm-d-model-name-rewrite', 'x-gateway-model-name-rewrite'],
} as const;

// llm-d's flow for requests that name none.
const defaultFairnessId = 'default-flow';

/** One request as the EPP has it once its body has all arrived. */
export interface EppRequest {
  readonly path: string;
  /** Lower-cased names, as Envoy sends them. */
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Buffer;
  /** Envoy's subset hint: the addresses (ip, or ip:port) the request may go to; undefined: any. */
  readonly subset: readonly string[] | undefined;
  readonly signal: AbortSignal;
}

/** Where a request goes, and what it holds until its answer ends. */
export interface Pick {
  readonly reqId: string;
  readonly endpoints: readonly PoolEndpoint[];
  /** The body Envoy forwards: the client's own bytes, or rewritten for a model rewrite. */
  readonly body: Buffer;
  readonly bodyChanged: boolean;
  /** The model the client asked for and the one the pods are asked for (equal without a rewrite). */
  readonly incomingModel: string;
  readonly targetModel: string;
  readonly routed: Routed | undefined;
}

const firstHeader = (h: Readonly<Record<string, string>>, names: readonly string[]): string | undefined => names.map((n) => h[n]).find((v) => v !== undefined && v !== '');

// The chat a path's body becomes for routing; the body itself goes to the pod as it came.
async function routedChat(path: string, body: Buffer, depth: number, responses: ResponseStore): Promise<{ endpoint: Endpoint; chat: Buffer } | undefined> {
  const p = path.split('?')[0] ?? '';
  if (p.endsWith('/chat/completions')) return { endpoint: 'chat', chat: body };
  if (p.endsWith('/completions')) return { endpoint: 'completions', chat: body };
  if (p.endsWith('/responses') || p.endsWith('/messages')) {
    const parsed = parseRequestJson(body, depth);
    let chat: unknown;
    if (p.endsWith('/messages')) chat = messagesChat(parsed, { counting: false });
    else {
      // The pod keeps the conversation a previous_response_id names, not the EPP: the turn is routed
      // by what it sends, whose prefix is the pod's cached conversation only in part.
      const own = typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed) ? { ...(parsed as Record<string, unknown>), previous_response_id: undefined, store: false } : parsed;
      chat = (await responsesTurn(own, { store: responses, owner: '', retentionMs: 0 })).chat;
    }
    const text = Buffer.from(JSON.stringify(chat));
    return { endpoint: 'chat', chat: concatBody([text], text.length) };
  }
  return undefined;
}

// Envoy names endpoints by address; llm-d compares only the ip of each entry, so a hint narrows to pods, not to ports.
function inSubset(e: PoolEndpoint, subset: readonly string[] | undefined): boolean {
  if (subset === undefined) return true;
  return subset.some((s) => {
    const i = s.lastIndexOf(':');
    const host = i > 0 && !s.endsWith(']') ? s.slice(0, i) : s;
    return host.replace(/^\[|\]$/g, '') === e.address;
  });
}

/** Decides requests for one pool with a gateway's routing parts. */
export class Picker {
  readonly #ctx: GatewayContext;
  readonly #pool: EppPool;

  constructor(ctx: GatewayContext, pool: EppPool) {
    this.#ctx = ctx;
    this.#pool = pool;
  }

  /** A request without a body (a GET): any healthy endpoint, as llm-d picks one at random. */
  anyEndpoint(subset: readonly string[] | undefined): PoolEndpoint {
    const ready = this.#pool.anyReady().filter((r) => inSubset(r.endpoint, subset));
    const r = ready[Math.floor(Math.random() * ready.length)];
    if (r === undefined) throw new LlmgwError('LLMGW_NO_REPLICA', 'the pool has no ready endpoint; see the EPP log (epp.endpoint_added, external.unhealthy)');
    return r.endpoint;
  }

  /** Decides `req`; throws an LlmgwError that errorReply turns into the client's answer. */
  async pick(req: EppRequest): Promise<Pick> {
    const ctx = this.#ctx;
    const cfg = ctx.o.config;
    if (req.body.length > cfg.maxBodyBytes) {
      throw new LlmgwError('LLMGW_BODY_TOO_LARGE', `request body of ${req.body.length} bytes is over the EPP's limit of ${cfg.maxBodyBytes}; send less or raise gateway.max_body_bytes`);
    }
    const shape = await routedChat(req.path, req.body, cfg.maxJsonDepth, ctx.responses);
    if (shape === undefined) return this.#unrouted(req);
    const g = await readRequest(shape.endpoint, shape.chat, ctx.policy, { pool: ctx.parsePool, bodies: ctx.bodies, parsed: (w) => ctx.metrics.bodyParses.inc(w) });
    const incomingModel = g.model;
    const targetModel = firstHeader(req.headers, controlHeaders.rewrite) ?? incomingModel;
    checkServed(this.#pool, targetModel);
    const { body, bodyChanged } = this.#forwarded(req.body, targetModel, incomingModel);
    const routedReq: GenerationRequest = targetModel === incomingModel ? g : { ...g, model: targetModel, body: { ...g.body, model: targetModel } };
    const ready = this.#pool.ready(targetModel);
    const candidates = ready.filter((r) => inSubset(r.endpoint, req.subset));
    if (candidates.length === 0) {
      const why = ready.length > 0 ? `none of its ${ready.length} ready endpoints is in the gateway's subset hint (${(req.subset ?? []).join(', ')})` : 'it has no ready endpoint';
      throw new LlmgwError('LLMGW_NO_REPLICA', `model "${targetModel}": ${why}; see the EPP log (epp.endpoint_added, external.unhealthy)`);
    }
    const priority: PriorityClass = requestPriority('interactive', req.headers['x-llmgw-priority'], g.body.priority);
    const maxWaitMs = maxWaitOf(req.headers, cfg.admission.maxWaitMs);
    const permit = await ctx.admission.admit({
      model: targetModel,
      tenant: firstHeader(req.headers, controlHeaders.fairness) ?? defaultFairnessId,
      weight: 1,
      priority,
      costTokens: g.promptTokenIds?.length ?? Math.ceil(shape.chat.length / 4),
      sizeBytes: shape.chat.length,
      maxWaitMs,
      signal: req.signal,
    });
    const reqId = req.headers['x-request-id'] ?? randomUUID();
    let routed: Routed;
    try {
      const r = await ctx.router.route(routedReq, permit.among(candidates), { signal: req.signal, body: shape.chat, deadlineMs: Math.max(0, maxWaitMs - permit.waitedMs) });
      routed = withAdmission(r, permit, priority);
    } catch (e) {
      permit.done();
      throw e;
    }
    ctx.metrics.decisions.inc({ tier: routed.tier });
    ctx.receipts.add(reqId, routed.receipt);
    const order = new Map(routed.receipt.candidates.map((c) => [c.replica, c.ttftMs]));
    const chosen = candidates.find((c) => c.id === routed.replica.id);
    const others = candidates.filter((c) => c !== chosen).sort((a, b) => (order.get(a.id) ?? Infinity) - (order.get(b.id) ?? Infinity));
    const endpoints = [...(chosen === undefined ? [] : [chosen]), ...others].map((c) => c.endpoint);
    return { reqId, endpoints, body, bodyChanged, incomingModel, targetModel, routed };
  }

  // A path the EPP does not parse (embeddings, a model list by POST): any endpoint, by load alone
  // would need the facts of a prompt it does not have, so it goes as a GET does.
  #unrouted(req: EppRequest): Pick {
    const e = this.anyEndpoint(req.subset);
    return { reqId: req.headers['x-request-id'] ?? randomUUID(), endpoints: [e], body: req.body, bodyChanged: false, incomingModel: '', targetModel: '', routed: undefined };
  }

  // The body Envoy forwards: the client's bytes, with the model replaced when the gateway asked for a rewrite.
  #forwarded(raw: Buffer, target: string, incoming: string): { body: Buffer; bodyChanged: boolean } {
    if (target === incoming) return { body: raw, bodyChanged: false };
    const parsed = parseRequestJson(raw, this.#ctx.o.config.maxJsonDepth);
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new RequestError('LLMGW_BAD_JSON', 'the request body is not a JSON object', null);
    const out = forwardedBody(raw, parsed as Record<string, unknown>, { model: target });
    return { body: typeof out === 'string' ? Buffer.from(out) : out, bodyChanged: true };
  }
}

// A routed request whose ticket gives its room back to admission, and whose receipt says how long it
// waited and why (as the gateway's generate path does).
function withAdmission(r: Routed, permit: Permit, priority: PriorityClass): Routed {
  const admission = { priority, queuedMs: Math.round(permit.waitedMs), ...(permit.why === undefined ? {} : { why: permit.why }) };
  return { ...r, ticket: permit.watch(r.ticket, r.replica.id), receipt: { ...r.receipt, admission } };
}

/** The endpoints as Envoy reads them from the header and the metadata: ip:port, comma separated. */
export const destinationOf = (endpoints: readonly PoolEndpoint[]): string => endpoints.map(hostPortOf).join(',');
