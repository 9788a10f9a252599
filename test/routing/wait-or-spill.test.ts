// Wait or spill, decided by time: a cache holder too busy to be chosen for its cache is still waited
// for when its queue plus the uncached rest is sooner than the best other replica's whole prefill,
// never past the request's deadline; the receipt says which was chosen and both estimates.
import { strict as assert } from 'node:assert';
import { once } from 'node:events';
import { test } from 'node:test';
import { request } from 'undici';
import type { Candidate, RouteFacts } from '../../src/routing/index.js';
import { compactReceipt, defaultTiers, preciseTier, receiptOf } from '../../src/routing/index.js';
import { decide } from '../../src/routing/router.js';
import { candidate, routeFacts } from '../gateway/replica-view.js';
import { chat, cluster, metric } from '../gateway/sim-cluster.js';
import { waitFor } from '../support/wait.js';

// A 6032-token prompt whose first 6016 tokens replica a holds; 10k prefill tokens/s everywhere, so
// a cold replica's whole prefill is 603.2 ms.
const facts = (o: Partial<RouteFacts> = {}): RouteFacts => routeFacts({ promptTokens: 6032, precise: new Map([['a', 6016], ['b', 0]]), waitOrSpill: true, ...o });
const at = (id: string, o: Partial<Candidate> = {}): Candidate => candidate(id, { prefillTokensPerS: 10_000, ...o });
// Four requests waiting on a (bounded load's cap is 4 here): too busy to be chosen for its cache,
// though their prefill (200 tokens: siblings hitting the same prefix) clears in 20 ms.
const busyShort = at('a', { inFlight: 4, waiting: 4, queuedPrefillTokens: 200 });
// 25k tokens queued: 2.5 s, over the 2 s budget.
const busyLong = at('a', { inFlight: 2, waiting: 2, queuedPrefillTokens: 25_000 });

const rules: readonly { why: string; f: RouteFacts; cs: readonly Candidate[]; to: string; tier: string; chose: string | undefined; cached: number }[] = [
  { why: 'a busy holder whose short queue beats the cold prefill is waited for', f: facts(), cs: [busyShort, at('b')], to: 'a', tier: 'precise', chose: 'holder', cached: 6016 },
  { why: 'a busy holder whose queue outlasts the cold prefill is spilled from', f: facts(), cs: [busyLong, at('b')], to: 'b', tier: 'load', chose: 'spill', cached: 0 },
  { why: "a holder's wait past the request's deadline is not waited for, however short", f: facts({ deadlineMs: 10 }), cs: [busyShort, at('b')], to: 'b', tier: 'load', chose: 'spill', cached: 0 },
  { why: 'a wait within the deadline is waited for', f: facts({ deadlineMs: 25 }), cs: [busyShort, at('b')], to: 'a', tier: 'precise', chose: 'holder', cached: 6016 },
  {
    why: 'the spill goes to the other replica with the sooner first token, not merely the idler one',
    f: facts({ precise: new Map([['a', 6016], ['b', 0], ['c', 0]]) }),
    cs: [busyLong, at('b', { inFlight: 1, waiting: 1, queuedPrefillTokens: 4000 }), at('c', { inFlight: 0, queuedPrefillTokens: 0 })],
    to: 'c',
    tier: 'load',
    chose: 'spill',
    cached: 0,
  },
  {
    why: 'ties wait: a second copy of the prefix costs other prompts later',
    // 6032 - 6016 = 16 uncached; a's queue 6016 tokens: 603.2 ms, as b's whole prefill.
    f: facts(),
    cs: [at('a', { inFlight: 4, waiting: 4, queuedPrefillTokens: 6016 }), at('b')],
    to: 'a',
    tier: 'precise',
    chose: 'holder',
    cached: 6016,
  },
  { why: 'a holder with room is chosen as before, nothing to weigh', f: facts(), cs: [at('a'), at('b')], to: 'a', tier: 'precise', chose: undefined, cached: 6016 },
  { why: 'off: a busy holder is passed over as before (the valve alone)', f: facts({ waitOrSpill: false }), cs: [busyShort, at('b')], to: 'b', tier: 'load', chose: undefined, cached: 0 },
];

for (const r of rules) {
  void test(`wait or spill: ${r.why}`, () => {
    const choice = decide(defaultTiers, r.f, r.cs);
    assert.ok(choice);
    assert.deepEqual([choice.replica.id, choice.tier, choice.waitOrSpill?.chose, choice.predictedCachedTokens], [r.to, r.tier, r.chose, r.cached], JSON.stringify(choice.waitOrSpill));
  });
}

void test('wait or spill: the decision carries both estimates, the holder and where it would spill', () => {
  const choice = preciseTier(facts(), [busyShort, at('b')]);
  assert.deepEqual(choice?.waitOrSpill, { chose: 'holder', holder: 'a', holderMs: 21.6, spillTo: 'b', spillMs: 603.2, pastDeadline: false });
});

void test('wait or spill: a lone busy holder leaves the choice to the load tier', () => {
  assert.equal(preciseTier(facts({ precise: new Map([['a', 6016]]) }), [busyLong]), undefined);
});

