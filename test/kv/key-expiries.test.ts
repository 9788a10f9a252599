import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { forEachKey, hiOf, KeyExpiries, loOf } from '../../src/kv/index.js';

void test('key expiries: the same answers as a Map through inserts, updates and deletes that move chains (backward shift)', () => {
  const t = new KeyExpiries(16);
  const oracle = new Map<bigint, number>();
  let x = 0x9e3779b97f4a7c15n;
  const keys: bigint[] = [];
  for (let i = 0; i < 20_000; i++) {
    x = (x * 6364136223846793005n + 1442695040888963407n) & 0xffff_ffff_ffff_ffffn;
    // A small key space and sequential-looking low words make collisions and long chains.
    const k = i % 3 === 0 ? BigInt(i % 500) : x % 4000n;
    keys.push(k);
    if (i % 4 === 3) {
      assert.equal(t.delete(hiOf(k), loOf(k)), oracle.delete(k), `delete ${k}`);
    } else {
      t.set(hiOf(k), loOf(k), i);
      oracle.set(k, i);
    }
  }
  assert.equal(t.size, oracle.size);
  for (const k of keys) assert.equal(t.get(hiOf(k), loOf(k)), oracle.get(k), `get ${k}`);
  t.clear();
  assert.equal(t.size, 0);
  assert.equal(t.get(hiOf(keys[0] ?? 0n), loOf(keys[0] ?? 0n)), undefined);
});

void test('key expiries: key 0 is a key like any other, and a later time replaces an earlier one', () => {
  const t = new KeyExpiries();
  t.set(0, 0, 5);
  t.set(0, 0, 9);
  assert.equal(t.get(0, 0), 9);
  assert.equal(t.size, 1);
  assert.equal(t.delete(0, 0), true);
  assert.equal(t.delete(0, 0), false);
});

void test('forEachKey: a BigUint64Array and a list of BigInts give the same words in the same order', () => {
  const keys = [0n, 1n, 0xffff_ffff_0000_0001n, 0x1234_5678_9abc_def0n];
  const fromList: [number, number, number][] = [];
  const fromArray: [number, number, number][] = [];
  forEachKey(keys, (hi, lo, i) => fromList.push([hi, lo, i]));
  forEachKey(BigUint64Array.from(keys), (hi, lo, i) => fromArray.push([hi, lo, i]));
  assert.deepEqual(fromArray, fromList);
  assert.deepEqual(fromList[2], [0xffff_ffff, 1, 2]);
});
