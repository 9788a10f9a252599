// The admission controller with fake load facts: straight through while a replica has room, queued
// once all are saturated, dispatched as room comes back, refused early with a reason and
// Retry-After, taken out at once when its client leaves. Every wait is on a promise, bounded.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { Admission, AdmissionRefused, admissionDefaults } from '../../src/admission/index.js';
import type { AdmissionAsk, AdmissionConfig, Permit, ReplicaLoad } from '../../src/admission/index.js';
import { errorReply } from '../../src/gateway/index.js';

// One replica whose waiting count the test sets, as routing's load book would.
function cluster(waiting = 0): { replica: { -readonly [K in keyof ReplicaLoad]: ReplicaLoad[K] }; facts: { replicas: () => ReplicaLoad[] } } {
  const replica = { id: 'r0', waiting, engineWaiting: 0, queuedPrefillTokens: 0, prefillTokensPerS: 10_000 };
  return { replica, facts: { replicas: () => [replica] } };
}

const config: AdmissionConfig = { ...admissionDefaults, maxWaitingPerReplica: 2, reservedPerClass: 0, pollIntervalMs: 5 };

function ask(o: Partial<AdmissionAsk> = {}): AdmissionAsk {
  return { model: 'm', tenant: 't', weight: 1, priority: 'standard', costTokens: 100, sizeBytes: 400, maxWaitMs: 10_000, signal: new AbortController().signal, ...o };
}

const settled = async <T>(p: Promise<T>): Promise<'pending' | 'done'> => Promise.race([p.then(() => 'done' as const, () => 'done' as const), new Promise<'pending'>((r) => setImmediate(() => r('pending')))]);

void test('admission: straight through while a replica has room, queued once every replica is saturated', async (t) => {
  const { replica, facts } = cluster();
  const a = new Admission({ config, facts });
  t.after(() => a.close());
  const first = await a.admit(ask());
  assert.equal(first.queued, false);
  replica.waiting = 2;
  first.watch({ firstByte: () => undefined, done: () => undefined }, 'r0');
  const second = a.admit(ask());
  assert.equal(await settled(second), 'pending', 'saturated: it waits');
  assert.equal(a.view()[0]?.queued, 1);
  replica.waiting = 1;
  first.done();
  const p = await second;
  assert.equal(p.queued, true);
  assert.equal(p.why, 'every replica saturated');
  assert.equal(a.view()[0]?.queued, 0);
});

void test('admission: the engine\'s own queue saturates a replica too, and the poll sees it drain', async (t) => {
  const { replica, facts } = cluster();
  replica.engineWaiting = 5;
  const a = new Admission({ config, facts });
  t.after(() => a.close());
  const p = a.admit(ask());
  assert.equal(await settled(p), 'pending');
  replica.engineWaiting = 0;
  assert.equal((await p).queued, true, 'the poll dispatched it without any request of ours ending');
});

void test('admission: a request that cannot start before its deadline is refused at once, with Retry-After', async (t) => {
  const { facts } = cluster(2);
  const a = new Admission({ config, facts });
  t.after(() => a.close());
  // 10k tokens/s: 50 requests of 1000 tokens ahead are 5 s of work.
  const queued = Array.from({ length: 50 }, () => a.admit(ask({ costTokens: 1000, tenant: 'flood' })));
  await assert.rejects(a.admit(ask({ costTokens: 1000, tenant: 'flood', maxWaitMs: 1000 })), (e: unknown) => {
    assert.ok(e instanceof AdmissionRefused);
    assert.equal(e.reason, 'deadline');
    assert.ok(e.retryAfterS >= 5, `retry after ${e.retryAfterS} s`);
    const reply = errorReply(e);
    assert.equal(reply.status, 503);
    assert.equal(reply.headers['retry-after'], String(e.retryAfterS));
    assert.match(reply.body.error.message, /estimated wait .* is longer than this request may wait \(1000 ms\)/);
    return true;
  });
  a.close();
  const outcomes = await Promise.allSettled(queued);
  assert.ok(outcomes.every((o) => o.status === 'rejected' && o.reason instanceof AdmissionRefused && o.reason.reason === 'closing'), 'closing refuses every waiter');
});

