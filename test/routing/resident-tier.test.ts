// The resident tier, one row per rule: for a request naming an adapter loaded on demand, a replica that
// holds it (or is loading it) wins, by cached prefix then load, until the holders' queues pass the
// TTFT budget; then it answers nothing and the later tiers spread the adapter.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import type { Candidate, RouteFacts } from '../../src/routing/index.js';
import { residentTier } from '../../src/routing/index.js';
import { candidate, replicaView, routeFacts } from '../gateway/replica-view.js';

// Every replica serves the on-demand adapter "sql"; the facts say who holds it.
const cand = (id: string, o: Partial<Omit<Candidate, 'view'>> = {}): Candidate => candidate(id, { view: replicaView(id, { adapters: ['sql'] }), ...o });

const rows: readonly { why: string; facts: RouteFacts; cands: Candidate[]; want: string | undefined }[] = [
  { why: 'a request naming no on-demand adapter is not this tier\'s', facts: routeFacts({}), cands: [cand('a'), cand('b')], want: undefined },
  { why: 'nobody holds it yet: the later tiers choose where it loads', facts: routeFacts({ resident: new Set() }), cands: [cand('a'), cand('b')], want: undefined },
  {
    why: 'requests in flight alone do not move it off its holder: a load costs more than sharing a batch',
    facts: routeFacts({ resident: new Set(['b']) }),
    cands: [cand('a'), cand('b', { inFlight: 15 })],
    want: 'b',
  },
  {
    why: 'among holders, the one with the adapter\'s cached prefix',
    facts: routeFacts({ resident: new Set(['a', 'b']), precise: new Map([['a', 0], ['b', 960]]) }),
    cands: [cand('a'), cand('b')],
    want: 'b',
  },
  {
    why: 'among holders with nothing cached, the least loaded',
    facts: routeFacts({ resident: new Set(['a', 'b']), precise: new Map() }),
    cands: [cand('a', { inFlight: 3 }), cand('b', { inFlight: 1 })],
    want: 'b',
  },
  {
    why: 'a holder whose queued prefill is over the TTFT budget is passed over for another holder',
    facts: routeFacts({ resident: new Set(['a', 'b']), ttftBudgetMs: 1000 }),
    cands: [cand('a', { queuedPrefillTokens: 5000 }), cand('b', { inFlight: 4 }), cand('c')],
    want: 'b',
  },
  {
    why: 'every holder over the budget: the load valve spreads the adapter to another replica',
    facts: routeFacts({ resident: new Set(['a']), ttftBudgetMs: 1000, precise: new Map([['a', 990]]) }),
    cands: [cand('a', { queuedPrefillTokens: 5000 }), cand('b')],
    want: undefined,
  },
];
for (const r of rows) {
  void test(`resident tier: ${r.why}`, () => assert.equal(residentTier(r.facts, r.cands)?.replica.id, r.want));
}
