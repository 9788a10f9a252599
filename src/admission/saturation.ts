// Saturation: whether a replica can take another request without it waiting for its first token
// behind a queue the gateway could have held instead. Measured, not guessed: from the requests this
// gateway sent that have not started answering, the engine's own waiting queue (which also holds
// other gateways' and direct clients' requests), and the prefill queued on it at its learned rate.
// Pure: the facts in, the room out.

import type { AdmissionConfig } from './config.js';
import { priorityClasses } from './priority.js';
import type { PriorityClass } from './priority.js';

/** One ready replica's load, as routing measures it. */
export interface ReplicaLoad {
  readonly id: string;
  /** Requests this gateway sent that have not started answering. */
  readonly waiting: number;
  /** Requests this gateway sent that have not ended (answering or not); absent: not counted. */
  readonly inFlight?: number | undefined;
  /** Requests waiting in the engine's own queue at its last scrape (vLLM's num_requests_waiting). */
  readonly engineWaiting: number;
  /** The engine's sequence slots, as learned from it when it was full; absent or 0: not known. */
  readonly engineSlots?: number | undefined;
  /** Uncached prompt tokens this gateway sent that the engine has not prefilled yet. */
  readonly queuedPrefillTokens: number;
  /** Its prefill rate as learned. */
  readonly prefillTokensPerS: number;
}

/** When a replica counts as saturated. */
export interface SaturationLimits {
  /** Requests waiting for their first token on one replica (ours or the engine's count, the larger). */
  readonly maxWaitingPerReplica: number;
  /** Queued prefill, in ms at the replica's rate, past which a new request would wait too long. */
  readonly maxQueuedPrefillMs: number;
  /** Requests in flight on one replica (answering or not) past which it takes no more; 0: no bound. */
  readonly maxInFlightPerReplica?: number | undefined;
}

/** How long a new request would wait on `r` for the prefill queued ahead of it, in ms. */
export const queuedPrefillMs = (r: ReplicaLoad): number => (r.queuedPrefillTokens * 1000) / Math.max(1, r.prefillTokensPerS);

/** How many more requests `r` takes before it is saturated (0: saturated). */
export function roomOn(r: ReplicaLoad, l: SaturationLimits): number {
  if (queuedPrefillMs(r) >= l.maxQueuedPrefillMs) return 0;
  const waitingRoom = l.maxWaitingPerReplica - Math.max(r.waiting, r.engineWaiting);
  const slots = l.maxInFlightPerReplica ?? 0;
  return Math.max(0, slots > 0 ? Math.min(waitingRoom, slots - (r.inFlight ?? 0)) : waitingRoom);
}

/** The rate the replicas prefill at together: the optimistic drain rate before any is measured. */
export function prefillRateOf(replicas: readonly ReplicaLoad[]): number {
  let rate = 0;
  for (const r of replicas) rate += Math.max(1, r.prefillTokensPerS);
  return rate;
}

/**
 * What saturates a replica of `slots` sequence slots (0: not known) for a request of class `p`:
 * every class below the highest leaves `reservedPerClass` waiting places and
 * `reservedSlotsPerClass` slots per class step free for the classes above it, never below one of
 * each; the highest class is bound by waiting places only.
 */
export function classLimits(cfg: AdmissionConfig, p: PriorityClass, slots = cfg.slotsPerReplica): SaturationLimits {
  const below = priorityClasses.indexOf(p);
  return {
    maxWaitingPerReplica: Math.max(1, cfg.maxWaitingPerReplica - below * cfg.reservedPerClass),
    maxQueuedPrefillMs: cfg.maxQueuedPrefillMs,
    // The highest class is not bound by slots (they are kept for it): it may still wait in the
    // engine's queue, so the engine starts the next one without waiting for the gateway to send it.
    maxInFlightPerReplica: slots > 0 && below > 0 ? Math.max(1, slots - below * cfg.reservedSlotsPerClass) : 0,
  };
}

/**
 * The slots admission counts on `r`: the operator's `slots_per_replica`, else what the engine
 * showed when it was full. Learning them is what lets equal keys from a YAML with nothing stated
 * of the engines keep their requests in the gateway's fair queue rather than the engine's own.
 */
export const slotsOf = (cfg: AdmissionConfig, r: ReplicaLoad): number => (cfg.slotsPerReplica > 0 ? cfg.slotsPerReplica : (r.engineSlots ?? 0));

/** Whether a class above `p` has a request waiting for its first token in `counts` (by class index). */
export function higherAwaitsFirstByte(counts: readonly number[] | undefined, p: PriorityClass): boolean {
  if (counts === undefined) return false;
  const below = priorityClasses.indexOf(p);
  for (let i = 0; i < below; i++) if ((counts[i] ?? 0) > 0) return true;
  return false;
}

/** What startsAmong reads of the requests this gateway has on each replica, by class index. */
export interface StartFacts {
  /** Per replica, requests routed there not yet answering: a prefill queued or running. */
  readonly awaitingFirstByte: ReadonlyMap<string, readonly number[]>;
  /** Per replica, requests placed a class lower for their tenant's share, not yet over (empty: not kept off). */
  readonly demotedOn: ReadonlyMap<string, readonly number[]>;
  /** The class index of the request placed. */
  readonly rank: number;
  /** Whether a lower class, or a tenant placed lower, is active: what it would meet. */
  readonly contended: boolean;
}

/**
 * Of the replicas `open` to a request not placed lower, those routing may choose it onto. First
 * where no request placed lower runs: kept off the reserved replicas, those fill their lanes'
 * slots, and routing, which knows nothing of tenants' shares, could send the polite tenant onto a
 * lane's full replica. Then, while it is contended, where nothing awaits its first token: a
 * prefill step runs to its end whatever arrives, so a request sent behind one (its own class's on
 * the reserved replica, a lower class's on a lane) waits out that prompt before its own, while a
 * replica only decoding holds it one decode step at most. Each narrowing is skipped when it leaves
 * nothing.
 */
export function startsAmong<R extends { readonly id: string }>(open: readonly R[], f: StartFacts): readonly R[] {
  const lowerOn = (by: ReadonlyMap<string, readonly number[]>, r: R): boolean => (by.get(r.id) ?? []).some((n, k) => k > f.rank && n > 0);
  const free = open.filter((r) => !lowerOn(f.demotedOn, r));
  const start = free.length > 0 ? free : open;
  if (!f.contended) return start;
  const quiet = start.filter((r) => !(f.awaitingFirstByte.get(r.id) ?? []).some((n) => n > 0));
  return quiet.length > 0 ? quiet : start;
}