void test('admission: a request whose wait runs out is refused then, with the reason', async (t) => {
  const { facts } = cluster(2);
  const a = new Admission({ config, facts });
  t.after(() => a.close());
  await assert.rejects(a.admit(ask({ maxWaitMs: 20, costTokens: 1 })), (e: unknown) => e instanceof AdmissionRefused && e.reason === 'wait-expired' && errorReply(e).status === 503);
  assert.equal(a.view()[0]?.queued, 0);
});

void test('admission: a client that leaves is out of the queue at once', async (t) => {
  const { facts } = cluster(2);
  const a = new Admission({ config, facts });
  t.after(() => a.close());
  const client = new AbortController();
  const p = a.admit(ask({ signal: client.signal }));
  assert.equal(a.view()[0]?.queued, 1);
  client.abort(new Error('client left'));
  await assert.rejects(p, /client left/);
  assert.equal(a.view()[0]?.queued, 0);
  assert.equal(a.view()[0]?.bytes, 0);
});

void test('admission: queued requests come out by class as room comes back', async (t) => {
  const { replica, facts } = cluster(2);
  const a = new Admission({ config, facts });
  t.after(() => a.close());
  const order: string[] = [];
  const take = (tag: string, priority: AdmissionAsk['priority']): Promise<Permit> =>
    a.admit(ask({ priority, tenant: tag })).then((p) => {
      order.push(tag);
      p.done();
      return p;
    });
  const all = [take('batch', 'batch'), take('standard', 'standard'), take('interactive', 'interactive')];
  replica.waiting = 1;
  await Promise.all(all);
  assert.deepEqual(order, ['interactive', 'standard', 'batch']);
});

void test('admission: a full queue displaces the flood for an interactive request (429 to the flood)', async (t) => {
  const { facts } = cluster(2);
  const a = new Admission({ config: { ...config, maxQueuedRequests: 2 }, facts });
  t.after(() => a.close());
  const older = a.admit(ask({ tenant: 'b', priority: 'batch' }));
  const newer = a.admit(ask({ tenant: 'b', priority: 'batch' }));
  const chat = a.admit(ask({ tenant: 'a', priority: 'interactive' }));
  await assert.rejects(newer, (e: unknown) => e instanceof AdmissionRefused && e.reason === 'displaced' && errorReply(e).status === 429);
  assert.equal(await settled(chat), 'pending', 'the interactive request holds the place');
  assert.equal(await settled(older), 'pending', 'the flood\'s older request keeps its place');
  a.close();
  await assert.rejects(chat, (e: unknown) => e instanceof AdmissionRefused && e.reason === 'closing');
  await assert.rejects(older, (e: unknown) => e instanceof AdmissionRefused && e.reason === 'closing');
});

void test('admission: off, every request goes straight through whatever the load', async () => {
  const { facts } = cluster(100);
  const a = new Admission({ config: { ...config, enabled: false }, facts });
  assert.equal((await a.admit(ask())).queued, false);
  a.close();
});

void test('admission: each lower class leaves room for the ones above, so an interactive request goes straight through a batch flood', async (t) => {
  const { replica, facts } = cluster(4);
  const a = new Admission({ config: { ...config, maxWaitingPerReplica: 8, reservedPerClass: 2 }, facts });
  t.after(() => a.close());
  const batch = a.admit(ask({ priority: 'batch', tenant: 'flood' }));
  assert.equal(await settled(batch), 'pending', 'batch fills a replica to 8 - 2 x 2 = 4 waiting');
  const chat = await a.admit(ask({ priority: 'interactive', tenant: 'chat' }));
  assert.equal(chat.queued, false, 'interactive may fill it to 8');
  chat.done();
  replica.waiting = 3;
  assert.equal((await batch).queued, true);
});

void test('admission: with the engines\' slots stated, a batch flood leaves slots free, so an interactive request never has to preempt one', async (t) => {
  const { replica, facts } = cluster(0);
  const a = new Admission({ config: { ...config, maxWaitingPerReplica: 8, slotsPerReplica: 4, reservedSlotsPerClass: 1 }, facts });
  t.after(() => a.close());
  const r = { ...replica, inFlight: 2 };
  // r answers two requests; the replica of `a` says nothing of its in-flight requests.
  const slotted = { replicas: () => [r] };
  const b = new Admission({ config: { ...config, maxWaitingPerReplica: 8, slotsPerReplica: 4, reservedSlotsPerClass: 1 }, facts: slotted });
  t.after(() => b.close());
  const batch = b.admit(ask({ priority: 'batch', tenant: 'flood' }));
  assert.equal(await settled(batch), 'pending', 'batch holds at most 4 - 2 x 1 = 2 slots, all answering, none waiting');
  const chat = await b.admit(ask({ priority: 'interactive', tenant: 'chat' }));
  assert.equal(chat.queued, false, 'interactive may take all 4');
  r.inFlight = 1;
  chat.done();
  assert.equal((await batch).queued, true, 'a slot given back lets the batch request in');
  assert.equal((await a.admit(ask({ priority: 'batch' }))).queued, false, 'a replica that does not say its in-flight count is taken as having none');
});

