// Routing rules, one row per reason: the pure tiers, how held blocks are valued, the index writer's
// bookkeeping, the approximate tree, and the Router end to end over a fake index and fake engines.
import { strict as assert } from 'node:assert';
import { getEventListeners } from 'node:events';
import { test } from 'node:test';
import { Agent } from 'undici';
import type { Candidate, ReplicaView, RouteFacts, RouteTier } from '../../src/routing/index.js';
import { gatewayDefaults } from '../../src/gateway/index.js';
import { approximateTier, defaultTiers, effectiveBlocks, LoadBook, loadTier, preciseTier, PrefixTree, Router, tiersOf } from '../../src/routing/index.js';
import { anyRank, IndexWriter } from '../../src/kv/index.js';
import { parseGenerationRequest } from '../../src/limits/index.js';
import type { TokenSource } from '../../src/routing/facts.js';
import { within, type Deadline } from '../../src/routing/router.js';
import { EngineTokenizer } from '../../src/routing/tokens.js';
import { candidate, replicaView, routeFacts } from '../gateway/replica-view.js';
import { fakeTokens, startFakeEngine } from '../gateway/fake-engine.js';
import { FakeIndex, fakeKeys, fakeScorer, keyArray } from '../gateway/fake-index.js';

const tierRows: readonly { why: string; tier: typeof preciseTier; facts: RouteFacts; cands: Candidate[]; want: string | undefined }[] = [
  {
    why: 'precise: a follow-up goes to the replica holding its prefix',
    tier: preciseTier,
    facts: routeFacts({ precise: new Map([['a', 0], ['b', 960]]) }),
    cands: [candidate('a'), candidate('b')],
    want: 'b',
  },
  {
    why: 'precise: the longer held prefix wins when both are idle',
    tier: preciseTier,
    facts: routeFacts({ precise: new Map([['a', 480], ['b', 960]]) }),
    cands: [candidate('a'), candidate('b')],
    want: 'b',
  },
  {
    why: 'precise: cached share is weighed against load: a holder whose queue outweighs its hit loses',
    tier: preciseTier,
    facts: routeFacts({ precise: new Map([['a', 0], ['b', 500]]) }),
    cands: [candidate('a'), candidate('b', { queuedPrefillTokens: 1200 })],
    want: undefined,
  },
  {
    why: 'precise: a holder with a queue shorter than its hit keeps the request',
    tier: preciseTier,
    facts: routeFacts({ precise: new Map([['a', 0], ['b', 900]]) }),
    cands: [candidate('a'), candidate('b', { queuedPrefillTokens: 500 })],
    want: 'b',
  },
  {
    why: 'precise: stickiness breaks at saturation: past the TTFT budget the cache does not attract',
    tier: preciseTier,
    facts: routeFacts({ precise: new Map([['a', 0], ['b', 990]]), ttftBudgetMs: 1000 }),
    cands: [candidate('a', { queuedPrefillTokens: 5000 }), candidate('b', { queuedPrefillTokens: 3000 })],
    want: undefined,
  },
  {
    why: 'precise: the replica\'s own prefill rate decides its saturation',
    tier: preciseTier,
    facts: routeFacts({ precise: new Map([['a', 0], ['b', 990]]), ttftBudgetMs: 1000 }),
    cands: [candidate('a', { queuedPrefillTokens: 5000 }), candidate('b', { queuedPrefillTokens: 3000, prefillTokensPerS: 10_000 })],
    want: 'b',
  },
  {
    why: 'precise: bounded load: a holder with well over its share of requests in flight takes no more for its cache',
    tier: preciseTier,
    facts: routeFacts({ precise: new Map([['a', 0], ['b', 990]]) }),
    cands: [candidate('a'), candidate('b', { inFlight: 6 })],
    want: undefined,
  },
  {
    why: 'precise: bounded load: one request in flight does not break a conversation\'s affinity',
    tier: preciseTier,
    facts: routeFacts({ precise: new Map([['a', 0], ['b', 990]]) }),
    cands: [candidate('a'), candidate('b', { inFlight: 1 })],
    want: 'b',
  },
  {
    why: 'precise: nothing cached anywhere leaves the decision to later tiers',
    tier: preciseTier,
    facts: routeFacts({ precise: new Map([['a', 0], ['b', 0]]) }),
    cands: [candidate('a'), candidate('b')],
    want: undefined,
  },
  {
    why: 'precise: without tokens the tier has no opinion',
    tier: preciseTier,
    facts: routeFacts({}),
    cands: [candidate('a'), candidate('b')],
    want: undefined,
  },
  {
    why: 'approximate: the same affinity rule over the tree',
    tier: approximateTier,
    facts: routeFacts({ approximate: new Map([['a', 640], ['b', 0]]) }),
    cands: [candidate('a'), candidate('b')],
    want: 'a',
  },
  {
    why: 'load: a replica only streaming answers beats one with a prompt waiting for its step, whatever their counts in flight',
    tier: loadTier,
    facts: routeFacts({}),
    cands: [candidate('a', { inFlight: 1, waiting: 1, queuedPrefillTokens: 1500 }), candidate('b', { inFlight: 3, waiting: 0 })],
    want: 'b',
  },
  {
    why: 'load: the engine\'s own waiting queue counts as requests ahead (other clients\' prompts)',
    tier: loadTier,
    facts: routeFacts({}),
    cands: [candidate('a', { inFlight: 0, waiting: 0, engineWaiting: 4 }), candidate('b', { inFlight: 2, waiting: 1, engineWaiting: 1 })],
    want: 'b',
  },
  {
    why: 'load: as many waiting: the least queued prefill',
    tier: loadTier,
    facts: routeFacts({}),
    cands: [candidate('a', { inFlight: 1, waiting: 1, queuedPrefillTokens: 4000 }), candidate('b', { inFlight: 3, waiting: 1, queuedPrefillTokens: 100 })],
    want: 'b',
  },
  {
    why: 'load: nothing waiting on either: fewest in flight',
    tier: loadTier,
    facts: routeFacts({}),
    cands: [candidate('a', { inFlight: 3 }), candidate('b', { inFlight: 1 })],
    want: 'b',
  },
  {
    why: 'load: equal replicas take turns',
    tier: loadTier,
    facts: routeFacts({ turn: 1 }),
    cands: [candidate('a'), candidate('b')],
    want: 'b',
  },
];
for (const r of tierRows) {
  void test(`tier: ${r.why}`, () => assert.equal(r.tier(r.facts, r.cands)?.replica.id, r.want));
}

