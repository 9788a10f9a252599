// The admission queue's rules, each a row named for the reason it exists: classes in order, no
// starvation, fairness between tenants by tokens and weight, bounds that displace the flood first.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { FairQueue } from '../../src/admission/index.js';
import type { PriorityClass, QueueEntry, QueueLimits } from '../../src/admission/index.js';

const limits: QueueLimits = { maxRequests: 1000, maxBytes: 1 << 30, starvationMs: 1000, starvationEvery: 10 };

function entry(tenant: string, priority: PriorityClass, o: { costTokens?: number; weight?: number; at?: number; bytes?: number; tag?: string } = {}): QueueEntry<string> {
  return { tenant, weight: o.weight ?? 1, priority, costTokens: o.costTokens ?? 100, sizeBytes: o.bytes ?? 100, enqueuedAtMs: o.at ?? 0, value: o.tag ?? tenant };
}

function drainAll(q: FairQueue<string>, now = 0): string[] {
  const out: string[] = [];
  for (let e = q.next(now); e !== undefined; e = q.next(now)) out.push(e.value);
  return out;
}

void test('queue: higher classes are dispatched first, first come first served within one tenant', () => {
  const q = new FairQueue<string>(limits);
  q.offer(entry('a', 'batch', { tag: 'b1' }));
  q.offer(entry('a', 'standard', { tag: 's1' }));
  q.offer(entry('a', 'interactive', { tag: 'i1' }));
  q.offer(entry('a', 'batch', { tag: 'b2' }));
  q.offer(entry('a', 'interactive', { tag: 'i2' }));
  assert.deepEqual(drainAll(q), ['i1', 'i2', 's1', 'b1', 'b2']);
});

void test('queue: a lower class is never starved: past starvation_ms it takes one dispatch in starvation_every', () => {
  const q = new FairQueue<string>({ ...limits, starvationEvery: 4 });
  q.offer(entry('batchy', 'batch', { at: 0, tag: 'old-batch' }));
  for (let i = 0; i < 20; i++) q.offer(entry('chat', 'interactive', { at: 5000, tag: `i${i}` }));
  const order = drainAll(q, 6000);
  assert.equal(order.indexOf('old-batch'), 3, 'the fourth dispatch goes to the request waiting past starvation_ms');
});

void test('queue: a fresh lower-class request waits for the higher classes (the starvation rule needs its wait)', () => {
  const q = new FairQueue<string>({ ...limits, starvationEvery: 2 });
  q.offer(entry('batchy', 'batch', { at: 5900, tag: 'new-batch' }));
  for (let i = 0; i < 4; i++) q.offer(entry('chat', 'interactive', { at: 5900, tag: `i${i}` }));
  assert.deepEqual(drainAll(q, 6000), ['i0', 'i1', 'i2', 'i3', 'new-batch']);
});

function tokenShares(q: FairQueue<string>, n: number): Map<string, number> {
  const served = new Map<string, number>();
  for (let i = 0; i < n; i++) {
    const e = q.next(0);
    if (e === undefined) break;
    served.set(e.tenant, (served.get(e.tenant) ?? 0) + e.costTokens);
  }
  return served;
}

void test('queue: tenants share by tokens, not requests: 100k-token prompts get a hundredth of the dispatches of 1k ones', () => {
  const q = new FairQueue<string>(limits);
  for (let i = 0; i < 200; i++) q.offer(entry('big', 'standard', { costTokens: 100_000 }));
  for (let i = 0; i < 800; i++) q.offer(entry('small', 'standard', { costTokens: 1_000 }));
  const served = tokenShares(q, 404);
  const big = served.get('big') ?? 0;
  const small = served.get('small') ?? 0;
  assert.ok(Math.abs(big - small) <= 100_000, `tokens served big=${big} small=${small}`);
});

void test('queue: weights share the tokens in their ratio', () => {
  const q = new FairQueue<string>(limits);
  for (let i = 0; i < 500; i++) q.offer(entry('gold', 'standard', { weight: 3 }));
  for (let i = 0; i < 500; i++) q.offer(entry('plain', 'standard', { weight: 1 }));
  const served = tokenShares(q, 400);
  assert.equal(served.get('gold'), 30_000);
  assert.equal(served.get('plain'), 10_000);
});