void test('admission: no lower class goes onto a replica while a higher one waits for its first token there', async (t) => {
  const r0 = { id: 'r0', waiting: 0, engineWaiting: 0, queuedPrefillTokens: 0, prefillTokensPerS: 10_000 };
  const r1 = { ...r0, id: 'r1', waiting: 2 };
  const a = new Admission({ config: { ...config, maxWaitingPerReplica: 2 }, facts: { replicas: () => [r0, r1] } });
  t.after(() => a.close());
  const chat = await a.admit(ask({ priority: 'interactive', tenant: 'chat' }));
  const ticket = chat.watch({ firstByte: () => undefined, done: () => undefined }, 'r0');
  const batch = a.admit(ask({ priority: 'batch', tenant: 'flood' }));
  assert.equal(await settled(batch), 'pending', 'r0 has room, but its interactive request is still in prefill; r1 is saturated');
  const other = await a.admit(ask({ priority: 'interactive', tenant: 'chat' }));
  assert.equal(other.queued, false, 'a request of the same class is not held by it');
  other.done();
  ticket.firstByte();
  assert.equal((await batch).queued, true, 'its first byte lets the batch request in');
});

void test('admission: a replica is held for a lower class only until the higher request answers or ends', async (t) => {
  const { facts } = cluster(0);
  const a = new Admission({ config: { ...config, maxWaitingPerReplica: 4 }, facts });
  t.after(() => a.close());
  const chat = await a.admit(ask({ priority: 'interactive', tenant: 'chat' }));
  const ticket = chat.watch({ firstByte: () => undefined, done: () => undefined }, 'r0');
  const standard = a.admit(ask({ priority: 'standard', tenant: 'etl' }));
  assert.equal(await settled(standard), 'pending');
  ticket.done();
  ticket.done();
  assert.equal((await standard).queued, true, 'a request that failed before answering gives the replica back too');
  const again = await a.admit(ask({ priority: 'batch', tenant: 'flood' }));
  assert.equal(again.queued, false, 'counted once, though its end was reported twice');
});

// Replicas with nothing waiting (the test may set their counts), and a clock the test moves.
function lanes(n: number, o: Partial<AdmissionConfig> = {}) {
  const replicas = Array.from({ length: n }, (_, i) => ({ id: `r${i}`, waiting: 0, engineWaiting: 0, queuedPrefillTokens: 0, prefillTokensPerS: 10_000 }));
  const clock = { ms: 0 };
  const a = new Admission({ config: { ...config, maxWaitingPerReplica: 4, ...o }, facts: { replicas: () => replicas }, now: () => clock.ms });
  const ids = (p: Permit): string[] => p.among(replicas).map((r) => r.id);
  const ticket = { firstByte: () => undefined, done: () => undefined };
  return { a, clock, ids, ticket, replicas };
}

void test('admission: while an interactive tenant is active, batch prefills on every replica but one, so an interactive request never waits out a batch prompt', async (t) => {
  const { a, ids, ticket } = lanes(3);
  t.after(() => a.close());
  (await a.admit(ask({ priority: 'interactive', tenant: 'chat' }))).done();
  const b1 = await a.admit(ask({ priority: 'batch', tenant: 'flood' }));
  assert.deepEqual(ids(b1), ['r0', 'r1', 'r2']);
  const first = b1.watch(ticket, 'r0');
  const b2 = await a.admit(ask({ priority: 'batch', tenant: 'flood' }));
  assert.deepEqual(ids(b2), ['r0', 'r1', 'r2'], 'two lanes of three: one in use, one free');
  const second = b2.watch(ticket, 'r1');
  const b3 = await a.admit(ask({ priority: 'batch', tenant: 'flood' }));
  assert.equal(b3.queued, false, 'r0 and r1 still have waiting places for batch');
  assert.deepEqual(ids(b3), ['r0', 'r1'], 'r2 is kept free of batch prefill: routing may not choose it');
  b3.done();
  const chat = await a.admit(ask({ priority: 'interactive', tenant: 'chat' }));
  assert.deepEqual(ids(chat), ['r2'], 'the highest class is placed where no prefill is awaited');
  chat.done();
  first.firstByte();
  second.firstByte();
  const b4 = await a.admit(ask({ priority: 'batch', tenant: 'flood' }));
  assert.deepEqual(ids(b4), ['r0', 'r1', 'r2'], 'a first byte ends the prefill: the lanes are free again');
});

