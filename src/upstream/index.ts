// upstream/: the way to the engines. The hot-path HTTP/1.1 client and its connection pools
// (client.ts), sending a routed request and piping its answer back (proxy.ts), and LoRA adapters
// loaded on demand on the replica a request was routed to (adapters.ts).
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
export { answerText, isRetryable, pipeEvents, sendUpstream, usageOf } from './proxy.js';
export type { StreamOutcome, UpstreamClients, UpstreamResponse, Usage } from './proxy.js';