const slots = { predicted: 0, held: [{ rank: anyRank, offload: false, slot: 1 }, { rank: anyRank, offload: true, slot: 2 }] };
const valueRows: readonly { why: string; lead: [number, number][]; dp: number; want: number }[] = [
  { why: 'device blocks count whole', lead: [[1, 10]], dp: 1, want: 10 },
  { why: 'blocks only in an offload tier count at the offload weight', lead: [[1, 4], [2, 10]], dp: 1, want: 4 + 0.5 * 6 },
  { why: 'a prefix on one of two data-parallel ranks is worth half', lead: [[1, 10]], dp: 2, want: 5 },
  { why: 'a prediction counts as held on the device', lead: [[0, 8], [1, 2]], dp: 1, want: 8 },
];
for (const r of valueRows) {
  void test(`effectiveBlocks: ${r.why}`, () => assert.equal(effectiveBlocks(slots, new Map(r.lead), r.dp, 0.5), r.want));
}

void test('effectiveBlocks: per-rank deltas are averaged over the ranks', () => {
  const s = { predicted: 0, held: [{ rank: 0, offload: false, slot: 1 }, { rank: 1, offload: false, slot: 2 }] };
  assert.equal(effectiveBlocks(s, new Map([[1, 10], [2, 6]]), 2, 0.5), 8);
});

function writer(index: FakeIndex, o: { now?: () => number; ttl?: number } = {}): IndexWriter {
  return new IndexWriter({ index, slotCount: 64, ownerOf: (id) => (id.startsWith('n2-') ? 'node2' : 'local'), predictionTtlMs: o.ttl ?? 1000, now: o.now, sweepIntervalMs: 0 });
}