void test('admission: a queued request\'s receipt says why it waited: replicas full, room kept for the classes above, or requests before it', async (t) => {
  const { a } = lanes(2);
  t.after(() => a.close());
  (await a.admit(ask({ priority: 'interactive', tenant: 'chat' }))).done();
  const b1 = await a.admit(ask({ priority: 'batch', tenant: 'flood' }));
  const b2 = a.admit(ask({ priority: 'batch', tenant: 'flood' }));
  const b3 = a.admit(ask({ priority: 'batch', tenant: 'flood' }));
  assert.equal(await settled(b2), 'pending', 'both replicas are idle, but batch has one lane and b1 holds it');
  b1.done();
  const second = await b2;
  assert.equal(second.why, 'room kept for the classes above it', 'not "saturated": the replicas were idle');
  second.done();
  assert.equal((await b3).why, 'requests queued before it');
  const { replica, facts } = cluster(2);
  const full = new Admission({ config, facts });
  t.after(() => full.close());
  const batch = full.admit(ask({ priority: 'batch' }));
  replica.waiting = 0;
  assert.equal((await batch).why, 'every replica saturated', 'no class had room: the same words for every class');
});

void test('admission: batch starts prefill on an idle replica only while another idle one stays free for interactive', async (t) => {
  const { a, ids, ticket } = lanes(2);
  t.after(() => a.close());
  const chat = (await a.admit(ask({ priority: 'interactive', tenant: 'chat' }))).watch(ticket, 'r0');
  const batch = a.admit(ask({ priority: 'batch', tenant: 'flood' }));
  assert.equal(await settled(batch), 'pending', 'r1 is idle, but it is the only one: the next interactive request would find both prefilling');
  chat.firstByte();
  const b = await batch;
  assert.deepEqual(ids(b), ['r0', 'r1'], 'both idle: one may take batch, the other stays free');
});

void test('admission: a class let in for none of starvation_ms no longer waits for an idle replica beyond the reserve', async (t) => {
  const { a, clock, ids, ticket } = lanes(2, { starvationMs: 1000 });
  t.after(() => a.close());
  (await a.admit(ask({ priority: 'interactive', tenant: 'chat' }))).watch(ticket, 'r0');
  const batch = a.admit(ask({ priority: 'batch', tenant: 'flood', maxWaitMs: 60_000 }));
  assert.equal(await settled(batch), 'pending');
  clock.ms += 999;
  assert.equal(await settled(batch), 'pending', 'not yet starving');
  clock.ms += 1;
  const b = await batch;
  assert.deepEqual(ids(b), ['r1'], 'on its lane, still never where the interactive prompt prefills');
});

void test('admission: a batch request the queue lets in as starved takes the room of the highest class, and still keeps off the replica where interactive prefills', async (t) => {
  const r0 = { id: 'r0', waiting: 0, engineWaiting: 0, queuedPrefillTokens: 0, prefillTokensPerS: 10_000 };
  const r1 = { ...r0, id: 'r1' };
  const clock = { ms: 0 };
  const a = new Admission({ config: { ...config, maxWaitingPerReplica: 1, starvationMs: 1000, starvationEvery: 1 }, facts: { replicas: () => [r0, r1] }, now: () => clock.ms });
  t.after(() => a.close());
  (await a.admit(ask({ priority: 'interactive', tenant: 'chat' }))).watch({ firstByte: () => undefined, done: () => undefined }, 'r0');
  r0.waiting = 1;
  r1.waiting = 1;
  const batch = a.admit(ask({ priority: 'batch', tenant: 'flood', maxWaitMs: 60_000 }));
  const chat = a.admit(ask({ priority: 'interactive', tenant: 'chat', maxWaitMs: 60_000 }));
  assert.equal(await settled(batch), 'pending');
  clock.ms += 1000;
  r1.waiting = 0;
  const b = await batch;
  assert.deepEqual(b.among([r0, r1]).map((r) => r.id), ['r1'], 'starved, it goes first, but not into the interactive prompt\'s step');
  b.done();
  void chat.then((p) => p.done(), () => undefined);
});

