// Receipts from the very facts the tiers saw: a holder that wins says how much it holds; a holder
// too busy to be chosen for its cache is marked saturated and named in the reason; the ring keeps
// the newest receipts only.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import type { Candidate, RouteFacts } from '../../src/routing/index.js';
import { compactReceipt, loadTier, preciseTier, ReceiptRing, receiptOf, residentTier } from '../../src/routing/index.js';
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

void test('receipt: a replica chosen for the on-demand adapter it holds says so, in its tier and its reason', () => {
  const cs = [cand('a', 0), cand('b', 0), cand('c', 0)];
  const byLoad = { ...facts, precise: new Map<string, number>(), resident: new Set(['c', 'b']) };
  const load = residentTier(byLoad, cs);
  assert.ok(load);
  const r = receiptOf('precise', byLoad, cs, load, () => undefined);
  assert.deepEqual([r.tier, r.winner], ['adapter', 'b']);
  assert.equal(r.reason, "holds the request's adapter (held by b, c); of those it is the least loaded (0 in flight, 0 tokens queued)");
  assert.match(compactReceipt(r), /^tier=adapter; to=b;/);
  const byPrefix = { ...facts, resident: new Set(['a', 'b']) };
  const prefix = residentTier(byPrefix, cs);
  assert.ok(prefix);
  assert.equal(receiptOf('precise', byPrefix, cs, prefix, () => undefined).reason, "holds the request's adapter (held by a, b); of those it holds 7984 of 8000 prompt tokens");
});

void test('receipt: an adapter that is held nowhere, or only on busy replicas, is named as loading where the load tier chose', () => {
  const cs = [cand('a', 25_000), cand('b', 0)];
  for (const [resident, why] of [[new Set<string>(), 'adapter held nowhere yet, loads here; '], [new Set(['a']), 'adapter holders a over the TTFT budget, loads here too; ']] as const) {
    const f = { ...facts, resident };
    assert.equal(residentTier(f, cs), undefined);
    const choice = loadTier(f, cs);
    assert.ok(choice);
    const r = receiptOf('precise', f, cs, choice, () => undefined);
    assert.equal(r.tier, 'load');
    assert.ok(r.reason.startsWith(why), r.reason);
  }
});
