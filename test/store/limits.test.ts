// The admission decision, rule by rule: each row is one reason a request is admitted, given a
// completion limit, or refused with the error its client can act on.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RateLimitError } from '../../src/errors/index.js';
import { costOf, decide, periodsOf, type AdmitFacts } from '../../src/store/index.js';

const now = Date.parse('2026-12-04T12:00:00Z');
const none = { tokens: 0, costMicros: 0 };
const limits = { name: 'k', requestsPerMinute: 0, tokensPerMinute: 0, tokensPerDay: 0, tokensPerMonth: 0, costPerDayMicros: 0, costPerMonthMicros: 0 };
const facts = (over: Partial<AdmitFacts> & { l?: Partial<typeof limits> }): AdmitFacts => ({
  now,
  limits: { ...limits, ...over.l },
  price: undefined,
  requests: undefined,
  tokens: undefined,
  day: none,
  month: none,
  held: none,
  promptTokens: 100,
  completionTokens: 50,
  ...over,
});

const admitted = [
  { why: 'no limits: the bound is held and nothing imposed', f: facts({}), hold: 150, impose: undefined },
  { why: 'no completion limit under a day budget: what the day has left after the prompt', f: facts({ l: { tokensPerDay: 1000 }, day: { tokens: 600, costMicros: 0 }, completionTokens: undefined }), hold: 400, impose: 300 },
  { why: 'the tightest limit decides what is imposed', f: facts({ l: { tokensPerDay: 1000, tokensPerMonth: 5000 }, month: { tokens: 4700, costMicros: 0 }, completionTokens: undefined }), hold: 300, impose: 200 },
  { why: "other requests' holds count against the day", f: facts({ l: { tokensPerDay: 1000 }, held: { tokens: 800, costMicros: 0 }, completionTokens: undefined }), hold: 200, impose: 100 },
  {
    why: 'a cost budget turns into the completion tokens it pays for',
    f: facts({ l: { costPerDayMicros: 1000 }, price: { prompt: 2, cached: 1, completion: 4 }, completionTokens: undefined }),
    hold: 300,
    impose: 200,
  },
  { why: 'a per-minute bucket refills with time', f: facts({ l: { tokensPerMinute: 600 }, tokens: { level: 0, at: now - 30_000 } }), hold: 150, impose: undefined },
];
for (const r of admitted) {
  void test(`decide admits: ${r.why}`, () => {
    const d = decide(r.f);
    assert.equal(d.hold.tokens, r.hold);
    assert.equal(d.impose, r.impose);
  });
}

const refused = [
  { why: 'a spent day is a budget refusal until the next UTC day', f: facts({ l: { tokensPerDay: 1000 }, day: { tokens: 900, costMicros: 0 } }), code: 'LLMGW_BUDGET', retryS: 12 * 3600 },
  { why: 'a spent month waits for the next month', f: facts({ l: { tokensPerMonth: 1000 }, month: { tokens: 1000, costMicros: 0 } }), code: 'LLMGW_BUDGET', retryS: 27 * 86_400 + 12 * 3600 },
  { why: 'requests per minute spent: a rate limit, retry within the minute', f: facts({ l: { requestsPerMinute: 60 }, requests: { level: 0, at: now } }), code: 'LLMGW_RATE_LIMITED', retryS: 1 },
  { why: 'a bound larger than a whole minute never fits', f: facts({ l: { tokensPerMinute: 100 } }), code: 'LLMGW_RATE_LIMITED', retryS: 60 },
  {
    why: 'a prompt that alone costs more than the day has left',
    f: facts({ l: { costPerDayMicros: 100 }, price: { prompt: 2, cached: 1, completion: 0 }, completionTokens: undefined }),
    code: 'LLMGW_BUDGET',
    retryS: 12 * 3600,
  },
];
for (const r of refused) {
  void test(`decide refuses: ${r.why}`, () => {
    assert.throws(
      () => decide(r.f),
      (e: unknown) => e instanceof RateLimitError && e.code === r.code && Math.round(e.retryAfterS) === r.retryS,
    );
  });
}

void test('periodsOf names the UTC day and month; costOf prices cached tokens apart', () => {
  assert.deepEqual(periodsOf(Date.parse('2026-12-31T23:59:59.999Z')), { day: 'd2026-12-31', month: 'm2026-12' });
  assert.deepEqual(periodsOf(Date.parse('2027-01-01T00:00:00Z')), { day: 'd2027-01-01', month: 'm2027-01' });
  assert.equal(costOf({ prompt: 0.1, cached: 0.02, completion: 0.4 }, { promptTokens: 1000, cachedTokens: 500, completionTokens: 100 }), 100);
  assert.equal(costOf(undefined, { promptTokens: 1000, cachedTokens: 0, completionTokens: 100 }), 0);
});
