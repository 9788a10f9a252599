// epp/: llmgw as the Gateway API Inference Extension's endpoint picker (the rest of this folder is k47a's).
//   endpoints.ts   the pool's endpoints and the discovery source shape
//   pool-pods.ts   an InferencePool and its pods as endpoints (pure)
//   kubernetes.ts  the pool and its pods watched through the Kubernetes API
export type { DiscoverySource, PoolEndpoint } from './endpoints.js';
export { labelSelectorOf, poolEndpoints, poolSelection } from './pool-pods.js';
export type { InferencePoolObject, PodObject, PodSkipReason, PoolSelection, SkippedPod } from './pool-pods.js';
export { inferencePoolGroup, inferencePoolVersion, watchInferencePool } from './kubernetes.js';
export type { KubernetesDiscovery, KubernetesDiscoveryCounts, WatchInferencePoolOptions } from './kubernetes.js';
