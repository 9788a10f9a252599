// Routing policies by name (gateway.router.policy): each is the list of tiers the router tries in
// order. Only `precise` is meant for production; the others exist so `llmgw bench e2e` can measure
// what each step of the precise design buys, on the same engines and the same trace.
import type { RouteTier } from './facts.js';
import { sessionTier } from './session.js';
import { approximateTier, loadTier, preciseTier, residentTier } from './tiers.js';

/** The default order of the tiers; session.ts says why the session tier sits where it does. */
export const defaultTiers: readonly RouteTier[] = [residentTier, preciseTier, sessionTier, approximateTier, loadTier];

/** The policies gateway.router.policy accepts. */
export const routePolicies = ['precise', 'approximate', 'least-load', 'round-robin'] as const;

/** One routing policy's name. */
export type RoutePolicy = (typeof routePolicies)[number];

/** Every replica in turn, whatever it holds or carries: the baseline a plain proxy gives. */
export const roundRobinTier: RouteTier = (f, cs) => {
  const pick = cs[f.turn % Math.max(1, cs.length)];
  return pick === undefined ? undefined : { replica: pick.view, tier: 'load', predictedCachedTokens: f.precise?.get(pick.view.id) ?? 0 };
};

/** The tiers a policy tries, in order; every one but round-robin first keeps on-demand adapters where they are loaded. */
export function tiersOf(policy: RoutePolicy): readonly RouteTier[] {
  switch (policy) {
    case 'precise':
      return defaultTiers;
    case 'approximate':
      return [residentTier, sessionTier, approximateTier, loadTier];
    case 'least-load':
      return [residentTier, loadTier];
    case 'round-robin':
      return [roundRobinTier];
  }
}
