// The gateway's Prometheus metrics, registered on a registry passed in (tests make a fresh one).
// Values that live elsewhere (index size, events applied, in-flight) are read at scrape time from
// their owners instead of being pushed from inside their logic.
import { collectDefaultMetrics, Counter, Gauge, Histogram } from 'prom-client';
import type { Registry } from 'prom-client';
import type { IndexWriter } from '../kv/index.js';
import type { LoadBook, Tier, TokenizePool } from '../routing/index.js';

/** The metrics a gateway updates per request. */
export interface GatewayMetrics {
  readonly decisions: Counter<'tier'>;
  readonly routingSeconds: Histogram<'tier'>;
  readonly tokenizeSeconds: Histogram<'outcome'>;
  readonly requests: Counter<'endpoint' | 'status' | 'route'>;
  readonly ttftSeconds: Histogram<'route'>;
  readonly requestSeconds: Histogram<'route'>;
  readonly predictedCachedTokens: Counter<'tier'>;
  readonly reportedCachedTokens: Counter<'tier'>;
  readonly predictionErrorTokens: Histogram<'tier'>;
  readonly keyTokens: Counter<'key' | 'kind'>;
  readonly retries: Counter<'reason'>;
  readonly routingFallbacks: Counter<'stage' | 'reason'>;
  /** Local token ids compared with the engine's /tokenize (outcome: match, mismatch). */
  readonly tokenizeChecks: Counter<'model' | 'outcome'>;
  /** Where each model's local tokenizing stands: 1 on its current state. */
  readonly localTokenizeState: Gauge<'model' | 'state'>;
  /** Answered chats whose next turn was made ready in the pool (outcome: prepared, skipped). */
  readonly turnsPrepared: Counter<'model' | 'outcome'>;
  readonly prefillHops: Counter<'outcome'>;
  /** Request bodies parsed and checked, by the thread that did it and why there. */
  readonly bodyParses: Counter<'thread' | 'reason'>;
  /** Block keys a decision looked up in the cluster index. */
  readonly indexLookups: Histogram;
  /** Where a generation request's time went, one child per stage, held so a request looks up none. */
  readonly stages: Readonly<Record<RequestStage, Histogram.Internal<'stage'>>>;
}

/**
 * The stages of a generation request in order, as llmgw_gateway_request_stage_seconds splits its
 * time: auth (the key), body (reading it), parse (checking it, a client protocol's turn made a
 * chat), quota (the key's budget in the store), admission (the model's queue), tokenize and score
 * (routing's facts), decide (the tiers, the commit and the receipt), upstream (sent until the
 * engine's response head), answer (the engine's answer relayed), ledger (its usage row written),
 * finish (the metrics, the log line and the trace of a finished request).
 */
export const requestStages = ['auth', 'body', 'parse', 'quota', 'admission', 'tokenize', 'score', 'decide', 'upstream', 'answer', 'ledger', 'finish'] as const;

/** One stage of requestStages. */
export type RequestStage = (typeof requestStages)[number];

const tiers: readonly Tier[] = ['adapter', 'precise', 'session', 'approximate', 'load'];

// Bucket bounds of the gateway's own work (routing, tokenizing, a stage) and of an engine's answer.
const seconds = [0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1];
const latency = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120];

/** Creates and registers the gateway's metrics; `sources` are read when /metrics is scraped. */
export function gatewayMetrics(
  registry: Registry,
  sources: { writer?: IndexWriter | undefined; load: LoadBook; pool?: Pick<TokenizePool, 'stats'> | undefined },
): GatewayMetrics {
  const registers = [registry];
  const metrics = { ...decisionMetrics(registers), ...outcomeMetrics(registers), ...pathMetrics(registers) };
  registerIndexMetrics(registers, sources.writer);
  registerLoadMetrics(registers, sources);
  return metrics;
}