void test('writer: a node may only report its own replicas', () => {
  const idx = new FakeIndex();
  const w = writer(idx);
  assert.equal(w.apply('node2', 'r0', { added: [1n], removed: [] }), false);
  assert.equal(idx.size, 0);
  assert.equal(w.stats.rejected, 1);
  assert.equal(w.apply('local', 'r0', { added: [1n], removed: [] }), true);
  assert.equal(idx.size, 1);
});

void test('writer: a reset clears the replica before the full copy that follows it', () => {
  const idx = new FakeIndex();
  const w = writer(idx);
  w.apply('local', 'r0', { added: [1n, 2n, 3n], removed: [] });
  w.apply('local', 'r1', { added: [3n], removed: [] });
  w.apply('local', 'r0', { added: [9n], removed: [], reset: 'all-blocks-cleared' });
  assert.deepEqual([...idx.map.keys()].sort(), [3n, 9n]);
  assert.equal(w.stats.resets.get('all-blocks-cleared'), 1);
});

void test('writer: a DP-2 replica scores a prefix on both ranks whole and one on one rank half', () => {
  const idx = new FakeIndex();
  const w = writer(idx);
  const both = [1n, 2n, 3n, 4n];
  const one = [5n, 6n];
  w.apply('local', 'r0', { added: [...both, ...one], removed: [], rank: 0 });
  w.apply('local', 'r0', { added: both, removed: [], rank: 1 });
  const s = w.slotsOf('r0');
  assert.ok(s !== undefined);
  const lead = (keys: readonly bigint[]): Map<number, number> => {
    const m = new Map<number, number>([[s.predicted, 0]]);
    for (const h of s.held) {
      let n = 0;
      while (n < keys.length && idx.holds(keys[n] as bigint, h.slot)) n++;
      m.set(h.slot, n);
    }
    return m;
  };
  assert.equal(effectiveBlocks(s, lead(both), 2, 0.5), 4, 'held on every rank: whatever rank the engine picks has it');
  assert.equal(effectiveBlocks(s, lead(one), 2, 0.5), 1, 'held on one rank of two: worth half');
});

void test('writer: a reset of one rank clears that rank only', () => {
  const idx = new FakeIndex();
  const w = writer(idx);
  w.apply('local', 'r0', { added: [1n, 2n], removed: [], rank: 0 });
  w.apply('local', 'r0', { added: [1n, 3n], removed: [], rank: 1 });
  w.apply('local', 'r0', { added: [], removed: [], reset: 'all-blocks-cleared', rank: 0 });
  const slotOf = (rank: number): number => w.slotsOf('r0')?.held.find((h) => h.rank === rank && !h.offload)?.slot ?? -1;
  assert.ok(!idx.holds(1n, slotOf(0)) && !idx.holds(2n, slotOf(0)));
  assert.ok(idx.holds(1n, slotOf(1)) && idx.holds(3n, slotOf(1)));
  assert.equal(w.stats.resets.get('all-blocks-cleared'), 1);
});

void test('writer: keys held only off the GPU go to the offload slot and move back when promoted', () => {
  const idx = new FakeIndex();
  const w = writer(idx);
  w.apply('local', 'r0', { added: [1n, 2n], removed: [], tiers: [{ key: 2n, medium: 'CPU' }] });
  const s = w.slotsOf('r0');
  const device = s?.held.find((h) => !h.offload)?.slot ?? -1;
  const offload = s?.held.find((h) => h.offload)?.slot ?? -1;
  assert.ok(idx.holds(1n, device) && idx.holds(2n, offload) && !idx.holds(2n, device));
  w.apply('local', 'r0', { added: [], removed: [], tiers: [{ key: 2n, medium: 'GPU' }] });
  assert.ok(idx.holds(2n, device) && !idx.holds(2n, offload));
  w.apply('local', 'r0', { added: [], removed: [2n] });
  assert.ok(!idx.holds(2n, device));
});

