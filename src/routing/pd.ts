// Prefill/decode disaggregation's routing rules, pure: which replicas may decode and which may
// prefill, and whether a request needs the prefill hop at all. The decode replica is chosen first,
// by the router's usual tiers (cached prefix and load: it holds the request for its whole answer,
// and the next turn finds its cache there); the prefill replica second, by the same tiers among the
// prefill pool (its cache and the prefill queued on it), as llm-d's and vllm-project/router's do.
import type { ReplicaView } from './facts.js';

/** Why a disaggregated request went to its decode replica whole. */
export type PrefillSkip =
  /** The decode replica caches all but at most gateway.router.pd_skip_prefill_tokens of the prompt. */
  | 'cached'
  /** The decode replica chosen moves no KV cache (no role): it serves whole requests. */
  | 'decode-not-disaggregated'
  /** No ready prefill replica speaks the decode replica's protocol. */
  | 'no-prefill-replica';

/** How the prefill hop ended, for the metric, the receipt and the trace. */
export type PrefillOutcome = 'sent' | PrefillSkip | 'failed';

/** The pools of one model's ready replicas; undefined when none prefills for others (no disaggregation). */
export interface PdPools {
  /** Replicas that may hold a request for its answer: decode, both, and those without a role. */
  readonly decode: readonly ReplicaView[];
  /** Replicas that may compute a prompt for another to decode: prefill and both. */
  readonly prefill: readonly ReplicaView[];
}

/** Splits ready replicas by role, or undefined when no replica has the prefill role. */
export function pdPools(replicas: readonly ReplicaView[]): PdPools | undefined {
  if (!replicas.some((r) => r.disagg?.role === 'prefill')) return undefined;
  const decode = replicas.filter((r) => r.disagg?.role !== 'prefill');
  const prefill = replicas.filter((r) => r.disagg?.role === 'prefill' || r.disagg?.role === 'both');
  // Every decode replica gone (all restarting): a prefill replica still computes a whole answer,
  // which is slower than a split but better than a 503.
  return decode.length === 0 ? { decode: prefill, prefill: [] } : { decode, prefill };
}

/** What decides the hop: the prompt's length, what the chosen decode replica caches of it, the threshold. */
export interface HopFacts {
  readonly promptTokens: number;
  readonly decodeCachedTokens: number;
  readonly skipPrefillTokens: number;
  readonly decode: ReplicaView;
  readonly prefill: readonly ReplicaView[];
}

/** The prefill replicas to route among, or why the request goes to its decode replica whole. */
export function prefillCandidates(f: HopFacts): { readonly hop: true; readonly candidates: readonly ReplicaView[] } | { readonly hop: false; readonly why: PrefillSkip } {
  const protocol = f.decode.disagg?.protocol;
  if (protocol === undefined) return { hop: false, why: 'decode-not-disaggregated' };
  // What the decode replica would compute itself is short: a hop, a transfer and a second queue
  // cost more than prefilling it in place (vllm-project/router PR #130 measured 256 tokens).
  if (f.promptTokens - f.decodeCachedTokens <= f.skipPrefillTokens) return { hop: false, why: 'cached' };
  const candidates = f.prefill.filter((r) => r.id !== f.decode.id && r.disagg?.protocol === protocol);
  return candidates.length === 0 ? { hop: false, why: 'no-prefill-replica' } : { hop: true, candidates };
}