/** How routing decided and how long deciding and tokenizing took. */
function decisionMetrics(registers: Registry[]): Pick<GatewayMetrics, 'decisions' | 'routingSeconds' | 'tokenizeSeconds'> {
  const decisions = new Counter({
    name: 'llmgw_prefix_decisions_total',
    help: 'Routing decisions by the tier that decided (precise: KV events, approximate: prefix tree, load).',
    labelNames: ['tier'],
    registers,
  });
  // Every tier shows from the first scrape, so a rate() over it has a baseline.
  for (const t of tiers) decisions.inc({ tier: t }, 0);
  const routingSeconds = new Histogram({
    name: 'llmgw_gateway_routing_duration_seconds',
    help: 'Time to choose a replica, tokenize and scoring included.',
    labelNames: ['tier'],
    buckets: seconds,
    registers,
  });
  const tokenizeSeconds = new Histogram({
    name: 'llmgw_gateway_tokenize_duration_seconds',
    help: 'Time to get a prompt\'s token ids (outcome: local, engine, cached, failed).',
    labelNames: ['outcome'],
    buckets: seconds,
    registers,
  });
  return { decisions, routingSeconds, tokenizeSeconds };
}

/** What finished requests got: status and latency, the cache hits routing predicted against those the engine reported, tokens per key, retries. */
function outcomeMetrics(
  registers: Registry[],
): Pick<GatewayMetrics, 'requests' | 'ttftSeconds' | 'requestSeconds' | 'predictedCachedTokens' | 'reportedCachedTokens' | 'predictionErrorTokens' | 'keyTokens' | 'retries'> {
  const requests = new Counter({
    name: 'llmgw_gateway_requests_total',
    help: 'Finished client requests by endpoint, HTTP status and routing tier.',
    labelNames: ['endpoint', 'status', 'route'],
    registers,
  });
  const ttftSeconds = new Histogram({
    name: 'llmgw_gateway_time_to_first_byte_seconds',
    help: 'From request received to the first byte of the engine\'s answer.',
    labelNames: ['route'],
    buckets: latency,
    registers,
  });
  const requestSeconds = new Histogram({
    name: 'llmgw_gateway_request_duration_seconds',
    help: 'From request received to its last byte sent.',
    labelNames: ['route'],
    buckets: latency,
    registers,
  });
  const predictedCachedTokens = new Counter({
    name: 'llmgw_gateway_route_predicted_cached_tokens_total',
    help: 'Cached prompt tokens routing expected on the chosen replica (for requests whose engine reported usage).',
    labelNames: ['tier'],
    registers,
  });
  const reportedCachedTokens = new Counter({
    name: 'llmgw_gateway_route_reported_cached_tokens_total',
    help: 'Cached prompt tokens the engine reported (usage.prompt_tokens_details.cached_tokens).',
    labelNames: ['tier'],
    registers,
  });
  const predictionErrorTokens = new Histogram({
    name: 'llmgw_gateway_route_prediction_error_tokens',
    help: 'Reported minus predicted cached tokens per request: negative means routing expected a hit the engine did not have.',
    labelNames: ['tier'],
    buckets: [-32768, -8192, -2048, -512, -128, -16, 0, 16, 128, 512, 2048, 8192, 32768],
    registers,
  });
  const keyTokens = new Counter({
    name: 'llmgw_gateway_key_tokens_total',
    help: 'Tokens used per client key, from the engines\' usage (kind: prompt, completion).',
    labelNames: ['key', 'kind'],
    registers,
  });
  const retries = new Counter({
    name: 'llmgw_gateway_retries_total',
    help: 'Requests sent to a second replica after the first failed before answering.',
    labelNames: ['reason'],
    registers,
  });
  return { requests, ttftSeconds, requestSeconds, predictedCachedTokens, reportedCachedTokens, predictionErrorTokens, keyTokens, retries };
}