void test('writer: predictions expire after their lifetime', () => {
  let now = 0;
  const idx = new FakeIndex();
  const w = writer(idx, { now: () => now, ttl: 100 });
  w.predict('r0', keyArray([5n, 6n]));
  assert.equal(idx.size, 2);
  now = 50;
  w.predict('r0', keyArray([6n]));
  now = 120;
  w.sweep();
  assert.deepEqual([...idx.map.keys()], [6n], 'a key predicted again lives to its later expiry');
  now = 200;
  w.sweep();
  assert.equal(idx.size, 0);
});

void test('writer: a prediction from a position enters only the keys after it (the index has the rest: a new turn costs what it added)', () => {
  const idx = new FakeIndex();
  const w = writer(idx);
  w.predict('r0', keyArray([1n, 2n, 3n, 4n]), 3);
  assert.deepEqual([...idx.map.keys()], [4n]);
  w.predict('r0', keyArray([1n]), 1);
  assert.equal(idx.size, 1, 'nothing new: nothing entered');
});

void test('writer: real events replace predictions', () => {
  const idx = new FakeIndex();
  const w = writer(idx);
  w.predict('r0', keyArray([5n]));
  const predicted = w.slotsOf('r0')?.predicted ?? -1;
  w.apply('local', 'r0', { added: [5n], removed: [] });
  assert.ok(!idx.holds(5n, predicted));
  assert.equal(idx.map.get(5n)?.size, 1);
});

void test('writer: a removed replica gives its slots back', () => {
  const idx = new FakeIndex();
  const w = new IndexWriter({ index: idx, slotCount: 2, ownerOf: () => 'local', predictionTtlMs: 1000, sweepIntervalMs: 0 });
  w.apply('local', 'r0', { added: [1n], removed: [] });
  assert.equal(w.apply('local', 'r1', { added: [1n], removed: [] }), false, 'no slot left: counted, not thrown at the event stream');
  assert.equal(w.stats.slotless, 1);
  w.forget('r0');
  assert.equal(idx.size, 0);
  assert.equal(w.apply('local', 'r2', { added: [1n], removed: [] }), true);
});

void test('tree: leading chunks per replica, and a restarted replica is forgotten', () => {
  const t = new PrefixTree({ chunkChars: 16, maxChunks: 1000 });
  const text = 'abcdefghijklmnop'.repeat(4);
  t.insert(t.chunkNames(text), { id: 'a', generation: 1 });
  t.insert(t.chunkNames(text.slice(0, 32) + 'x'.repeat(32)), { id: 'b', generation: 1 });
  const lead = t.leading(t.chunkNames(text), [{ id: 'a', generation: 1 }, { id: 'b', generation: 1 }]);
  assert.deepEqual([lead.get('a'), lead.get('b')], [4, 2]);
  const after = t.leading(t.chunkNames(text), [{ id: 'a', generation: 2 }, { id: 'b', generation: 1 }]);
  assert.equal(after.get('a'), 0);
  t.forget('b');
  assert.equal(t.leading(t.chunkNames(text), [{ id: 'b', generation: 1 }]).get('b'), 0);
});

void test('tree: memory is bounded, the least recently routed prefixes go first', () => {
  const t = new PrefixTree({ chunkChars: 16, maxChunks: 8 });
  for (let i = 0; i < 20; i++) t.insert(t.chunkNames(`${i}`.padEnd(64, '.')), { id: 'a', generation: 1 });
  assert.equal(t.size, 8);
});

// --- Router end to end over fake engines (for /tokenize), a fake index and a fake scorer.

