// The resident tier, one row per rule: for a request naming an adapter loaded on demand, a replica that
// holds it (or is loading it) wins, by cached prefix then load, until the holders' queues pass the
// TTFT budget; then it answers nothing and the later tiers spread the adapter.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import type { Candidate, RouteFacts } from '../../src/gateway/index.js';
import { residentTier } from '../../src/gateway/index.js';

const cand = (id: string, o: Partial<Omit<Candidate, 'view'>> = {}): Candidate => ({
  view: { id, node: 'local', model: 'm', adapters: ['sql'], url: new URL('http://127.0.0.1:1/'), apiKey: undefined, generation: 1, kvEvents: true, blockSizeTokens: 16, hashSeed: '0', dataParallelSize: 1 },
  inFlight: 0,
  queuedPrefillTokens: 0,
  engineWaiting: 0,
  prefillTokensPerS: 1000,
  ...o,
});

const facts = (o: Partial<RouteFacts>): RouteFacts => ({
  promptTokens: 1000,
  precise: undefined,
  approximate: undefined,
  ttftBudgetMs: 2000,
  boundedLoadFactor: 1.5,
  turn: 0,
  ...o,
});

const rows: readonly { why: string; facts: RouteFacts; cands: Candidate[]; want: string | undefined }[] = [
  { why: 'a request naming no on-demand adapter is not this tier\'s', facts: facts({}), cands: [cand('a'), cand('b')], want: undefined },
  { why: 'nobody holds it yet: the later tiers choose where it loads', facts: facts({ resident: new Set() }), cands: [cand('a'), cand('b')], want: undefined },
  {
    why: 'requests in flight alone do not move it off its holder: a load costs more than sharing a batch',
    facts: facts({ resident: new Set(['b']) }),
    cands: [cand('a'), cand('b', { inFlight: 15 })],
    want: 'b',
  },
  {
    why: 'among holders, the one with the adapter\'s cached prefix',
    facts: facts({ resident: new Set(['a', 'b']), precise: new Map([['a', 0], ['b', 960]]) }),
    cands: [cand('a'), cand('b')],
    want: 'b',
  },
  {
    why: 'among holders with nothing cached, the least loaded',
    facts: facts({ resident: new Set(['a', 'b']), precise: new Map() }),
    cands: [cand('a', { inFlight: 3 }), cand('b', { inFlight: 1 })],
    want: 'b',
  },
  {
    why: 'a holder whose queued prefill is over the TTFT budget is passed over for another holder',
    facts: facts({ resident: new Set(['a', 'b']), ttftBudgetMs: 1000 }),
    cands: [cand('a', { queuedPrefillTokens: 5000 }), cand('b', { inFlight: 4 }), cand('c')],
    want: 'b',
  },
  {
    why: 'every holder over the budget: the load valve spreads the adapter to another replica',
    facts: facts({ resident: new Set(['a']), ttftBudgetMs: 1000, precise: new Map([['a', 990]]) }),
    cands: [cand('a', { queuedPrefillTokens: 5000 }), cand('b')],
    want: undefined,
  },
];
for (const r of rows) {
  void test(`resident tier: ${r.why}`, () => assert.equal(residentTier(r.facts, r.cands)?.replica.id, r.want));
}
