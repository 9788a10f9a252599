// gateway.router.policy: each name maps to its tiers, the round-robin baseline takes turns whatever
// the caches hold, and a bad name is a config error naming the choices.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { ConfigError } from '../../src/errors/index.js';
import type { RouteFacts } from '../../src/routing/index.js';
import { parseGatewayConfig } from '../../src/gateway/index.js';
import { approximateTier, loadTier, preciseTier, residentTier, roundRobinTier, sessionTier, tiersOf } from '../../src/routing/index.js';
import { candidate } from '../gateway/replica-view.js';

const facts = (turn: number): RouteFacts => ({
  promptTokens: 1000,
  precise: new Map([['b', 992]]),
  approximate: undefined,
  ttftBudgetMs: 2000,
  boundedLoadFactor: 1.5,
  turn,
});

void test('policy: the default is precise, and every name maps to its tiers in order', () => {
  assert.equal(parseGatewayConfig(undefined).router.policy, 'precise');
  assert.deepEqual(tiersOf('precise'), [residentTier, preciseTier, sessionTier, approximateTier, loadTier]);
  assert.deepEqual(tiersOf('approximate'), [residentTier, sessionTier, approximateTier, loadTier]);
  assert.deepEqual(tiersOf('least-load'), [residentTier, loadTier]);
  assert.deepEqual(tiersOf('round-robin'), [roundRobinTier]);
  assert.equal(parseGatewayConfig({ router: { policy: 'round-robin' } }).router.policy, 'round-robin');
});

void test('policy: round-robin takes turns even past the replica holding the prefix', () => {
  const cs = [candidate('a'), candidate('b'), candidate('c')];
  const picks = [0, 1, 2, 3].map((turn) => roundRobinTier(facts(turn), cs)?.replica.id);
  assert.deepEqual(picks, ['a', 'b', 'c', 'a']);
});

void test('policy: an unknown name is a config error listing the policies', () => {
  assert.throws(
    () => parseGatewayConfig({ router: { policy: 'random' } }),
    (e: unknown) => e instanceof ConfigError && e.issues.some((i) => i.path === 'gateway.router.policy' && i.message.includes('round-robin')),
  );
});