async function routerSetup(t: import('node:test').TestContext, o: { scorer?: 'ok' | 'late' | 'fail'; ttftBudgetMs?: number } = {}) {
  const engines = await Promise.all(['a', 'b'].map((id) => startFakeEngine({ id })));
  t.after(() => Promise.all(engines.map((e) => e.close())));
  const dispatcher = new Agent();
  t.after(() => dispatcher.close());
  const idx = new FakeIndex();
  const w = writer(idx, { ttl: 60_000 });
  const config = { ...gatewayDefaults.router, prefillTokensPerS: 1000, ttftBudgetMs: o.ttftBudgetMs ?? 10_000, scoreTimeoutMs: 50, tokenizeTimeoutMs: 5_000 };
  const scorer = fakeScorer(idx, o.scorer === 'late' ? { delayMs: 500 } : o.scorer === 'fail' ? { fail: 'queue-full' } : {});
  const load = new LoadBook();
  const router = new Router({
    config,
    tokens: new EngineTokenizer({ dispatcher, maxEntries: 100 }),
    scorer,
    slots: w,
    tree: new PrefixTree({ chunkChars: 64, maxChunks: 10_000 }),
    load,
  });
  const replicas = engines.map((e) => replicaView(e.id, { url: e.url }));
  // What the engine's events would report after serving a request: every full block of its prompt.
  const serve = (id: string, body: Record<string, unknown>): void => {
    w.apply('local', id, { added: fakeKeys(fakeTokens(body), 16, '|'), removed: [] });
  };
  return { router, replicas, w, idx, serve, load, engines };
}

const conversation = (topic: string, turns: number): Record<string, unknown> => ({
  model: 'm',
  messages: Array.from({ length: turns }, (_, i) => ({ role: i % 2 === 0 ? 'user' : 'assistant', content: `${topic} turn ${i} `.repeat(40) })),
});
const parsed = (body: Record<string, unknown>) => parseGenerationRequest('chat', Buffer.from(JSON.stringify(body)));

void test('router: follow-ups go to the replica holding their prefix; a reset moves them', async (t) => {
  const { router, replicas, w, serve } = await routerSetup(t);
  serve('a', conversation('cats', 3));
  serve('b', conversation('dogs', 3));
  serve('b', conversation('cats', 1));
  for (const [topic, want] of [['cats', 'a'], ['dogs', 'b']] as const) {
    const r = await router.route(parsed(conversation(topic, 5)), replicas);
    r.ticket.done();
    assert.equal(r.tier, 'precise', JSON.stringify(r.trace));
    assert.equal(r.replica.id, want);
    assert.ok(r.predictedCachedTokens > 0);
  }
  w.reset('a', 'restart');
  const r = await router.route(parsed(conversation('cats', 5)), replicas);
  r.ticket.done();
  assert.deepEqual([r.tier, r.replica.id], ['precise', 'b'], 'the shorter prefix on b is all that is left');
});

void test('router: a flood of one prefix spreads over both replicas', async (t) => {
  const { router, replicas } = await routerSetup(t, { ttftBudgetMs: 2000 });
  const system = { role: 'system', content: 'You are a helpful assistant. '.repeat(60) };
  const seen = new Map<string, number>();
  const tiers = new Set<string>();
  const tickets = [];
  // Nobody answers while the flood arrives: the queued prefill only grows.
  for (let i = 0; i < 40; i++) {
    const r = await router.route(parsed({ model: 'm', messages: [system, { role: 'user', content: `question ${i}` }] }), replicas);
    tickets.push(r.ticket);
    seen.set(r.replica.id, (seen.get(r.replica.id) ?? 0) + 1);
    tiers.add(r.tier);
  }
  for (const tk of tickets) tk.done();
  assert.ok((seen.get('a') ?? 0) >= 10 && (seen.get('b') ?? 0) >= 10, JSON.stringify([...seen]));
  assert.ok(tiers.has('precise'), 'siblings still share a cache while there is room');
});

void test('router: siblings sent before any event land together (burst co-location)', async (t) => {
  const { router, replicas } = await routerSetup(t);
  const body = conversation('burst', 3);
  const first = await router.route(parsed(body), replicas);
  const second = await router.route(parsed(body), replicas);
  first.ticket.firstByte();
  assert.equal(second.replica.id, first.replica.id);
  assert.equal(second.tier, 'precise');
  first.ticket.done();
  second.ticket.done();
});