void test('admission: a batch request dispatched but not yet placed holds its lane, so two at once cannot take both replicas', async (t) => {
  const { a } = lanes(2);
  t.after(() => a.close());
  (await a.admit(ask({ priority: 'interactive', tenant: 'chat' }))).done();
  const b1 = await a.admit(ask({ priority: 'batch', tenant: 'flood' }));
  const b2 = a.admit(ask({ priority: 'batch', tenant: 'flood' }));
  assert.equal(await settled(b2), 'pending', 'one lane of two, held by the request routing has not placed yet');
  b1.done();
  assert.equal((await b2).queued, true, 'the lane comes back when it ends');
});

void test('admission: the replicas are kept free only while a higher class is active, and never all of them', async (t) => {
  const idle = lanes(2);
  t.after(() => idle.a.close());
  (await idle.a.admit(ask({ priority: 'batch', tenant: 'flood' }))).watch(idle.ticket, 'r0');
  assert.deepEqual(idle.ids(await idle.a.admit(ask({ priority: 'batch', tenant: 'flood' }))), ['r0', 'r1'], 'no interactive request yet: batch uses both');

  const quiet = lanes(2);
  t.after(() => quiet.a.close());
  (await quiet.a.admit(ask({ priority: 'interactive', tenant: 'chat' }))).done();
  quiet.clock.ms = admissionDefaults.activeWindowMs + 1;
  (await quiet.a.admit(ask({ priority: 'batch', tenant: 'flood' }))).watch(quiet.ticket, 'r0');
  assert.deepEqual(quiet.ids(await quiet.a.admit(ask({ priority: 'batch', tenant: 'flood' }))), ['r0', 'r1'], 'the interactive tenant went quiet longer than active_window_ms ago');

  const one = lanes(1);
  t.after(() => one.a.close());
  (await one.a.admit(ask({ priority: 'interactive', tenant: 'chat' }))).done();
  (await one.a.admit(ask({ priority: 'batch', tenant: 'flood' }))).watch(one.ticket, 'r0');
  assert.equal((await one.a.admit(ask({ priority: 'batch', tenant: 'flood' }))).queued, false, 'one replica: batch keeps it');

  const off = lanes(2, { reservedReplicas: 0 });
  t.after(() => off.a.close());
  (await off.a.admit(ask({ priority: 'interactive', tenant: 'chat' }))).done();
  (await off.a.admit(ask({ priority: 'batch', tenant: 'flood' }))).watch(off.ticket, 'r0');
  assert.deepEqual(off.ids(await off.a.admit(ask({ priority: 'batch', tenant: 'flood' }))), ['r0', 'r1'], 'reserved_replicas 0: nothing kept');
});

void test('admission: standard counts as a lower class while interactive is active, and as the top one when it is not', async (t) => {
  const { a, clock, ticket } = lanes(2);
  t.after(() => a.close());
  (await a.admit(ask({ priority: 'interactive', tenant: 'chat' }))).done();
  (await a.admit(ask({ priority: 'batch', tenant: 'flood' }))).watch(ticket, 'r0');
  const etl = await a.admit(ask({ priority: 'standard', tenant: 'etl' }));
  assert.deepEqual(etl.among([{ id: 'r0' }, { id: 'r1' }]).map((r) => r.id), ['r0'], 'batch and standard share the lanes');
  etl.done();
  clock.ms = admissionDefaults.activeWindowMs + 1;
  const later = await a.admit(ask({ priority: 'standard', tenant: 'etl' }));
  assert.deepEqual(later.among([{ id: 'r0' }, { id: 'r1' }]).map((r) => r.id), ['r0', 'r1'], 'the highest active class is standard now');
});

