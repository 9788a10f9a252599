// The cost model: it learns a replica's true prefill rate from what the gateway sees (time to first
// byte against the prefill waited for, the engine's own metrics), the configured rate only a prior;
// and a replica that slows down loses its cache affinity exactly where its queue passes the budget.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import type { Candidate, RouteFacts } from '../../src/routing/index.js';
import { CostModel, costModelDefaults, LoadBook, preciseTier, runningOf, scrapeOf, waitingOf } from '../../src/routing/index.js';
import { prng } from '../../src/e2e/index.js';
import { candidate } from '../gateway/replica-view.js';

// A replica as a function: ttfb = overhead + uncached / rate, with a little noise.
function feed(m: CostModel, id: string, o: { rate: number; overheadMs: number; n: number; seed: number }): void {
  const rand = prng(o.seed);
  for (let i = 0; i < o.n; i++) {
    const uncachedTokens = 100 + Math.floor(rand() * 8000);
    const noise = (rand() - 0.5) * 10;
    m.observeFirstByte(id, { uncachedTokens, aheadTokens: 0, ttfbMs: o.overheadMs + (uncachedTokens * 1000) / o.rate + noise });
  }
}

const near = (got: number, want: number, within: number): boolean => Math.abs(got - want) <= within * want;

void test('cost model: before any observation the configured rate is the estimate', () => {
  const m = new CostModel({ priorPrefillTokensPerS: 8000 });
  const e = m.estimate('a');
  assert.deepEqual([e.prefillTokensPerS, e.source], [8000, 'prior']);
  assert.equal(m.estimate('b', 12_000).prefillTokensPerS, 12_000, "a replica's own stated rate is its prior");
});

void test('cost model: converges to the true prefill rate from first bytes, whatever the prior', () => {
  for (const prior of [2000, 8000, 200_000]) {
    const m = new CostModel({ priorPrefillTokensPerS: prior });
    feed(m, 'a', { rate: 20_000, overheadMs: 20, n: 80, seed: 7 });
    const e = m.estimate('a');
    assert.ok(near(e.prefillTokensPerS, 20_000, 0.05), `prior ${prior}: learned ${Math.round(e.prefillTokensPerS)} tokens/s, want 20000`);
    assert.ok(Math.abs(e.overheadMs - 20) < 10, `prior ${prior}: overhead ${e.overheadMs.toFixed(1)} ms, want 20`);
    assert.equal(e.source, 'ttfb');
  }
});

void test('cost model: a first byte that waited behind our own queued prefill teaches nothing', () => {
  const m = new CostModel({ priorPrefillTokensPerS: 8000 });
  // Had the book overestimated what was ahead, these would say the replica is 50 times faster.
  for (let i = 0; i < 50; i++) m.observeFirstByte('a', { uncachedTokens: 100, aheadTokens: 100_000, ttfbMs: 100 });
  assert.deepEqual([m.estimate('a').prefillTokensPerS, m.estimate('a').observations], [8000, 0]);
});

void test("cost model: the engine's own rate is a floor the first bytes cannot go under", () => {
  const m = new CostModel({ priorPrefillTokensPerS: 8000 });
  m.observeScrape('a', { promptTokens: 0, cachedTokens: 0, prefillSeconds: 0 });
  m.observeScrape('a', { promptTokens: 15_000, cachedTokens: 0, prefillSeconds: 1 });
  feed(m, 'a', { rate: 5000, overheadMs: 20, n: 60, seed: 9 });
  assert.equal(Math.round(m.estimate('a').prefillTokensPerS), 15_000);
});

void test("cost model: a window of cache hits alone does not move the rate (their jitter is not a slope)", () => {
  const m = new CostModel({ priorPrefillTokensPerS: 8000 });
  m.observeScrape('a', { promptTokens: 0, cachedTokens: 0, prefillSeconds: 0 });
  m.observeScrape('a', { promptTokens: 20_000, cachedTokens: 0, prefillSeconds: 1 });
  const rand = prng(11);
  for (let i = 0; i < 60; i++) m.observeFirstByte('a', { uncachedTokens: 40 + Math.floor(rand() * 30), aheadTokens: 0, ttfbMs: 20 + rand() * 25 });
  const e = m.estimate('a');
  assert.ok(near(e.prefillTokensPerS, 20_000, 0.01), String(e.prefillTokensPerS));
  assert.ok(e.overheadMs > 20 && e.overheadMs < 45, String(e.overheadMs));
});

void test('cost model: requests all of one size keep the line defined, between the prior and what they show', () => {
  const m = new CostModel({ priorPrefillTokensPerS: 8000 });
  for (let i = 0; i < 60; i++) m.observeFirstByte('a', { uncachedTokens: 6000, aheadTokens: 0, ttfbMs: 300 });
  const e = m.estimate('a');
  assert.ok(Number.isFinite(e.overheadMs) && e.overheadMs >= 0);
  // 6000 tokens in 300 ms is 20000 tokens/s if all of it is prefill; it cannot be slower than the prior says.
  assert.ok(e.prefillTokensPerS > 8000 && e.prefillTokensPerS <= 20_000 * 1.01, String(e.prefillTokensPerS));
});

