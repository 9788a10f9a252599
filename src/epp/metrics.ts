// The EPP's own metrics, beside the gateway's routing metrics on the same registry: decisions by
// tier, answers given immediately, Envoy's fallbacks, discovery's skipped entries.
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

/** The EPP's metrics. */
export interface EppMetrics {
  readonly picks: Counter<'tier'>;
  readonly immediate: Counter<'status' | 'stage'>;
  readonly served: Counter<'outcome'>;
  readonly discoverySkipped: Counter<'reason'>;
  readonly decisionSeconds: Histogram;
  readonly streams: Gauge;
}

/** Registers the EPP's metrics on `registry`. */
export function eppMetrics(registry: Registry): EppMetrics {
  const registers = [registry];
  return {
    picks: new Counter({ name: 'llmgw_epp_picks_total', help: 'Requests given a destination, by routing tier (any: no body, or a path not routed by prompt).', labelNames: ['tier'], registers }),
    immediate: new Counter({ name: 'llmgw_epp_immediate_responses_total', help: 'Requests answered by the EPP itself (ImmediateResponse), by HTTP status and the phase that refused.', labelNames: ['status', 'stage'], registers }),
    served: new Counter({ name: 'llmgw_epp_served_total', help: 'Responses whose served endpoint Envoy reported: the chosen one, or a fallback.', labelNames: ['outcome'], registers }),
    discoverySkipped: new Counter({ name: 'llmgw_epp_discovery_skipped_total', help: 'Entries of the discovery file, or pods the InferencePool selects, left out of the endpoints, by why (counted at each new list).', labelNames: ['reason'], registers }),
    decisionSeconds: new Histogram({
      name: 'llmgw_epp_decision_seconds',
      help: "From a request's headers to its destination, in the EPP.",
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
      registers,
    }),
    streams: new Gauge({ name: 'llmgw_epp_streams', help: 'ext_proc streams open.', registers }),
  };
}