// Token ids that answer without a round trip (a local tokenizer, a cache) leave two requests sent at
// once interleaved turn by turn: the load each reads must be read in the turn it commits in, or the
// second reads it between the first's read and its booking, sees an idle holder of the shared
// prefix, and piles onto it (the two-agent cluster test with local tokenizing on).
void test('router: two requests sharing a cached prefix, sent at once with instant token ids, go one to each replica', async () => {
  const idx = new FakeIndex();
  const w = writer(idx, { ttl: 60_000 });
  const tokens: TokenSource = {
    tokens: (req) => Promise.resolve({ ok: true, tokens: Uint32Array.from(fakeTokens({ messages: req.messages })), via: 'local', owned: true }),
  };
  const router = new Router({
    config: { ...gatewayDefaults.router, prefillTokensPerS: 1000, ttftBudgetMs: 10_000 },
    tokens,
    scorer: fakeScorer(idx),
    slots: w,
    tree: new PrefixTree({ chunkChars: 64, maxChunks: 10_000 }),
    load: new LoadBook(),
  });
  const replicas = ['a', 'b'].map((id) => replicaView(id));
  const system = { role: 'system', content: 'You are a helpful assistant.' };
  const ask = (topic: string): Record<string, unknown> => ({ model: 'm', messages: [system, { role: 'user', content: `${topic} `.repeat(60) }] });
  // Only a holds the two blocks every prompt shares (the system prompt).
  w.apply('local', 'a', { added: fakeKeys(fakeTokens(ask('x')), 16, '|').slice(0, 2), removed: [] });
  const both = await Promise.all(['two', 'three'].map((topic) => router.route(parsed(ask(topic)), replicas)));
  for (const r of both) r.ticket.done();
  assert.deepEqual(both.map((r) => r.replica.id).sort(), ['a', 'b'], JSON.stringify(both.map((r) => [r.replica.id, r.tier])));
});

for (const mode of ['late', 'fail'] as const) {
  void test(`router: a scorer that is ${mode} falls back to the approximate tree, never an error`, async (t) => {
    const { router, replicas } = await routerSetup(t, { scorer: mode });
    const body = conversation('fallback', 3);
    const first = await router.route(parsed(body), replicas);
    first.ticket.done();
    assert.equal(first.tier, 'load');
    const second = await router.route(parsed(body), replicas);
    second.ticket.done();
    assert.equal(second.trace.score, mode === 'late' ? 'timeout' : 'queue-full');
    assert.deepEqual([second.tier, second.replica.id], ['approximate', first.replica.id]);
  });
}

void test('router: a failed /tokenize goes to the approximate tier', async (t) => {
  const { router, replicas, engines } = await routerSetup(t);
  await Promise.all(engines.map((e) => e.close()));
  const body = conversation('notok', 3);
  const first = await router.route(parsed(body), replicas);
  first.ticket.done();
  const second = await router.route(parsed(body), replicas);
  second.ticket.done();
  assert.notEqual(second.trace.tokenize, 'engine');
  assert.deepEqual([second.tier, second.replica.id], ['approximate', first.replica.id]);
});

void test('router: a completions prompt of token ids is scored without /tokenize', async (t) => {
  const { router, replicas, w, engines } = await routerSetup(t);
  const ids = Array.from({ length: 320 }, (_, i) => (i * 7919) % 50_000);
  w.apply('local', 'b', { added: fakeKeys(ids, 16, '|'), removed: [] });
  const r = await router.route(parseGenerationRequest('completions', Buffer.from(JSON.stringify({ model: 'm', prompt: ids }))), replicas);
  r.ticket.done();
  assert.deepEqual([r.tier, r.replica.id], ['precise', 'b']);
  assert.equal(engines.reduce((n, e) => n + e.tokenizeCalls, 0), 0);
});

void test('router: a LoRA adapter and cache_salt hash as extra keys, so they do not match the base prefix', async (t) => {
  const { router, replicas, serve } = await routerSetup(t);
  serve('a', conversation('salted', 3));
  const lora = replicas.map((r) => ({ ...r, adapters: ['sql'] }));
  for (const extra of [{ cache_salt: 'tenant-a' }, { model: 'sql' }]) {
    const r = await router.route(parsed({ ...conversation('salted', 3), ...extra }), lora);
    r.ticket.done();
    assert.equal(r.tier, 'load', JSON.stringify(extra));
  }
});

