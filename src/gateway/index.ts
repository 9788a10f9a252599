// The gateway's public surface: the server, its config section, and the interfaces the agent's
// replicas and the kv index satisfy structurally.
export { adapterRoute, AdapterLoadError, AdapterResidency, listsAdapters } from './adapters.js';
export type { AdapterAccess, AdapterDirectory, AdapterLease, AdapterObserver, AdapterReplica, AdapterResidencyOptions, AdapterRoute, EngineCall } from './adapters.js';
export { hashApiKey, Quotas, authenticator } from './auth.js';
export type { Caller } from './auth.js';
export { gatewayDefaults, parseGatewayConfig, parseGatewaySection, poolOptionsOf } from './config.js';
export type { AdaptersConfig, ApiKeyConfig, GatewayConfig, RouterConfig, UpstreamConfig } from './config.js';
export { CostModel, costModelDefaults } from './cost-model.js';
export type { CostModelOptions, EngineScrape, FirstByte, ReplicaCost } from './cost-model.js';
export type { ActorSource, DebugActor, DebugTransition } from './debug.js';
export { errorReply, RateLimitError, UpstreamError } from './errors.js';
export { RequestError } from '../errors/index.js';
export type { ErrorReply } from './errors.js';
export { anyRank, IndexWriter } from './index-writer.js';
export type { HeldSlot, ReplicaSlots, SharedIndex } from './index-writer.js';
export { roundRobinTier, routePolicies, tiersOf } from './policy.js';
export type { RoutePolicy } from './policy.js';
export { PrefixTree } from './prefix-tree.js';
export { scrapeOf } from './queue-poller.js';
export { compactReceipt, ReceiptRing, receiptOf } from './receipt.js';
export type { CandidateReceipt, RouteReceipt } from './receipt.js';
export { concatBody, forwardedBody, keptBodies, readRequest } from './request.js';
export type { RequestParsePool } from './request.js';
export { defaultRequestPolicy, parseGenerationRequest } from '../limits/index.js';
export type { Endpoint, GenerationRequest, RequestPolicy } from '../limits/index.js';
export {
  approximateTier,
  defaultTiers,
  effectiveBlocks,
  loadTier,
  LoadBook,
  preciseTier,
  residentTier,
  Router,
} from './router.js';
export type {
  AdapterHolders,
  Candidate,
  Choice,
  ReplicaDirectory,
  ReplicaView,
  RouteFacts,
  RouteTier,
  Scorer,
  ScoreHashOptions,
  Tier,
} from './router.js';
export { startGateway } from './server.js';
export { UpstreamPool } from './upstream-client.js';
export type { Gateway, GatewayOptions } from './server.js';
