// The in-memory store of Responses: its owner's only, gone after its retention, bounded.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { MemoryResponseStore, type StoredResponse } from '../../src/apis/index.js';

const stored = (id: string, o: Partial<StoredResponse> = {}): StoredResponse => ({ id, owner: 'a', createdAt: 0, expiresAt: 1_000, body: '{}', ...o });

test('response store: another owner gets nothing, and cannot delete it', async () => {
  const s = new MemoryResponseStore({ maxEntries: 10, maxBytes: 1 << 20, now: () => 0 });
  await s.put(stored('r1'));
  assert.equal((await s.get('a', 'r1'))?.id, 'r1');
  assert.equal(await s.get('b', 'r1'), undefined);
  assert.equal(await s.delete('b', 'r1'), false);
  assert.equal(await s.delete('a', 'r1'), true);
  assert.equal(await s.get('a', 'r1'), undefined);
});

test('response store: an expired response is gone', async () => {
  let now = 0;
  const s = new MemoryResponseStore({ maxEntries: 10, maxBytes: 1 << 20, now: () => now });
  await s.put(stored('r1'));
  now = 1_000;
  assert.equal(await s.get('a', 'r1'), undefined);
  assert.equal(s.size, 0);
});

test('response store: over its count or bytes, the oldest go first', async () => {
  const s = new MemoryResponseStore({ maxEntries: 2, maxBytes: 10, now: () => 0 });
  await s.put(stored('r1'));
  await s.put(stored('r2'));
  await s.put(stored('r3'));
  assert.deepEqual([await s.get('a', 'r1'), (await s.get('a', 'r2'))?.id, (await s.get('a', 'r3'))?.id], [undefined, 'r2', 'r3']);
  await s.put(stored('big', { body: '0123456789' }));
  assert.equal(s.size, 1);
  assert.equal((await s.get('a', 'big'))?.id, 'big');
});