void test("cost model: the engine's prefill histogram replaces the prior, and its queue histogram is read", () => {
  const m = new CostModel({ priorPrefillTokensPerS: 8000 });
  m.observeScrape('a', { waiting: 0, promptTokens: 1000, cachedTokens: 0, prefillSeconds: 0.05, prefillRequests: 1, queueSeconds: 0, queueRequests: 1 });
  assert.equal(m.estimate('a').prefillTokensPerS, 8000, 'one scrape has no interval yet');
  m.observeScrape('a', { waiting: 3, promptTokens: 61_000, cachedTokens: 20_000, prefillSeconds: 2.05, prefillRequests: 11, queueSeconds: 1.5, queueRequests: 11 });
  const e = m.estimate('a');
  assert.equal(e.source, 'engine');
  assert.ok(near(e.prefillTokensPerS, 20_000, 0.001), String(e.prefillTokensPerS));
  assert.deepEqual([e.engineWaiting, e.engineQueueMs], [3, 150]);
  m.observeScrape('a', { waiting: 0, promptTokens: 10, cachedTokens: 0, prefillSeconds: 0.001, prefillRequests: 1, queueSeconds: 0, queueRequests: 1 });
  assert.ok(near(m.estimate('a').prefillTokensPerS, 20_000, 0.001), 'counters that went down (a restart) teach nothing');
});

void test('cost model: a replica that slows down is seen within a few tens of requests', () => {
  const m = new CostModel({ priorPrefillTokensPerS: 8000 });
  feed(m, 'a', { rate: 20_000, overheadMs: 20, n: 60, seed: 1 });
  feed(m, 'a', { rate: 2000, overheadMs: 20, n: 60, seed: 2 });
  const e = m.estimate('a');
  assert.ok(near(e.prefillTokensPerS, 2000, 0.1), `learned ${Math.round(e.prefillTokensPerS)} tokens/s after slowing to 2000`);
});


void test('cost model: a replica that slows down loses its affinity where its queue passes the TTFT budget', () => {
  const m = new CostModel({ priorPrefillTokensPerS: 8000 });
  feed(m, 'a', { rate: 20_000, overheadMs: 20, n: 60, seed: 3 });
  feed(m, 'b', { rate: 20_000, overheadMs: 20, n: 60, seed: 4 });
  const budgetMs = 2000;
  // 'a' holds the whole 8k-token prompt; 'b' holds nothing and is idle.
  const facts: RouteFacts = { promptTokens: 8000, precise: new Map([['a', 7984]]), approximate: undefined, ttftBudgetMs: budgetMs, boundedLoadFactor: 0, turn: 0 };
  const cand = (id: string, queued: number): Candidate => candidate(id, { queuedPrefillTokens: queued, prefillTokensPerS: m.estimate(id).prefillTokensPerS });
  const route = (queuedOnA: number): string | undefined => preciseTier(facts, [cand('a', queuedOnA), cand('b', 0)])?.replica.id;
  // Fast, 4k tokens queued is a fifth of a second: the holder keeps its request.
  assert.equal(route(4000), 'a');
  feed(m, 'a', { rate: 2000, overheadMs: 20, n: 60, seed: 5 });
  const rate = m.estimate('a').prefillTokensPerS;
  // Slowed tenfold, 20k tokens queued is ten seconds: over the budget, so the prefix no longer holds it.
  assert.notEqual(route(20_000), 'a');
  // And the turn is exactly at the budget, at the learned rate.
  const atBudget = (budgetMs / 1000) * rate;
  assert.equal(route(Math.floor(atBudget * 0.97)), 'a', `a queue of ${Math.floor(atBudget * 0.97)} tokens is under ${budgetMs} ms at ${Math.round(rate)} tokens/s`);
  assert.notEqual(route(Math.ceil(atBudget * 1.03)), 'a', `a queue of ${Math.ceil(atBudget * 1.03)} tokens is over ${budgetMs} ms at ${Math.round(rate)} tokens/s`);
});

void test('cost model: bounded load counts requests waiting for a first token, not answers already streaming', () => {
  const facts: RouteFacts = { promptTokens: 8000, precise: new Map([['a', 7984]]), approximate: undefined, ttftBudgetMs: 2000, boundedLoadFactor: 1.5, turn: 0 };
  const cand = (id: string, inFlight: number, waiting: number): Candidate => candidate(id, { inFlight, waiting, prefillTokensPerS: 20_000 });
  // The holder streams three answers while the other idles: a 16-token prefill beats an 8k one.
  assert.equal(preciseTier(facts, [cand('a', 3, 0), cand('b', 0, 0)])?.replica.id, 'a');
  // Three requests still waiting on the holder: over its share, the hot prefix spreads.
  assert.equal(preciseTier(facts, [cand('a', 3, 3), cand('b', 0, 0)]), undefined);
});

