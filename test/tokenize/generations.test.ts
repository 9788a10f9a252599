import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { Generations } from '../../src/tokenize/generations.js';

// Every entry costs 10 bytes: a bound of 40 is two generations of two.
const cache = (): Generations<number> => new Generations<number>({ maxBytes: 40, costOf: () => 10 });

void test('generations: the bytes held never pass the bound, however many entries come', () => {
  const c = new Generations<string>({ maxBytes: 1000, costOf: (k, v) => k.length + v.length });
  for (let i = 0; i < 10_000; i++) {
    c.set(`key ${i}`, 'v'.repeat(i % 37));
    assert.ok(c.bytes <= 1000, `${c.bytes} bytes after ${i + 1} entries`);
  }
});

void test('generations: an entry used since the last turn-over survives the next one; one unused for two is gone', () => {
  const c = cache();
  c.set('a', 1);
  c.set('b', 2);
  c.set('c', 3); // turns over: a and b are old
  assert.equal(c.get('a'), 1, 'used again: copied into the young generation');
  c.set('d', 4); // turns over: c and a are old, b is dropped
  assert.equal(c.get('b'), undefined, 'b was not used for two turn-overs');
  assert.equal(c.get('a'), 1);
  assert.equal(c.get('c'), 3);
});

void test('generations: a value replaced in place keeps one entry and its new cost', () => {
  const c = new Generations<string>({ maxBytes: 100, costOf: (_, v) => v.length });
  c.set('k', 'xxxx');
  c.set('k', 'yy');
  assert.equal(c.get('k'), 'yy');
  assert.equal(c.bytes, 2);
  assert.equal(c.entries, 1);
});

void test('generations: an entry costing more than half the bound is not kept, and set says so', () => {
  const c = new Generations<string>({ maxBytes: 100, costOf: (_, v) => v.length });
  assert.equal(c.set('big', 'x'.repeat(51)), false);
  assert.equal(c.get('big'), undefined);
  assert.equal(c.set('fits', 'x'.repeat(50)), true);
  assert.equal(c.get('fits')?.length, 50);
});
