// upstream/: the way to the engines. The hot-path HTTP/1.1 client and its connection pools
// (client.ts), sending a routed request and piping its answer back (proxy.ts), LoRA adapters
// loaded on demand on the replica a request was routed to (adapters.ts), and continuing a stream
// whose engine died mid-answer on another replica (migration.ts).
export { adapterMetrics } from './adapter-metrics.js';
export { adapterRoute, AdapterLoadError, AdapterResidency, listsAdapters } from './adapters.js';
export type {
  AdapterAccess,
  AdapterDirectory,
  AdapterLease,
  AdapterObserver,
  AdapterReplica,
  AdapterResidencyOptions,
  AdapterRoute,
  EngineCall,
} from './adapters.js';
export { UpstreamPool } from './client.js';
export type { UpstreamPoolOptions } from './client.js';
export { breakReasonOf, eventData, isErrorEvent, requestRefusal, StreamSplice } from './migration.js';
export type { BreakReason, Continuation, Refusal, SpliceUsage } from './migration.js';
export { migrationMetrics } from './migration-metrics.js';
export type { MigrationMetrics } from './migration-metrics.js';
export { answerText, isRetryable, pipeEvents, responseOf, sendUpstream, streamErrorEvent, usageOf } from './proxy.js';
export type { EventSplice, EventTranslator, ResponseFacts, StreamOutcome, UpstreamClients, UpstreamResponse, Usage } from './proxy.js';
export { bootstrapFor, nixlDecodeBody, nixlPrefillBody, nixlPrefillParams, returnedTransferParams, sglangBody } from './disagg.js';
export type { Bootstrap } from './disagg.js';