/** How a request's path went: routing facts that fell back, local tokenizing, index lookups, prepared turns, prefill hops, body parses, time per stage. */
function pathMetrics(
  registers: Registry[],
): Pick<GatewayMetrics, 'routingFallbacks' | 'tokenizeChecks' | 'localTokenizeState' | 'indexLookups' | 'turnsPrepared' | 'prefillHops' | 'bodyParses' | 'stages'> {
  const routingFallbacks = new Counter({
    name: 'llmgw_gateway_routing_fallbacks_total',
    help: 'Routing facts that could not be had (stage: tokenize, score), so a later tier decided.',
    labelNames: ['stage', 'reason'],
    registers,
  });
  const tokenizeChecks = new Counter({
    name: 'llmgw_gateway_tokenize_checks_total',
    help: 'Local token ids compared with a replica\'s /tokenize, by model and outcome (match, mismatch: local tokenizing is then off for that model).',
    labelNames: ['model', 'outcome'],
    registers,
  });
  const localTokenizeState = new Gauge({
    name: 'llmgw_gateway_tokenize_local_state',
    help: 'Local tokenizing per model: 1 on its state (loading, verifying, trusted, off: it disagreed with /tokenize, failed: it did not load).',
    labelNames: ['model', 'state'],
    registers,
  });
  const indexLookups = new Histogram({
    name: 'llmgw_gateway_index_lookups',
    help: 'Block keys a routing decision looked up in the cluster index. A chat\'s next turn looks up only what it added; lookups near its whole length turn after turn mean its replicas lose blocks of it between turns, or more blocks than the index remembers a replica losing (4096), which sends that replica\'s probe back to the start.',
    buckets: [0, 4, 16, 64, 256, 1024, 4096, 16384, 65536],
    registers,
  });
  const turnsPrepared = new Counter({
    name: 'llmgw_gateway_turns_prepared_total',
    help: "Answered chats whose next turn the pool encoded ahead from the answer (outcome: prepared; skipped: no answer text, a busy pool; short: a prompt under router.prepare_min_prompt_tokens), so that turn encodes only the user's new message.",
    labelNames: ['model', 'outcome'],
    registers,
  });
  const prefillHops = new Counter({
    name: 'llmgw_gateway_prefill_hops_total',
    help: 'Requests to a prefill/decode disaggregated pool by how the prefill hop went (sent; skipped: cached, decode-not-disaggregated, no-prefill-replica; failed: the prefill replica died, refused or returned no kv_transfer_params, or the decode refused them, and the decode replica ran the request whole).',
    labelNames: ['outcome'],
    registers,
  });
  const bodyParses = new Counter({
    name: 'llmgw_gateway_body_parses_total',
    help: 'Request bodies parsed and checked, by thread: worker for a body of 16 KiB or more (reason long); event-loop for a shorter one (short), or for a long one the pool could not take (pool-busy) or without a pool (no-pool), which stalls every other request meanwhile.',
    labelNames: ['thread', 'reason'],
    registers,
  });
  const stageSeconds = new Histogram({
    name: 'llmgw_gateway_request_stage_seconds',
    help: 'Time a generation request spent in each stage of the gateway (auth, body, parse, quota, admission, tokenize, score, decide, upstream: sent until the engine\'s response head, answer: relayed, ledger, finish: metrics and log line): where routing and the request path spend it.',
    labelNames: ['stage'],
    buckets: [0.00001, 0.00005, ...seconds],
    registers,
  });
  const stages = Object.fromEntries(requestStages.map((stage) => [stage, stageSeconds.labels({ stage })])) as Record<RequestStage, Histogram.Internal<'stage'>>;
  return { routingFallbacks, tokenizeChecks, localTokenizeState, indexLookups, turnsPrepared, prefillHops, bodyParses, stages };
}

