// Bounds on outside input and on waits, one row per rule.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { hasCode } from '../../src/errors/index.js';
import { DeadlineError, jsonDepth, parseBoundedJson, withDeadline } from '../../src/limits/index.js';
import { forceGcEvery } from '../support/gc.js';

const depths = [
  { why: 'a scalar has no depth', json: '7', want: 0 },
  { why: 'the top-level object is depth 1', json: '{}', want: 1 },
  { why: 'arrays and objects both count', json: '{"a":[{"b":[1]}]}', want: 4 },
  { why: 'brackets inside a string do not count', json: '{"a":"[[[[{{{{"}', want: 1 },
  { why: 'an escaped quote does not end the string', json: '{"a":"\\"[[[["}', want: 1 },
  { why: 'an escaped backslash before the closing quote does', json: '["\\\\",[[1]]]', want: 3 },
  { why: 'three backslashes: an escaped backslash, then an escaped quote', json: '["\\\\\\"[",[1]]', want: 2 },
  { why: 'multi-byte text is skipped whole', json: '{"a":"日本語 [ ü","b":[[]]}', want: 3 },
];
for (const d of depths) void test(`jsonDepth: ${d.why}`, () => assert.equal(jsonDepth(Buffer.from(d.json)), d.want));

void test('jsonDepth stops counting as soon as the limit is passed', () => {
  assert.equal(jsonDepth(Buffer.from('['.repeat(1_000_000)), 10), 11);
});

void test('parseBoundedJson: too deep and too big are LLMGW_JSON_LIMIT naming the limit; not JSON is LLMGW_BAD_JSON', () => {
  assert.deepEqual(parseBoundedJson('{"a":[1]}', { maxDepth: 2, maxBytes: 100 }), { a: [1] });
  assert.throws(() => parseBoundedJson('{"a":[[1]]}', { maxDepth: 2, maxBytes: 100 }), (e) => hasCode(e, 'LLMGW_JSON_LIMIT') && /limit of 2 levels/.test(e.message));
  assert.throws(() => parseBoundedJson('[1,2,3]', { maxDepth: 2, maxBytes: 4 }), (e) => hasCode(e, 'LLMGW_JSON_LIMIT') && /limit of 4 bytes/.test(e.message));
  assert.throws(() => parseBoundedJson('{"a":', { maxDepth: 2, maxBytes: 100 }), (e) => hasCode(e, 'LLMGW_BAD_JSON'));
});

void test('withDeadline: the work gets an aborted signal at the deadline, even across forced major GCs', async (t) => {
  t.after(forceGcEvery(2));
  const never = (signal: AbortSignal): Promise<never> =>
    new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true }));
  await assert.rejects(withDeadline(new AbortController().signal, 50, 'a stuck wait', never), (e) => e instanceof DeadlineError && /a stuck wait did not finish within 50 ms/.test(e.message));
});

void test('withDeadline: the caller aborting aborts the work with the caller\'s reason; a finished wait leaves no listener', async () => {
  const ac = new AbortController();
  const never = (signal: AbortSignal): Promise<never> =>
    new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true }));
  const p = withDeadline(ac.signal, 60_000, 'x', never);
  ac.abort(new Error('client left'));
  await assert.rejects(p, /client left/);
  const parent = new AbortController();
  let added = 0;
  let removed = 0;
  const add = parent.signal.addEventListener.bind(parent.signal);
  const remove = parent.signal.removeEventListener.bind(parent.signal);
  parent.signal.addEventListener = (...a: Parameters<AbortSignal['addEventListener']>) => (added++, add(...a));
  parent.signal.removeEventListener = (...a: Parameters<AbortSignal['removeEventListener']>) => (removed++, remove(...a));
  assert.equal(await withDeadline(parent.signal, 60_000, 'y', () => Promise.resolve(5)), 5);
  assert.deepEqual([added, removed], [1, 1]);
});
