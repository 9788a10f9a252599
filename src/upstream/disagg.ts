// The two bodies of a disaggregated request, as the engines' own proxies build them. Pure.
// vLLM's NIXL way (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py): the prefill replica
// gets the request with kv_transfer_params asking it to keep the blocks for a remote decode, one
// token, not streamed; its answer's kv_transfer_params (where the blocks are) go verbatim to the
// decode replica, which streams the answer. SGLang's way (its mini load balancer): both replicas get
// the same request with a bootstrap host, port and room at once, and meet at the prefill's bootstrap
// server; the prefill's answer is dropped.
import { randomInt } from 'node:crypto';

/** What vLLM's NIXL connector is asked on the prefill side: compute, keep the blocks, say where they are. */
export const nixlPrefillParams = {
  do_remote_decode: true,
  do_remote_prefill: false,
  remote_engine_id: null,
  remote_block_ids: null,
  remote_host: null,
  remote_port: null,
} as const;

type Body = Readonly<Record<string, unknown>>;

/** The prefill replica's body under NIXL: one token, not streamed, with the connector's request. */
export function nixlPrefillBody(body: Body): Record<string, unknown> {
  const out: Record<string, unknown> = { ...body, kv_transfer_params: { ...nixlPrefillParams }, stream: false, max_tokens: 1 };
  // The toy proxy's rules: a client's max_completion_tokens would win over max_tokens, a minimum
  // would make the prefill generate past its one token, and stream_options is refused unstreamed.
  if (Object.hasOwn(out, 'max_completion_tokens')) out.max_completion_tokens = 1;
  delete out.stream_options;
  delete out.min_tokens;
  delete out.min_completion_tokens;
  return out;
}

/** The decode replica's body under NIXL: the client's request with the prefill's kv_transfer_params as it returned them. */
export function nixlDecodeBody(body: Body, returned: unknown): Record<string, unknown> {
  return { ...body, kv_transfer_params: returned };
}

/** The kv_transfer_params a NIXL prefill answer carries, or why it carries none usable. */
export function returnedTransferParams(answer: unknown): { ok: true; params: Record<string, unknown> } | { ok: false; why: string } {
  const p = typeof answer === 'object' && answer !== null && 'kv_transfer_params' in answer ? answer.kv_transfer_params : undefined;
  if (typeof p !== 'object' || p === null || Array.isArray(p)) return { ok: false, why: 'its answer has no kv_transfer_params (is its engine started with --kv-transfer-config?)' };
  const params = Object.fromEntries(Object.entries(p));
  if (params.do_remote_prefill !== true) return { ok: false, why: 'its kv_transfer_params do not offer a remote prefill (do_remote_prefill is not true)' };
  return { ok: true, params };
}

/** Where a SGLang request's KV cache meets: the prefill replica's bootstrap server, and a room the two share. */
export interface Bootstrap {
  readonly host: string;
  readonly port: number;
  readonly room: number;
}

/** A fresh bootstrap room on the prefill replica at `host`:`port`; SGLang's balancer draws it at random below 2^63. */
export function bootstrapFor(host: string, port: number, room = randomInt(0, 2 ** 47)): Bootstrap {
  return { host, port, room };
}

/** The body both SGLang replicas get: the client's request and where to meet. */
export function sglangBody(body: Body, b: Bootstrap): Record<string, unknown> {
  return { ...body, bootstrap_host: b.host, bootstrap_port: b.port, bootstrap_room: b.room };
}