void test('admission: a permit whose replicas are all barred by the time it is routed leaves routing every replica', async (t) => {
  const { a, ticket } = lanes(2);
  t.after(() => a.close());
  (await a.admit(ask({ priority: 'interactive', tenant: 'chat' }))).done();
  (await a.admit(ask({ priority: 'batch', tenant: 'flood' }))).watch(ticket, 'r0');
  const b = await a.admit(ask({ priority: 'batch', tenant: 'flood' }));
  assert.deepEqual(b.among([{ id: 'r1' }]).map((r) => r.id), ['r1'], 'r0 is gone from the directory: r1 rather than nothing');
});

void test('admission: slots learned from a full engine bound the classes below the highest as stated ones do', async (t) => {
  const r = { id: 'r0', waiting: 0, engineWaiting: 0, queuedPrefillTokens: 0, prefillTokensPerS: 10_000, inFlight: 3, engineSlots: 4 };
  const a = new Admission({ config: { ...config, maxWaitingPerReplica: 8 }, facts: { replicas: () => [r] } });
  t.after(() => a.close());
  const etl = a.admit(ask({ tenant: 'etl' }));
  assert.equal(await settled(etl), 'pending', 'nothing stated, but the engine showed 4 slots: standard holds 4 - 1 = 3');
  const chat = await a.admit(ask({ priority: 'interactive', tenant: 'chat' }));
  assert.equal(chat.queued, false, 'the highest class is still bound by waiting places only');
  chat.done();
  r.inFlight = 2;
  assert.equal((await etl).queued, true);
  const stated = new Admission({ config: { ...config, maxWaitingPerReplica: 8, slotsPerReplica: 8 }, facts: { replicas: () => [r] } });
  t.after(() => stated.close());
  r.inFlight = 3;
  assert.equal((await stated.admit(ask({ tenant: 'etl' }))).queued, false, "the operator's slots_per_replica wins over what was learned");
});


void test('admission: a tenant flooding its class is placed as the class below while a polite tenant of the class is active', async (t) => {
  // Batch has one waiting place per replica, standard four.
  const { a, ids, ticket, replicas } = lanes(2, { maxWaitingPerReplica: 8, reservedPerClass: 4 });
  t.after(() => a.close());
  (await a.admit(ask({ tenant: 'polite' }))).done();
  for (const r of replicas) r.waiting = 4;
  // Capacity 2 x 4 standard places, two tenants active: a share of 4; the flood holds 6.
  const floods = [0, 1, 2, 3, 4, 5].map(() => a.admit(ask({ tenant: 'flood' })));
  // What still waits when the test ends is refused by close().
  for (const f of floods) f.catch(() => undefined);
  const [b1, b2, b3] = floods;
  if (b1 === undefined || b2 === undefined || b3 === undefined) throw new Error('six asks');
  for (const r of replicas) r.waiting = 0;
  const first = await b1;
  assert.equal(await settled(b2), 'pending', 'placed as batch: one lane of two, held by the request routing has not placed yet');
  first.watch(ticket, 'r0');
  assert.deepEqual(ids(await b2), ['r0'], "r1 is kept free of the flood's prefill for the polite tenant");
  assert.equal(await settled(b3), 'pending', "as batch it has one waiting place on r0, and b2 holds it; r1 is kept free");
  const polite = await a.admit(ask({ tenant: 'polite' }));
  assert.equal(polite.queued, true, 'it queues behind the flood, and is dispatched first');
  assert.deepEqual(ids(polite), ['r1'], 'placed at its own class, on the replica the flood runs nothing on');
  assert.equal(await settled(b3), 'pending', "the flood's next request still waits");
});

void test('admission: a flood is placed at its class with no polite tenant active, and beside another flood', async (t) => {
  for (const others of [[], Array<string>(6).fill('other')]) {
    const { a, ids, ticket, replicas } = lanes(2);
    t.after(() => a.close());
    for (const r of replicas) r.waiting = 4;
    const asks = [...Array<string>(6).fill('flood'), ...others].map((tenant) => a.admit(ask({ tenant })));
    for (const f of asks) f.catch(() => undefined);
    for (const r of replicas) r.waiting = 0;
    const [head] = asks;
    if (head === undefined) throw new Error('six asks');
    const first = await head;
    first.watch(ticket, 'r0');
    const next = await Promise.race(asks.slice(1));
    assert.deepEqual(ids(next), ['r0', 'r1'], others.length === 0 ? 'nobody else active: the flood uses every replica' : 'two tenants over their share: neither is polite, both keep their class');
  }
});

