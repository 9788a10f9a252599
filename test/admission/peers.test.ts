// Admission across gateways: the merge of the other gateways' reports (summed, expired ones
// dropped), the report's encoding, the share rule counting a peer's tenants as its own, and the
// publish/read loop over a fake board, whose view goes stale when the reads stop.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { Admission, AdmissionPeers, admissionDefaults, decodeHolds, encodeHolds, mergePeers } from '../../src/admission/index.js';
import type { AdmissionAsk, AdmissionObserver, HoldRow, PeerBoard, PeerTenant } from '../../src/admission/index.js';
import { waitFor } from '../support/wait.js';

const row = (tenant: string, holds: number, rank = 1, model = 'm'): HoldRow => ({ model, tenant, rank, holds });

const merges = [
  { why: 'two gateways holding for one tenant add up', reports: [{ gateway: 'g2', ageMs: 10, rows: [row('a', 2)] }, { gateway: 'g3', ageMs: 10, rows: [row('a', 3)] }], want: { a: { holds: [0, 5, 0], active: [false, true, false] } } },
  { why: 'a report older than the ttl is a dead gateway: it counts for nothing', reports: [{ gateway: 'g2', ageMs: 2_001, rows: [row('a', 9)] }, { gateway: 'g3', ageMs: 2_000, rows: [row('b', 1)] }], want: { b: { holds: [0, 1, 0], active: [false, true, false] } } },
  { why: 'an active tenant holding nothing is still active: it is the polite one', reports: [{ gateway: 'g2', ageMs: 0, rows: [row('a', 0, 0)] }], want: { a: { holds: [0, 0, 0], active: [true, false, false] } } },
  { why: 'a class this llmgw does not know is dropped, not written past the array', reports: [{ gateway: 'g2', ageMs: 0, rows: [row('a', 4, 3), row('a', 4, -1)] }], want: {} },
];
for (const r of merges) {
  void test(`mergePeers: ${r.why}`, () => {
    const got = Object.fromEntries([...(mergePeers(r.reports, 2_000, 3).get('m') ?? new Map<string, PeerTenant>())].map(([t, v]) => [t, { holds: [...v.holds], active: [...v.active] }]));
    assert.deepEqual(got, r.want);
  });
}

void test('mergePeers: models stay apart', () => {
  const merged = mergePeers([{ gateway: 'g2', ageMs: 0, rows: [row('a', 1, 1, 'm'), row('a', 7, 1, 'n')] }], 1_000, 3);
  assert.deepEqual(merged.get('m')?.get('a')?.holds, [0, 1, 0]);
  assert.deepEqual(merged.get('n')?.get('a')?.holds, [0, 7, 0]);
});

const bodies = [
  { why: 'a report reads back as written', body: encodeHolds([row('a', 2), row('b', 0, 2, 'n')]), want: [row('a', 2), row('b', 0, 2, 'n')] },
  { why: 'a tuple of the wrong shape is dropped, the rest kept', body: JSON.stringify([['m', 'a', 1, 2], ['m', 5, 1, 2], ['m', 'b', 1.5, 2], ['m', 'c', 1, -1], 'x']), want: [row('a', 2)] },
  { why: 'a body that is not JSON is no rows', body: '{"tr', want: [] },
  { why: 'a body that is not a list is no rows', body: '{"m":1}', want: [] },
];
for (const r of bodies) void test(`decodeHolds: ${r.why}`, () => assert.deepEqual(decodeHolds(r.body), r.want));

function ask(o: Partial<AdmissionAsk> = {}): AdmissionAsk {
  return { model: 'm', tenant: 'flood', weight: 1, priority: 'standard', costTokens: 100, sizeBytes: 400, maxWaitMs: 10_000, signal: new AbortController().signal, ...o };
}