void test("cost model: a sim's /metrics gives every figure it reads, summed over DP ranks", async () => {
  const { startSim } = await import('../../src/sim/index.js');
  const sim = await startSim({ model: 'm', port: 0, tokenizer: 'bytes', dataParallelSize: 2, prefillTokensPerS: 200_000, decodeTokensPerS: 5000 });
  try {
    await sim.ready;
    for (let i = 0; i < 2; i++) {
      const res = await fetch(new URL('/v1/completions', sim.url), {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', prompt: `request ${i} `.repeat(40), max_tokens: 2 }),
        signal: AbortSignal.timeout(10_000),
      });
      assert.equal(res.status, 200);
      await res.text();
    }
    const text = await (await fetch(new URL('/metrics', sim.url), { signal: AbortSignal.timeout(10_000) })).text();
    const s = scrapeOf(text);
    assert.deepEqual([s.waiting, s.prefillRequests, s.queueRequests], [0, 2, 2]);
    assert.ok((s.promptTokens ?? 0) > 0 && (s.prefillSeconds ?? 0) > 0 && s.cachedTokens !== undefined && s.queueSeconds !== undefined, JSON.stringify(s));
  } finally {
    await sim.close();
  }
});

// llama-server --metrics, as the pinned build answered after one 4-token prompt.
const llamaCppMetrics = `# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 4
llamacpp:prompt_seconds_total 0.007
llamacpp:tokens_predicted_total 3
llamacpp:tokens_predicted_seconds_total 0.015
llamacpp:n_decode_total 3
llamacpp:prompt_tokens_seconds 571.429
llamacpp:requests_processing 0
llamacpp:requests_deferred 2
llamacpp:n_busy_slots_per_decode 1
`;

void test("scrapeOf: llama.cpp's metrics teach the cost model its prefill rate and queue", () => {
  assert.equal(waitingOf(llamaCppMetrics), 2);
  const first = scrapeOf(llamaCppMetrics);
  // Its prompt counter counts computed tokens only: nothing cached to subtract.
  assert.deepEqual(first, { promptTokens: 4, prefillSeconds: 0.007, waiting: 2, cachedTokens: 0 });
  const costs = new CostModel({ ...costModelDefaults, priorPrefillTokensPerS: 100_000 });
  costs.observeScrape('r', first);
  costs.observeScrape('r', scrapeOf(llamaCppMetrics.replace('prompt_tokens_total 4', 'prompt_tokens_total 4004').replace('prompt_seconds_total 0.007', 'prompt_seconds_total 1.007')));
  assert.equal(Math.round(costs.estimate('r').prefillTokensPerS), 4000);
});

void test('LoadBook: an engine that queues requests while running N shows its slots; the largest seen is kept', () => {
  const load = new LoadBook();
  load.setEngineQueue('r', 0, 3);
  assert.equal(load.get('r').engineSlots, 0, 'nothing waits: 3 running says nothing of its slots');
  load.setEngineQueue('r', 2, 4);
  assert.equal(load.get('r').engineSlots, 4);
  load.setEngineQueue('r', 1, 2);
  assert.equal(load.get('r').engineSlots, 4, 'short of KV blocks for a while: the slots are still there');
  load.setEngineQueue('r', 1);
  assert.deepEqual([load.get('r').engineWaiting, load.get('r').engineSlots], [1, 4], 'an engine that exports no running gauge teaches nothing');
});

void test("runningOf: vLLM's running gauge summed over ranks, llama.cpp's busy slots", () => {
  assert.equal(runningOf('vllm:num_requests_running{engine="0"} 3\nvllm:num_requests_running{engine="1"} 4\nvllm:num_requests_waiting{engine="0"} 1\n'), 7);
  assert.equal(runningOf(llamaCppMetrics), 0);
  assert.equal(runningOf('other 1\n'), undefined);
});

test('a replica not yet measured takes its measured peers\' median rate, unless it states its own', () => {
  const m = new CostModel({ priorPrefillTokensPerS: 8000 });
  const scrape = (id: string, tokens: number, seconds: number): void => {
    m.observeScrape(id, { promptTokens: 0, cachedTokens: 0, prefillSeconds: 0 });
    m.observeScrape(id, { promptTokens: tokens, cachedTokens: 0, prefillSeconds: seconds });
  };
  scrape('a', 40_000, 1);
  scrape('b', 60_000, 1);
  const rates = m.ratesOf([{ id: 'a' }, { id: 'b' }, { id: 'cold' }, { id: 'own', stated: 2000 }]);
  assert.deepEqual(rates.slice(0, 2), [40_000, 60_000]);
  // The median of an even count is its upper middle: the guess errs toward the faster peer.
  assert.equal(rates[2], 60_000);
  assert.equal(rates[3], 2000);
  // Nothing measured: every replica keeps the prior.
  assert.deepEqual(new CostModel({ priorPrefillTokensPerS: 8000 }).ratesOf([{ id: 'x' }, { id: 'y' }]), [8000, 8000]);
});