// Two replicas of `slots` slots, a polite tenant active, and `n` flood requests let in at its own
// class and answering on r0: what a flood holds before it is over its share (slots x 2 / 2 tenants).
async function overShare(t: import('node:test').TestContext, n: number, o: Partial<AdmissionConfig> = {}) {
  const l = lanes(2, o);
  t.after(() => l.a.close());
  (await l.a.admit(ask({ tenant: 'polite' }))).done();
  for (let k = 0; k < n; k++) {
    const p = await l.a.admit(ask({ tenant: 'flood' }));
    assert.equal(p.among(l.replicas).length, 2, `flood request ${k + 1} is within its share: placed at its class`);
    p.watch(l.ticket, 'r0').firstByte();
  }
  return l;
}

void test('admission: with reserved_replicas_exclusive a request placed lower keeps off the reserved replica from its dispatch to its end, not only until its first byte', async (t) => {
  for (const exclusive of [true, false]) {
    const { a, ids, ticket } = await overShare(t, 2, { slotsPerReplica: 1, reservedReplicasExclusive: exclusive });
    const first = await a.admit(ask({ tenant: 'flood' }));
    const watched = first.watch({ ...ticket }, 'r0');
    watched.firstByte();
    const decoding = await a.admit(ask({ tenant: 'flood' }));
    if (exclusive) assert.deepEqual(ids(decoding), ['r0'], 'it decodes on r0: r0 is the lane, r1 runs no step of the flood at all');
    else assert.deepEqual(ids(decoding), ['r0', 'r1'], 'without it: a first byte ends the prefill, and the lane with it');
    decoding.done();
    watched.done();
  }
});

void test('admission: a request placed lower whose permit ends without its ticket ending gives its lane back too', async (t) => {
  const { a, ids, ticket } = await overShare(t, 2, { slotsPerReplica: 1 });
  const first = await a.admit(ask({ tenant: 'flood' }));
  first.watch({ ...ticket }, 'r0').firstByte();
  const second = await a.admit(ask({ tenant: 'flood' }));
  assert.deepEqual(ids(second), ['r0'], 'held');
  second.done();
  first.done();
  assert.deepEqual(ids(await a.admit(ask({ tenant: 'flood' }))), ['r0', 'r1'], 'over: r0 is no lane any more');
});

void test('admission: kept off the reserved replica, a tenant placed lower fills every slot of its lane; a lower class, or the same tenant with nobody polite, leaves its slots', async (t) => {
  for (const o of [
    { why: 'exclusive, a polite tenant active: the slots kept on r0 for it would stand idle', exclusive: true, polite: true, want: 'done' },
    { why: 'not exclusive: placed as batch, it leaves 2 of 4 slots', exclusive: false, polite: true, want: 'pending' },
    { why: 'nobody polite: at its class, it leaves 1 of 4', exclusive: true, polite: false, want: 'pending' },
  ] as const) {
    const { a, replicas, ticket } = lanes(2, { slotsPerReplica: 4, reservedSlotsPerClass: 1, reservedReplicasExclusive: o.exclusive });
    t.after(() => a.close());
    if (o.polite) (await a.admit(ask({ tenant: 'polite' }))).done();
    // A share of 4 (8 slots, two tenants): the fifth is over it.
    for (let k = 0; k < 5; k++) (await a.admit(ask({ tenant: 'flood' }))).watch(ticket, 'r0').firstByte();
    const [r0, r1] = replicas;
    if (r0 === undefined || r1 === undefined) throw new Error('two replicas');
    Object.assign(r0, { inFlight: 3 });
    Object.assign(r1, { inFlight: 4 });
    const next = a.admit(ask({ tenant: 'flood' }));
    next.catch(() => undefined);
    assert.equal(await settled(next), o.want, o.why);
  }
  const batch = lanes(2, { slotsPerReplica: 4, reservedSlotsPerClass: 1 });
  t.after(() => batch.a.close());
  (await batch.a.admit(ask({ priority: 'interactive', tenant: 'chat' }))).done();
  Object.assign(batch.replicas[0] ?? {}, { inFlight: 3 });
  Object.assign(batch.replicas[1] ?? {}, { inFlight: 4 });
  const b = batch.a.admit(ask({ priority: 'batch', tenant: 'flood' }));
  b.catch(() => undefined);
  assert.equal(await settled(b), 'pending', 'batch under interactive keeps its 2 of 4: exclusivity is between tenants of a class');
});