// Two replicas of one slot: a capacity of 2, a share of 1 with two tenants active. The flood asks
// through this gateway only; the polite tenant, if anywhere, through a peer.
function gateway(peer: ReadonlyMap<string, PeerTenant> | undefined) {
  const replicas = ['r0', 'r1'].map((id) => ({ id, waiting: 0, engineWaiting: 0, queuedPrefillTokens: 0, prefillTokensPerS: 10_000 }));
  const lowered: string[] = [];
  const observer: AdmissionObserver = { admitted: () => undefined, refused: () => undefined, placedLower: (_m, p) => lowered.push(p) };
  const a = new Admission({ config: { ...admissionDefaults, slotsPerReplica: 1, pollIntervalMs: 5 }, facts: { replicas: () => replicas }, observer, peers: (model) => (model === 'm' ? peer : undefined) });
  return { a, lowered };
}

const politeOnPeer = new Map<string, PeerTenant>([['polite', { holds: [0, 0, 0], active: [false, true, false] }]]);
const floodOnPeer = new Map<string, PeerTenant>([['other', { holds: [0, 5, 0], active: [false, true, false] }]]);
const shares = [
  { why: 'alone on every gateway: the flood keeps its class', peer: undefined, lowered: 0 },
  { why: 'a polite tenant active on a peer: the flood over its share is placed a class lower', peer: politeOnPeer, lowered: 2 },
  { why: 'another flood on a peer, over its share too: neither is polite, both keep their class', peer: floodOnPeer, lowered: 0 },
];
for (const r of shares) {
  void test(`admission with peers: ${r.why}`, async (t) => {
    const { a, lowered } = gateway(r.peer);
    t.after(() => a.close());
    // Each answers on r0 at once, as the over-share tests of admission.test.ts do.
    for (let k = 0; k < 4; k++) (await a.admit(ask())).watch({ firstByte: () => undefined, done: () => undefined }, 'r0').firstByte();
    assert.equal(lowered.length, r.lowered, JSON.stringify(lowered));
  });
}

void test('admission: holdings reports each active tenant, queued and let in, per model and class', async (t) => {
  const { a } = gateway(undefined);
  t.after(() => a.close());
  const p = await a.admit(ask());
  await a.admit(ask());
  await a.admit(ask({ tenant: 'polite', priority: 'interactive' }));
  p.done();
  assert.deepEqual(
    a.holdings().sort((x, y) => x.tenant.localeCompare(y.tenant)),
    [row('flood', 1), row('polite', 1, 0)],
  );
});

// A board in memory: what this gateway published, and the others' reports as the test sets them.
function board() {
  const b = { published: [] as string[], others: [] as { gateway: string; ageMs: number; body: string }[], withdrawn: 0, fail: false };
  const fake: PeerBoard = {
    publish: async (body) => {
      if (b.fail) throw new Error('database away');
      b.published.push(body);
    },
    read: async () => b.others,
    withdraw: async () => {
      b.withdrawn++;
    },
  };
  return { b, fake };
}

void test('AdmissionPeers: publishes this gateway\'s holds, reads the others\', and stops counting them once its reads are ttl old', async (t) => {
  const { b, fake } = board();
  b.others = [{ gateway: 'g2', ageMs: 5, body: encodeHolds([row('polite', 0)]) }];
  const clock = { ms: 0 };
  const errors: unknown[] = [];
  const peers = new AdmissionPeers({ board: fake, holdings: () => [row('flood', 3)], intervalMs: 10, classes: 3, onError: (e) => errors.push(e), now: () => clock.ms });
  t.after(() => peers.close());
  assert.equal(peers.ttlMs, 1_000, 'ten intervals, at least a second');
  peers.start();
  await waitFor(() => peers.holdsOf('m'), { timeoutMs: 5_000, what: 'the first read' });
  assert.deepEqual(peers.holdsOf('m')?.get('polite')?.active, [false, true, false]);
  assert.deepEqual(decodeHolds(b.published[0] ?? ''), [row('flood', 3)]);
  b.fail = true;
  await waitFor(() => errors.length > 0 || undefined, { timeoutMs: 5_000, what: 'a failed round' });
  clock.ms = 1_001;
  assert.equal(peers.holdsOf('m'), undefined, 'no read for a ttl: the peers are not counted any more');
  await peers.close();
  assert.equal(b.withdrawn, 1, 'its report is taken down as it stops');
  await peers.close();
  assert.equal(b.withdrawn, 1, 'close is idempotent');
});