void test('queue: a tenant idle for a while banks no credit to flood with later', () => {
  const q = new FairQueue<string>(limits);
  for (let i = 0; i < 100; i++) q.charge({ tenant: 'busy', priority: 'standard', weight: 1, costTokens: 100 });
  for (let i = 0; i < 10; i++) q.offer(entry('busy', 'standard'));
  for (let i = 0; i < 10; i++) q.offer(entry('late', 'standard'));
  const first10 = drainAll(q).slice(0, 10);
  const late = first10.filter((t) => t === 'late').length;
  assert.ok(late >= 4 && late <= 6, `the newcomer alternates with the busy tenant (${first10.join(',')})`);
});

void test('queue: full, a higher class displaces the newest entry of the lowest class\'s heaviest tenant', () => {
  const q = new FairQueue<string>({ ...limits, maxRequests: 3 });
  q.offer(entry('flood', 'batch', { tag: 'f1' }));
  q.offer(entry('flood', 'batch', { tag: 'f2' }));
  q.offer(entry('other', 'batch', { tag: 'o1' }));
  const r = q.offer(entry('chat', 'interactive', { tag: 'i1' }));
  assert.ok(r.queued);
  assert.equal(r.displaced?.value, 'f2');
  assert.equal(q.size, 3);
  assert.deepEqual(drainAll(q), ['i1', 'f1', 'o1']);
});

void test('queue: full, the flooding tenant is refused as over its share; a tenant under its share displaces it', () => {
  const q = new FairQueue<string>({ ...limits, maxRequests: 4 });
  for (let i = 0; i < 4; i++) q.offer(entry('flood', 'standard', { tag: `f${i}` }));
  const again = q.offer(entry('flood', 'standard'));
  assert.deepEqual(again, { queued: false, reason: 'queue-full' }, 'alone in its class it holds all of its share: the queue is simply full');
  const fair = q.offer(entry('quiet', 'standard', { tag: 'q0' }));
  assert.ok(fair.queued && fair.displaced?.value === 'f3');
  const more = q.offer(entry('flood', 'standard'));
  assert.deepEqual(more, { queued: false, reason: 'tenant-over-share' });
});

void test('queue: the byte bound holds too, and one big body never evicts a crowd', () => {
  const q = new FairQueue<string>({ ...limits, maxBytes: 1000 });
  for (let i = 0; i < 10; i++) assert.ok(q.offer(entry('a', 'batch', { bytes: 100 })).queued);
  assert.deepEqual(q.offer(entry('b', 'interactive', { bytes: 500 })), { queued: false, reason: 'queue-full' });
  assert.ok(q.offer(entry('b', 'interactive', { bytes: 100 })).queued);
  assert.equal(q.bytes, 1000);
});

void test('queue: a removed entry (its client left) is gone and its counts with it', () => {
  const q = new FairQueue<string>(limits);
  const a = entry('a', 'standard', { tag: 'a' });
  q.offer(a);
  q.offer(entry('a', 'standard', { tag: 'b' }));
  assert.equal(q.remove(a), true);
  assert.equal(q.remove(a), false);
  assert.equal(q.size, 1);
  assert.deepEqual(drainAll(q), ['b']);
  assert.equal(q.bytes, 0);
});

void test('queue: tokens ahead count higher classes whole and the same class by fair share', () => {
  const q = new FairQueue<string>(limits);
  for (let i = 0; i < 5; i++) q.offer(entry('chat', 'interactive', { costTokens: 100 }));
  for (let i = 0; i < 10; i++) q.offer(entry('flood', 'batch', { costTokens: 1000 }));
  assert.equal(q.tokensAhead({ tenant: 'small', priority: 'batch', weight: 1, costTokens: 1000 }), 500 + 1000);
  assert.equal(q.tokensAhead({ tenant: 'chat', priority: 'interactive', weight: 1, costTokens: 100 }), 500);
});

void test('queue: a tenant whose head has no room does not hold the next fairest of its class; a higher class with no room holds every lower one', () => {
  const q = new FairQueue<string>(limits);
  q.offer(entry('flood', 'standard', { tag: 'f1' }));
  q.offer(entry('polite', 'standard', { tag: 'p1' }));
  q.offer(entry('other', 'batch', { tag: 'b1' }));
  const noFlood = (_p: PriorityClass, e: QueueEntry<string>): boolean => e.tenant !== 'flood';
  assert.equal(q.next(0, noFlood)?.value, 'p1', 'the flood is fairest (queued first) but its lanes are full: the polite tenant goes');
  assert.equal(q.next(0, noFlood), undefined, 'the flood, alone in its class with no room, holds batch behind it');
  assert.deepEqual(drainAll(q), ['f1', 'b1']);
});