void test('admission: the polite tenant is placed where no over-share request runs, and anywhere when every replica runs one', async (t) => {
  const { a, ids, ticket } = await overShare(t, 2, { slotsPerReplica: 1 });
  (await a.admit(ask({ tenant: 'flood' }))).watch({ ...ticket }, 'r0').firstByte();
  assert.deepEqual(ids(await a.admit(ask({ tenant: 'polite' }))), ['r1']);
  const chat = lanes(2);
  t.after(() => chat.a.close());
  (await chat.a.admit(ask({ priority: 'interactive', tenant: 'chat' }))).done();
  (await chat.a.admit(ask({ priority: 'batch', tenant: 'flood' }))).watch(chat.ticket, 'r0').firstByte();
  assert.deepEqual(chat.ids(await chat.a.admit(ask({ priority: 'interactive', tenant: 'chat' }))), ['r0', 'r1'], 'a batch decode does not steer interactive: routing decides');
});

void test('admission: a flood let in straight through is placed a class lower too, once over its share, so it stays on its lane', async (t) => {
  // One slot a replica: a capacity of 2, a share of 1 with two tenants active.
  const { a, ids, ticket } = await overShare(t, 2, { slotsPerReplica: 1 });
  const third = await a.admit(ask({ tenant: 'flood' }));
  assert.equal(third.queued, false, 'straight through: nothing queued, and room');
  third.watch(ticket, 'r0');
  assert.deepEqual(ids(await a.admit(ask({ tenant: 'flood' }))), ['r0'], 'placed as batch: its lane only, r1 kept for the polite tenant');
  assert.deepEqual(ids(await a.admit(ask({ tenant: 'polite' }))), ['r1']);
});

void test("admission: a flood request placed lower and not yet routed does not take the polite tenant's room", async (t) => {
  for (const exclusive of [true, false]) {
    const { a, replicas } = await overShare(t, 2, { slotsPerReplica: 1, reservedReplicasExclusive: exclusive });
    const inTransit = await a.admit(ask({ tenant: 'flood' }));
    // The flood's lane is full; r1 has the one slot.
    Object.assign(replicas[0] ?? {}, { inFlight: 1 });
    const polite = a.admit(ask({ tenant: 'polite' }));
    polite.catch(() => undefined);
    assert.equal(await settled(polite), exclusive ? 'done' : 'pending', exclusive ? 'it is bound for its lane, not r1' : 'without the rule it may take r1: it counts');
    inTransit.done();
  }
});

void test('admission: contended, the highest class starts where no prefill is awaited, its own class\'s included, and anywhere when every replica has one', async (t) => {
  const solo = lanes(2);
  t.after(() => solo.a.close());
  (await solo.a.admit(ask({ priority: 'interactive', tenant: 'chat' }))).watch({ ...solo.ticket }, 'r1');
  assert.deepEqual(solo.ids(await solo.a.admit(ask({ priority: 'interactive', tenant: 'chat' }))), ['r0', 'r1'], 'no lower class active: routing decides');
  const { a, ids, ticket } = lanes(2);
  t.after(() => a.close());
  (await a.admit(ask({ priority: 'interactive', tenant: 'chat' }))).done();
  (await a.admit(ask({ priority: 'batch', tenant: 'flood' }))).watch({ ...ticket }, 'r0').firstByte();
  const first = (await a.admit(ask({ priority: 'interactive', tenant: 'chat' }))).watch({ ...ticket }, 'r1');
  const second = await a.admit(ask({ priority: 'interactive', tenant: 'chat' }));
  assert.deepEqual(ids(second), ['r0'], 'r1 prefills the first chat prompt; r0 only decodes batch');
  const onR0 = second.watch({ ...ticket }, 'r0');
  assert.deepEqual(ids(await a.admit(ask({ priority: 'interactive', tenant: 'chat' }))), ['r0', 'r1'], 'both prefill: routing decides');
  first.firstByte();
  onR0.firstByte();
  assert.deepEqual(ids(await a.admit(ask({ priority: 'interactive', tenant: 'chat' }))), ['r0', 'r1'], 'the first bytes ended both prefills');
});
