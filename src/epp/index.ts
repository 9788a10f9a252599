// epp/: llmgw as the Gateway API Inference Extension's endpoint picker. Envoy asks over ext_proc
// which endpoint of an InferencePool takes each request; the answer comes from the same routing
// pipeline as serve's (precise from the endpoints' KV events, the approximate tree, load; admission).
//   endpoints.ts       the pool's endpoints and the discovery source shape
//   file-discovery.ts  llm-d-router's file-discovery format, re-read on change
//   pool.ts            the endpoints as routing's replicas (health, KV subscriptions)
//   picker.ts          one request's decision
//   ext-proc.ts        one ext_proc stream, as llm-d-router's handlers answer it
//   server.ts          the listeners: ext_proc, gRPC health, metrics
//   pool-pods.ts       an InferencePool and its pods as endpoints (pure)
//   kubernetes.ts      the pool and its pods watched through the Kubernetes API
export { filledTemplate, parseEppConfig } from './config.js';
export type { EppConfig, FileDiscoveryConfig, KubernetesDiscoveryConfig, ListenConfig, PoolConfig } from './config.js';
export type { DiscoverySource, PoolEndpoint } from './endpoints.js';
export { bodyChunkBytes, bodyChunks, destinationKey, destinationNamespace, servedKey, subsetKey, subsetNamespace } from './envoy-messages.js';
export { FileDiscovery, fileDiscovery, parseEndpointsFile } from './file-discovery.js';
export type { SkipReason, Skipped } from './file-discovery.js';
export { eppMetrics } from './metrics.js';
export type { EppMetrics } from './metrics.js';
export { controlHeaders, destinationOf, Picker } from './picker.js';
export type { EppRequest, Pick } from './picker.js';
export { EppPool, hostPortOf } from './pool.js';
export { extProcDefinition, extProcService, startEpp } from './server.js';
export type { Epp, OpenDiscovery } from './server.js';
export { labelSelectorOf, poolEndpoints, poolSelection } from './pool-pods.js';
export type { InferencePoolObject, PodObject, PodSkipReason, PoolSelection, SkippedPod } from './pool-pods.js';
export { inferencePoolGroup, inferencePoolVersion, watchInferencePool } from './kubernetes.js';
export type { KubernetesDiscovery, KubernetesDiscoveryCounts, WatchInferencePoolOptions } from './kubernetes.js';