/** The shared cluster index's size, events applied, deltas rejected and resyncs, read from its writer at each scrape. */
function registerIndexMetrics(registers: Registry[], writer: IndexWriter | undefined): void {
  new Gauge({
    name: 'llmgw_gateway_index_blocks',
    help: 'Entries in the shared cluster index.',
    registers,
    collect() {
      this.set(writer?.size ?? 0);
    },
  });
  let appliedSeen = 0;
  new Counter({
    name: 'llmgw_gateway_index_events_applied_total',
    help: 'Block additions and removals applied to the shared index.',
    registers,
    collect() {
      const now = writer?.stats.eventsApplied ?? 0;
      this.inc(now - appliedSeen);
      appliedSeen = now;
    },
  });
  const rejectedSeen = { 'not-owner': 0, 'no-slot': 0 };
  new Counter({
    name: 'llmgw_gateway_index_deltas_rejected_total',
    help: 'Deltas dropped: the sending node does not run that replica (not-owner), or the index has no slot left (no-slot).',
    labelNames: ['reason'],
    registers,
    collect() {
      const now = { 'not-owner': writer?.stats.rejected ?? 0, 'no-slot': writer?.stats.slotless ?? 0 };
      for (const reason of ['not-owner', 'no-slot'] as const) {
        this.inc({ reason }, now[reason] - rejectedSeen[reason]);
        rejectedSeen[reason] = now[reason];
      }
    },
  });
  const resetsSeen = new Map<string, number>();
  new Counter({
    name: 'llmgw_gateway_index_resyncs_total',
    help: 'Times a replica\'s blocks were cleared from the index, by reason (stream reset, restart, removed).',
    labelNames: ['reason'],
    registers,
    collect() {
      for (const [reason, n] of writer?.stats.resets ?? []) {
        this.inc({ reason }, n - (resetsSeen.get(reason) ?? 0));
        resetsSeen.set(reason, n);
      }
    },
  });
}

/** The tokenize pool's counts and each replica's load, read from their owners at each scrape. */
function registerLoadMetrics(registers: Registry[], sources: { load: LoadBook; pool?: Pick<TokenizePool, 'stats'> | undefined }): void {
  new Counter({
    name: 'llmgw_gateway_pool_tokenizes_total',
    help: 'Prompts the pool tokenized, by thread: event-loop for bodies of at most router.inline_tokenize_max_bytes once a worker has handed the loop the tokenizer tables, worker for the rest.',
    labelNames: ['thread'],
    registers,
    // The pool counts; the counter shows its totals as they are at the scrape.
    collect() {
      const stats = sources.pool?.stats;
      this.reset();
      this.inc({ thread: 'event-loop' }, stats?.inlineTokenizes ?? 0);
      this.inc({ thread: 'worker' }, stats?.pooledTokenizes ?? 0);
    },
  });
  const load = sources.load;
  new Gauge({
    name: 'llmgw_gateway_replica_in_flight',
    help: 'Requests this gateway has in flight on each replica.',
    labelNames: ['replica'],
    registers,
    collect() {
      for (const id of load.ids()) this.set({ replica: id }, load.get(id).inFlight);
    },
  });
  new Gauge({
    name: 'llmgw_gateway_replica_queued_prefill_tokens',
    help: 'Uncached prompt tokens routed to each replica and not yet answering.',
    labelNames: ['replica'],
    registers,
    collect() {
      for (const id of load.ids()) this.set({ replica: id }, load.get(id).queuedPrefillTokens);
    },
  });
}

// prom-client's totals of these are gauges named like counters, and each is only the sum of the
// same family by type: sum(nodejs_active_handles) says the same.
const GAUGES_NAMED_TOTAL = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'];

/**
 * Registers the process's own metrics under the names every Node.js dashboard reads (process_*,
 * nodejs_*; the event loop's delay is nodejs_eventloop_lag_p99_seconds and its kin, reset at
 * each scrape), less the gauges that break the counter naming rule.
 */
export function processMetrics(registry: Registry): void {
  collectDefaultMetrics({ register: registry });
  for (const name of GAUGES_NAMED_TOTAL) registry.removeSingleMetric(name);
}
