// The `gateway.admission:` section: when requests queue in the gateway, how much may queue, and how
// long a request may wait there. Parsed once, every problem reported with its path.
import { deepFreeze, type Issues, type MapReader } from '../config/index.js';

/** The admission queue's knobs; the defaults suit a few replicas of a vLLM-like engine. */
export interface AdmissionConfig {
  /** false: every request goes straight to routing (the engines' own queues grow without bound). */
  readonly enabled: boolean;
  /** Bound on one model's queue, in requests. */
  readonly maxQueuedRequests: number;
  /** Bound on one model's queue, in request body bytes held. */
  readonly maxQueuedBytes: number;
  /** A replica with this many requests waiting for their first token is saturated. */
  readonly maxWaitingPerReplica: number;
  /** Waiting requests per replica each class leaves free for the classes above it. */
  readonly reservedPerClass: number;
  /**
   * The engine's sequence slots per replica (vLLM's --max-num-seqs), as the gateway counts them: its
   * own requests in flight there. 0: learned from each engine's /metrics once it is seen full.
   */
  readonly slotsPerReplica: number;
  /** Slots each class leaves free for the classes above it, so they start without preempting it. */
  readonly reservedSlotsPerClass: number;
  /**
   * Replicas left with no prefill at all when a lower class starts one, while a higher class is
   * active (0: none). Lower classes always keep at least one replica, and a starving one needs none idle.
   */
  readonly reservedReplicas: number;
  /**
   * true: the reserved replicas take no request of a tenant placed a class lower for holding more
   * than its share at all, and it fills every slot of the replicas left to it instead; false: they
   * take its decodes, only not its prefill, as they do a lower class's.
   */
  readonly reservedReplicasExclusive: boolean;
  /** A class is active this long after its last request, for `reservedReplicas`. */
  readonly activeWindowMs: number;
  /** A replica whose queued prefill takes this long to clear is saturated. */
  readonly maxQueuedPrefillMs: number;
  /** The longest a request waits in the queue when neither its client nor its key says less. */
  readonly maxWaitMs: number;
  /** A lower class waiting this long takes one dispatch in `starvationEvery`. */
  readonly starvationMs: number;
  readonly starvationEvery: number;
  /** How often a non-empty queue rereads the replicas' load (the engine's queue changes without telling us). */
  readonly pollIntervalMs: number;
  /**
   * With several gateways on one PostgreSQL: how often each publishes its tenants' holds to the
   * others and reads theirs, for the share rule (0: each gateway shares by its own requests alone).
   */
  readonly peerIntervalMs: number;
}

/** Defaults of the section. */
export const admissionDefaults: AdmissionConfig = deepFreeze({
  enabled: true,
  maxQueuedRequests: 10_000,
  maxQueuedBytes: 512 * 1024 * 1024,
  // llm-d's saturation detector uses 5 waiting requests; a few more keep a replica's batch full
  // while the gateway's dispatch reacts to a first byte.
  maxWaitingPerReplica: 8,
  // With 8: batch fills a replica to 1 waiting (8 - 2 x 4, never below 1), standard to 4,
  // interactive to 8. One batch request waiting per replica, not 4: bench/admission.ts measured the
  // extra first-token time of an interactive request under a batch flood going to batch prompts the
  // engine started together in one step, the one it waited behind or its own.
  reservedPerClass: 4,
  // No engine exports max_num_seqs: unstated, a replica's slots are what it ran while others waited.
  slotsPerReplica: 0,
  // With 4 slots: batch holds up to 2 in flight, standard 3; interactive is not bound by slots.
  reservedSlotsPerClass: 1,
  // One replica of two or more: an interactive request then always finds a replica whose running
  // step is a decode, not a prompt's prefill it must wait out.
  reservedReplicas: 1,
  // A polite tenant's request sent to a replica decoding an over-share flood waits for the decode
  // step under way (20 ms at the sim's 50 tokens/s), and its own step carries the flood's decodes.
  reservedReplicasExclusive: true,
  activeWindowMs: 10_000,
  maxQueuedPrefillMs: 2_000,
  maxWaitMs: 30_000,
  starvationMs: 5_000,
  starvationEvery: 10,
  pollIntervalMs: 20,
  // Two statements a round per gateway; a flood's holds change by a few requests in 200 ms.
  peerIntervalMs: 200,
});

/** Reads `gateway.admission` (absent: the defaults). */
export function parseAdmissionSection(m: MapReader | undefined, issues: Issues): AdmissionConfig {
  const d = admissionDefaults;
  if (m === undefined) return d;
  const out = {
    enabled: m.bool('enabled', d.enabled),
    maxQueuedRequests: m.int('max_queued_requests', d.maxQueuedRequests, 0, 10_000_000),
    maxQueuedBytes: m.int('max_queued_bytes', d.maxQueuedBytes, 0),
    maxWaitingPerReplica: m.int('max_waiting_per_replica', d.maxWaitingPerReplica, 1, 100_000),
    reservedPerClass: m.int('reserved_per_class', d.reservedPerClass, 0, 100_000),
    slotsPerReplica: m.int('slots_per_replica', d.slotsPerReplica, 0, 100_000),
    reservedSlotsPerClass: m.int('reserved_slots_per_class', d.reservedSlotsPerClass, 0, 100_000),
    reservedReplicas: m.int('reserved_replicas', d.reservedReplicas, 0, 100_000),
    reservedReplicasExclusive: m.bool('reserved_replicas_exclusive', d.reservedReplicasExclusive),
    activeWindowMs: m.int('active_window_ms', d.activeWindowMs, 0, 3_600_000),
    maxQueuedPrefillMs: m.int('max_queued_prefill_ms', d.maxQueuedPrefillMs, 1),
    maxWaitMs: m.int('max_wait_ms', d.maxWaitMs, 0, 3_600_000),
    starvationMs: m.int('starvation_ms', d.starvationMs, 0),
    starvationEvery: m.int('starvation_every', d.starvationEvery, 2, 1_000),
    pollIntervalMs: m.int('poll_interval_ms', d.pollIntervalMs, 1, 10_000),
    peerIntervalMs: m.int('peer_interval_ms', d.peerIntervalMs, 0, 10_000),
  };
  if (out.maxWaitMs > 0 && out.starvationMs >= out.maxWaitMs) {
    issues.push({
      path: m.at('starvation_ms'),
      message: `${out.starvationMs} is not below max_wait_ms (${out.maxWaitMs}): a lower class would be refused before the starvation rule ever served it; lower starvation_ms`,
    });
  }
  return deepFreeze(out);
}

/** The keys of the section, for the gateway's reader. */
export const admissionKeys = [
  'enabled',
  'max_queued_requests',
  'max_queued_bytes',
  'max_waiting_per_replica',
  'reserved_per_class',
  'slots_per_replica',
  'reserved_slots_per_class',
  'reserved_replicas',
  'reserved_replicas_exclusive',
  'active_window_ms',
  'max_queued_prefill_ms',
  'max_wait_ms',
  'starvation_ms',
  'starvation_every',
  'poll_interval_ms',
  'peer_interval_ms',
] as const;
