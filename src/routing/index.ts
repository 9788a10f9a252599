// routing/: which ready replica gets a request. One pipeline, each step testable alone:
//   facts.ts   what is known (tokens, index scores, the tree's estimate, load), as types
//   tiers.ts   pure functions of the facts, tried in order (policy.ts names the orders)
//   router.ts  gathers the facts within deadlines, asks the tiers, commits the choice
// beside them the token sources (tokens.ts), the learned cost model, the approximate prefix tree,
// the engines' queue polling and the receipts that say why a replica was chosen.
export { cachedBlocksOf, roomOrder, SlotCounts, type CountingIndex } from './cache-room.js';
export type { RouterConfig } from './config.js';
export { CostModel, costModelDefaults } from './cost-model.js';
export type { CostModelOptions, EngineScrape, FirstByte, ReplicaCost } from './cost-model.js';
export type {
  Answer,
  Candidate,
  Choice,
  DisaggView,
  ReplicaDirectory,
  ReplicaView,
  RouteFacts,
  RouteTier,
  Scorer,
  ScoreHashOptions,
  SessionPoint,
  SlotView,
  Tier,
  TokenizeApi,
  TokenizerLoads,
  TokenSource,
  TokenTarget,
  WaitOrSpill,
} from './facts.js';
export { defaultTiers, roundRobinTier, routePolicies, tiersOf } from './policy.js';
export type { RoutePolicy } from './policy.js';
export { PrefixTree } from './prefix-tree.js';
export { QueuePoller, runningOf, scrapeOf, waitingOf } from './queue-poller.js';
export { compactReceipt, ReceiptRing, receiptOf } from './receipt.js';
export type { CandidateReceipt, HopReceipt, PdReceipt, RouteReceipt } from './receipt.js';
export { pdPools, prefillCandidates } from './pd.js';
export type { HopFacts, PdPools, PrefillOutcome, PrefillSkip } from './pd.js';
export { effectiveBlocks, LoadBook, Router } from './router.js';
export type { AdapterHolders, Routed } from './router.js';
export { hashedReplica, replicaOfToken, sessionIdHeader, sessionTarget, sessionTier, sessionTokenHeader, sessionTokenOf } from './session.js';
export { approximateTier, boundedCount, loadTier, preciseTier, residentTier } from './tiers.js';
export { EngineTokenizer, PoolTokenizer, VerifiedTokens } from './tokens.js';
export type { LocalState, Seam, TokenizePool } from './tokens.js';