// A pool that tokenizes hashes and scores in the same trip: the router takes those scores and makes
// no second trip, and they decide exactly as the scorer's would.
void test('router: scores answered with the token ids are used as they are, without a second trip to the scorer', async () => {
  const idx = new FakeIndex();
  const w = writer(idx, { ttl: 60_000 });
  const scorer = fakeScorer(idx);
  const asked: number[] = [];
  const tokens: TokenSource = {
    async tokens(req, _target, o) {
      const ids = Uint32Array.from(fakeTokens({ messages: req.messages }));
      asked.push(o.score?.length ?? 0);
      // The same work the pool does: each group hashed and counted with the index as it stands.
      const scored = await Promise.all((o.score ?? []).map((g) => fakeScorer(idx).score({ tokens: ids, hash: g.hash, slots: g.slots })));
      return { ok: true, tokens: ids, via: 'local', owned: true, scored: scored.flatMap((s) => (s.ok ? [{ keys: s.keys, leading: s.leading }] : [])) };
    },
  };
  const router = new Router({
    config: { ...gatewayDefaults.router, prefillTokensPerS: 1000, ttftBudgetMs: 10_000 },
    tokens,
    scorer,
    slots: w,
    tree: new PrefixTree({ chunkChars: 64, maxChunks: 10_000 }),
    load: new LoadBook(),
  });
  const replicas = ['a', 'b'].map((id) => replicaView(id));
  const body = { model: 'm', messages: [{ role: 'user', content: 'held '.repeat(80) }] };
  w.apply('local', 'b', { added: fakeKeys(fakeTokens(body), 16, '|').slice(0, 4), removed: [] });
  const r = await router.route(parsed(body), replicas);
  r.ticket.done();
  assert.deepEqual(asked, [1], 'one score group (both replicas share hash parameters) asked of the token source');
  assert.equal(scorer.calls, 0);
  assert.equal(r.tier, 'precise');
  assert.equal(r.replica.id, 'b');
  assert.equal(r.predictedCachedTokens, 64);
});

void test('within: the late answer on the deadline or when the client leaves, the work stopped through its signal, and nothing left listening', async () => {
  const hang = (seen: AbortSignal[]) => (d: Deadline): Promise<string> => {
    seen.push(d.signal);
    return new Promise<string>(() => undefined);
  };
  const late = (why: string): string => `late:${why}`;
  const seen: AbortSignal[] = [];
  assert.equal(await within(20, undefined, late, hang(seen)), 'late:timeout');
  assert.equal(seen[0]?.aborted, true, "the work's signal aborts at the deadline");

  const client = new AbortController();
  const left = within(60_000, client.signal, late, hang(seen));
  client.abort();
  assert.equal(await left, 'late:client-gone');
  assert.equal(seen[1]?.aborted, true, "the work's signal aborts when the client leaves");
  assert.equal(getEventListeners(client.signal, 'abort').length, 0, 'no listener outlives the wait');

  // A work that reads its signal only after the deadline passed finds it aborted.
  let readLate: Deadline | undefined;
  assert.equal(await within(20, undefined, late, (d) => ((readLate = d), new Promise<string>(() => undefined))), 'late:timeout');
  assert.equal(readLate?.signal.aborted, true);

  const gone = new AbortController();
  gone.abort();
  let ran = false;
  assert.equal(await within(60_000, gone.signal, late, () => ((ran = true), Promise.resolve('ran'))), 'late:client-gone');
  assert.equal(ran, false, 'a client already gone is not worked for');

  // Work that never reads its signal (a pool task) cannot be stopped: the client is not listened
  // to, and its answer is dropped for a client that left while it ran.
  const leaves = new AbortController();
  let finish: (v: string) => void = () => undefined;
  const unstoppable = within(60_000, leaves.signal, late, () => new Promise<string>((r) => (finish = r)));
  assert.equal(getEventListeners(leaves.signal, 'abort').length, 0, 'nobody listens for a client when nothing can be stopped');
  leaves.abort();
  finish('answer for nobody');
  assert.equal(await unstoppable, 'late:client-gone');

  const stays = new AbortController();
  assert.equal(await within(60_000, stays.signal, late, () => Promise.resolve('answer')), 'answer');
  assert.equal(await within(60_000, stays.signal, late, () => Promise.reject(new Error('source broke'))), 'late:source broke');
  assert.equal(getEventListeners(stays.signal, 'abort').length, 0);
});