void test('wait or spill: the receipt says the holder was waited for, with both estimates, in full and compact', () => {
  const cs = [busyShort, at('b')];
  const f = facts();
  const choice = decide(defaultTiers, f, cs);
  assert.ok(choice);
  const r = receiptOf('precise', f, cs, choice, () => undefined);
  assert.deepEqual([r.winner, r.waitOrSpill?.chose, r.waitOrSpill?.holderMs, r.waitOrSpill?.spillMs], ['a', 'holder', 21.6, 603.2]);
  assert.equal(r.reason, 'waits for busy holder a (its queue and the uncached rest est. 21.6 ms) rather than spill to b (est. 603.2 ms for what it does not hold); holds 6016 of 6032 prompt tokens');
  assert.match(compactReceipt(r), /^tier=precise; to=a; wait=holder:22ms\|spill:603ms->holder; a=6016c,200q,22ms!; b=0c,0q,603ms$/);
});

void test('wait or spill: the receipt says the request spilled, and why, in full and compact', () => {
  const f = facts({ deadlineMs: 10 });
  const cs = [busyShort, at('b')];
  const choice = decide(defaultTiers, f, cs);
  assert.ok(choice);
  const r = receiptOf('precise', f, cs, choice, () => undefined);
  assert.deepEqual([r.winner, r.waitOrSpill?.chose, r.waitOrSpill?.pastDeadline], ['b', 'spill', true]);
  assert.match(r.reason, /^spills to b \(est\. 603\.2 ms for what it does not hold\) rather than wait for busy holder a .*: its wait is past the request's deadline \(10 ms\)$/);
  assert.match(compactReceipt(r), /; wait=holder:22ms\|spill:603ms->spill\(deadline\); /);
  const longer = decide(defaultTiers, facts(), [busyLong, at('b')]);
  assert.ok(longer);
  assert.match(receiptOf('precise', facts(), [busyLong, at('b')], longer, () => undefined).reason, /: spilling is sooner$/);
});

// Through the gateway with sim engines of one sequence slot each: a long answer holds the holder's
// slot, so the requests routed to it after wait in its engine's queue, as a busy vLLM's would.
void test('wait or spill, through the gateway: a request waits in its busy holder’s engine queue, a short deadline spills it, and a client that leaves is taken out of the engine', async (t) => {
  const { gw, replicas, settle } = await cluster(t, { maxNumSeqs: 1 });
  const system = { role: 'system', content: 'You are the wait-or-spill test assistant; answer briefly. '.repeat(30) };
  const first = await chat(gw.url, [system, { role: 'user', content: 'question 0' }]);
  assert.equal(first.status, 200);
  await settle();
  const holder = first.replica;
  const other = holder === 'a' ? 'b' : 'a';
  const holderSim = replicas.find((r) => r.view.id === holder)?.sim;
  assert.ok(holderSim);
  const open = async (question: string, maxTokens: number, headers: Record<string, string> = {}) => {
    const stop = new AbortController();
    t.after(() => stop.abort());
    const res = await request(new URL('/v1/chat/completions', gw.url), {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model: 'qwen3', messages: [system, { role: 'user', content: question }], max_tokens: maxTokens, stream: true }),
      signal: stop.signal,
    });
    // Headers come at once (the sim answers a stream's head before scheduling it); the body waits for the engine.
    res.body.on('error', () => undefined);
    return { res, stop, replica: String(res.headers['x-llmgw-replica']), receipt: String(res.headers['x-llmgw-receipt']) };
  };
  const waiting = async (): Promise<number> => {
    const res = await request(new URL('/metrics', holderSim.url), { signal: AbortSignal.timeout(5000) });
    return metric(await res.body.text(), 'vllm:num_requests_waiting{model_name="qwen3",engine="0"}');
  };
  // The blocker streams a long answer on the holder's only slot; it is answering, so not counted as waiting.
  const blocker = await open('the blocker', 20_000);
  assert.equal(blocker.replica, holder);
  await once(blocker.res.body, 'data');
  // Three siblings queue behind it: the third leaves the holder at the bounded load's cap (3 waiting, none elsewhere).
  for (const q of ['question 1', 'question 2', 'question 3']) assert.equal((await open(q, 4)).replica, holder, q);
  await waitFor(async () => (await waiting()) === 3, { what: 'three requests in the holder engine’s queue' });
  // Busy by bounded load, yet its queue is a few uncached tokens against the other's whole prefill: it waits.
  const waiter = await open('question 4', 4);
  assert.equal(waiter.replica, holder, waiter.receipt);
  assert.match(waiter.receipt, /; wait=holder:\d+ms\|spill:\d+ms->holder; /);
  await waitFor(async () => (await waiting()) === 4, { what: 'the waiter in the holder engine’s queue' });
  // A request that may wait 0 ms is not held for the holder: it spills and is answered at once.
  const hurried = await open('question 5', 4, { 'x-llmgw-max-wait-ms': '0' });
  assert.equal(hurried.replica, other, hurried.receipt);
  assert.match(hurried.receipt, /; wait=holder:\d+ms\|spill:\d+ms->spill\(deadline\); /);
  assert.match(await hurried.res.body.text(), /\[DONE\]/);
  // The waiting client leaves: the gateway aborts its upstream request and the engine drops it from its queue.
  waiter.stop.abort();
  await waitFor(async () => (await waiting()) === 3, { what: 'the waiter gone from the holder engine’s queue' });
});
