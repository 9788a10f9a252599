// The load tier's tie-break by cache room (routing/cache-room.ts): the block counts kept beside the
// shared index, the order they give, and the case that needed them: gateways with their own turns
// sending their first cold prompts to the same replica.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { gatewayDefaults } from '../../src/gateway/index.js';
import { ClusterIndex, IndexWriter } from '../../src/kv/index.js';
import { parseGenerationRequest } from '../../src/limits/index.js';
import { cachedBlocksOf, LoadBook, loadTier, PrefixTree, roomOrder, Router, SlotCounts } from '../../src/routing/index.js';
import type { TokenSource } from '../../src/routing/index.js';
import { fakeTokens } from '../gateway/fake-engine.js';
import { FakeIndex, fakeKeys, fakeScorer } from '../gateway/fake-index.js';
import { candidate, routeFacts, replicaView } from '../gateway/replica-view.js';

void test('SlotCounts: counts what the index says each write changed', () => {
  const counts = new SlotCounts(new ClusterIndex({ capacityBlocks: 1_000 }));
  counts.add(3, [1n, 2n, 3n]);
  counts.add(3, [3n, 4n]);
  assert.equal(counts.blocksIn(3), 4, 'a key reported twice counts once');
  counts.remove(3, [4n, 9n]);
  assert.equal(counts.blocksIn(3), 3, 'a key the slot never held is not taken off');
  counts.add(5, [1n]);
  counts.clearSlot(3);
  assert.deepEqual([counts.blocksIn(3), counts.blocksIn(5)], [0, 1], 'a cleared slot is empty, the others keep theirs');
});

void test('cachedBlocksOf: device slots over every rank and the predictions, not the offload tier', () => {
  const counts = new SlotCounts(new ClusterIndex({ capacityBlocks: 1_000 }));
  counts.add(0, [1n]);
  counts.add(1, [2n, 3n]);
  counts.add(2, [4n, 5n, 6n]);
  counts.add(3, [7n, 8n, 9n, 10n]);
  const slots = { predicted: 0, held: [{ rank: 0, offload: false, slot: 1 }, { rank: 1, offload: false, slot: 2 }, { rank: 0, offload: true, slot: 3 }] };
  assert.equal(cachedBlocksOf(slots, counts), 6);
  assert.equal(cachedBlocksOf(undefined, counts), 0, 'a replica the index has no slots for holds nothing');
});

const roomRows = [
  { why: 'a whole prompt emptier wins', a: 0, b: 505, blocks: 505, want: -1 },
  { why: 'caches a few blocks apart tie (no herding onto the one a block emptier)', a: 1_020, b: 1_024, blocks: 100, want: 0 },
  { why: 'an unknown count decides nothing', a: undefined, b: 505, blocks: 505, want: 0 },
  { why: 'a prompt filling no block decides nothing', a: 0, b: 505, blocks: 0, want: 0 },
] as const;
for (const r of roomRows) {
  void test(`roomOrder: ${r.why}`, () => assert.equal(Math.sign(roomOrder(r.a, r.b, r.blocks)), r.want));
}

void test('loadTier: between idle replicas, the emptier cache by a prompt takes a cold prompt; a busier one still loses', () => {
  const f = routeFacts({ promptTokens: 8_000 });
  const full = candidate('a', { cachedBlocks: 500 });
  const empty = candidate('b', { cachedBlocks: 0 });
  assert.equal(loadTier(f, [full, empty])?.replica.id, 'b');
  assert.equal(loadTier(f, [full, { ...empty, inFlight: 1, waiting: 1 }])?.replica.id, 'a', 'room is a tie-break, not a reason to queue');
});

// One gateway as serve builds it: its own index behind the counts, its own writer, load book and turns.
function gateway() {
  const fake = new CountingFake();
  const counts = new SlotCounts(fake);
  const writer = new IndexWriter({ index: counts, slotCount: 64, ownerOf: () => 'local', predictionTtlMs: 60_000, sweepIntervalMs: 0 });
  const tokens: TokenSource = {
    tokens: (req) => Promise.resolve({ ok: true, tokens: Uint32Array.from(fakeTokens({ messages: req.messages })), via: 'local', owned: true }),
  };
  const router = new Router({
    config: { ...gatewayDefaults.router, prefillTokensPerS: 100_000, ttftBudgetMs: 10_000 },
    tokens,
    scorer: fakeScorer(fake),
    slots: writer,
    tree: new PrefixTree({ chunkChars: 64, maxChunks: 10_000 }),
    load: new LoadBook(),
    cachedBlocks: (id) => cachedBlocksOf(writer.slotsOf(id), counts),
  });
  return { router, writer };
}

// FakeIndex (the scorer reads it) answering how many keys each write changed, as ClusterIndex does.
class CountingFake extends FakeIndex {
  override add(slot: number, keys: Iterable<bigint>): number {
    const fresh = [...keys].filter((k) => !this.holds(k, slot));
    super.add(slot, fresh);
    return fresh.length;
  }
  override remove(slot: number, keys: Iterable<bigint>): number {
    const held = [...keys].filter((k) => this.holds(k, slot));
    super.remove(slot, held);
    return held.length;
  }
  override clearSlot(slot: number): number {
    const held = [...this.map].filter(([, s]) => s.has(slot)).length;
    super.clearSlot(slot);
    return held;
  }
}

void test('two gateways: a cold document through the second goes to the replica the first did not fill', async () => {
  const gws = [gateway(), gateway()];
  const replicas = ['a', 'b'].map((id) => replicaView(id));
  const doc = (name: string): Record<string, unknown> => ({ model: 'm', messages: [{ role: 'user', content: `${name}: ${'lorem ipsum '.repeat(400)}` }] });
  const route = async (gw: number, body: Record<string, unknown>) => {
    const r = await (gws[gw]?.router ?? assert.fail('no gateway')).route(parseGenerationRequest('chat', Buffer.from(JSON.stringify(body))), replicas);
    r.ticket.done();
    return r;
  };
  const first = (await route(0, doc('first'))).replica.id;
  // The engine's events reach every gateway, as the link delivers them; nothing else is shared.
  const stored = fakeKeys(fakeTokens(doc('first')), 16, '|');
  for (const g of gws) g.writer.apply('local', first, { added: stored, removed: [] });
  const second = await route(1, doc('second'));
  assert.notEqual(second.replica.id, first, 'the second gateway saw the first document in the cache and placed the second beside it, not on it');
  const seen = Object.fromEntries(second.receipt.candidates.map((c) => [c.replica, c.cachedBlocks]));
  assert.deepEqual(seen, { [first]: stored.length, [second.replica.id]: 0 }, 'the receipt says what each cache held');
  assert.match(second.receipt.reason, /least loaded: .*, 0 blocks cached$/);
});