void test('router: replicas without KV events are tokenized for the count only where one has a local tokenizer, and not under a baseline policy', async () => {
  const asked: (string | undefined)[] = [];
  const tokens: TokenSource = {
    tokens: (_req, target) => {
      asked.push(target.tokenizer);
      return Promise.resolve({ ok: true, tokens: Uint32Array.of(1, 2, 3, 4, 5, 6, 7), via: 'local', owned: true });
    },
  };
  const routerWith = (tiers: readonly RouteTier[] = defaultTiers): Router =>
    new Router({ config: { ...gatewayDefaults.router, ttftBudgetMs: 10_000 }, tokens, scorer: undefined, slots: undefined, tree: new PrefixTree({ chunkChars: 64, maxChunks: 1000 }), load: new LoadBook(), tiers });
  const body = { model: 'm', messages: [{ role: 'user', content: 'count me '.repeat(50) }] };
  const llama = (id: string, tokenizer?: string): ReplicaView => replicaView(id, { kvEvents: false, tokenizeApi: 'llamacpp', ...(tokenizer === undefined ? {} : { tokenizer }) });

  const counted = await routerWith().route(parsed(body), [llama('a'), llama('b', '/models/m.gguf')]);
  counted.ticket.done();
  assert.deepEqual(asked, ['/models/m.gguf'], 'asked for the replica with the tokenizer');
  assert.equal(counted.receipt.promptTokens, 7, 'the exact count, not an estimate');

  const none = await routerWith().route(parsed(body), [llama('a'), llama('b')]);
  none.ticket.done();
  const baseline = await routerWith(tiersOf('round-robin')).route(parsed(body), [llama('a'), llama('b', '/models/m.gguf')]);
  baseline.ticket.done();
  assert.deepEqual(asked, ['/models/m.gguf'], 'no tokenizer: no /tokenize spent on a count; a baseline policy: nothing spent');
  assert.notEqual(none.receipt.promptTokens, 7);
});

// A request that arrives while its model's tokenizer loads waits for it (tokenizer_load_wait_ms):
// the pool's threads are busy loading, so routing on would miss the score deadline and go by load.
const loadWaitRows = [
  { why: 'a loading tokenizer is waited for before the prompt is tokenized', waitMs: 60_000, settles: true, tokenizedAfterLoad: true },
  { why: 'with the wait off (0) the prompt is tokenized at once', waitMs: 0, settles: true, tokenizedAfterLoad: false },
  { why: 'a load that does not end holds the request only for the bound', waitMs: 20, settles: false, tokenizedAfterLoad: false },
] as const;
for (const row of loadWaitRows) {
  void test(`router: ${row.why}`, async () => {
    let loaded = false;
    let finish: () => void = () => undefined;
    const load = new Promise<void>((resolve) => (finish = resolve)).then(() => {
      loaded = true;
    });
    const seen: boolean[] = [];
    const idx = new FakeIndex();
    const tokens: TokenSource = {
      tokens: () => {
        seen.push(loaded);
        return Promise.resolve({ ok: true, tokens: Uint32Array.of(1, 2, 3), via: 'local', owned: true });
      },
    };
    const router = new Router({
      config: { ...gatewayDefaults.router, tokenizerLoadWaitMs: row.waitMs },
      tokens,
      loads: { loading: (model) => (model === 'm' && !loaded ? load : undefined) },
      scorer: fakeScorer(idx),
      slots: writer(idx, { ttl: 60_000 }),
      tree: new PrefixTree({ chunkChars: 64, maxChunks: 100 }),
      load: new LoadBook(),
    });
    const routed = router.route(parsed({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }), [replicaView('a')]);
    if (row.settles) setImmediate(finish);
    (await routed).ticket.done();
    assert.deepEqual(seen, [row.tokenizedAfterLoad]);
  });
}
