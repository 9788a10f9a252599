// Receipts from the very facts the tiers saw: a holder that wins says how much it holds; a holder
// too busy to be chosen for its cache is marked saturated and named in the reason; the ring keeps
// the newest receipts only.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import type { Candidate, RouteFacts } from '../../src/routing/index.js';
import { compactReceipt, loadTier, preciseTier, ReceiptRing, receiptOf } from '../../src/routing/index.js';
import { candidate, replicaView } from '../gateway/replica-view.js';

const cand = (id: string, queued: number): Candidate => candidate(id, { queuedPrefillTokens: queued, prefillTokensPerS: 10_000 });
const facts: RouteFacts = { promptTokens: 8000, precise: new Map([['a', 7984], ['b', 0]]), approximate: undefined, ttftBudgetMs: 2000, boundedLoadFactor: 0, turn: 0 };

void test('receipt: the winning holder, its hit and the estimates against the other replica', () => {
  const cs = [cand('a', 0), cand('b', 0)];
  const choice = preciseTier(facts, cs);
  assert.ok(choice);
  const r = receiptOf('precise', facts, cs, choice, () => undefined);
  assert.deepEqual([r.tier, r.winner], ['precise', 'a']);
  const [a, b] = r.candidates;
  assert.deepEqual([a?.cachedTokens, a?.queueMs, a?.ttftMs, a?.saturated], [7984, 0, 1.6, false]);
  assert.deepEqual([b?.cachedTokens, b?.ttftMs], [0, 800]);
  assert.equal(r.reason, 'holds 7984 of 8000 prompt tokens (precise); est. TTFT 1.6 ms against b 800 ms');
  assert.equal(compactReceipt(r), 'tier=precise; to=a; a=7984c,0q,2ms; b=0c,0q,800ms');
});

void test('receipt: a holder whose queue is over the budget is marked saturated and named', () => {
  // 25k tokens queued at 10k tokens/s is 2.5 s, over the 2 s budget.
  const cs = [cand('a', 25_000), cand('b', 0)];
  assert.equal(preciseTier(facts, cs), undefined);
  const choice = loadTier(facts, cs);
  assert.ok(choice);
  const r = receiptOf('precise', facts, cs, choice, () => undefined);
  assert.deepEqual([r.tier, r.winner, r.candidates[0]?.saturated, r.candidates[0]?.queueMs], ['load', 'b', true, 2500]);
  assert.match(r.reason, /^holders a saturated \(queue over 2000 ms/);
  assert.match(compactReceipt(r), /a=7984c,25000q,2502ms!/);
});

void test('receipt: the ring keeps the newest receipts and forgets the oldest', () => {
  const ring = new ReceiptRing(2);
  const cs = [cand('a', 0)];
  const r = receiptOf('precise', facts, cs, { replica: replicaView('a'), tier: 'load', predictedCachedTokens: 0 }, () => undefined);
  for (const id of ['x', 'y', 'z']) ring.add(id, r);
  assert.equal(ring.get('x'), undefined);
  assert.deepEqual(ring.recent(5).map((e) => e.reqId), ['z', 'y']);
});
