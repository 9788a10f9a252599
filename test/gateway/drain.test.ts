// The drain's rules without a server: work counted until its connection is done, new work taken for
// the grace and refused after it, idle reported when the last answer ends.
import { strict as assert } from 'node:assert';
import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import { test } from 'node:test';
import { Drain } from '../../src/gateway/drain.js';

const answer = (): ServerResponse & EventEmitter => new EventEmitter() as ServerResponse & EventEmitter;

void test('drain: new work is taken during the grace and refused after it; nothing is refused before a drain', () => {
  let now = 1_000;
  const d = new Drain({ graceMs: 500, now: () => now });
  now += 10_000;
  assert.equal(d.draining, false);
  assert.equal(d.refuses(), false, 'not draining: every request is taken');
  d.begin();
  assert.equal(d.draining, true);
  now += 499;
  assert.equal(d.refuses(), false, 'within the grace: served');
  now += 1;
  assert.equal(d.refuses(), true, 'the grace is over: refused');
  d.begin();
  assert.equal(d.refuses(), true, 'a second begin keeps the first start');
});

void test('drain: idle once every answer in flight has closed, and at once when none is', async () => {
  const d = new Drain({ graceMs: 0 });
  await d.whenIdle();
  const [a, b] = [answer(), answer()];
  d.track(a);
  d.track(b);
  assert.equal(d.inFlight, 2);
  d.begin();
  let idle = false;
  const waiting = d.whenIdle().then(() => (idle = true));
  a.emit('close');
  await Promise.resolve();
  assert.equal(idle, false, 'one answer still running');
  assert.equal(d.inFlight, 1);
  b.emit('close');
  await waiting;
  assert.equal(d.inFlight, 0);
});
