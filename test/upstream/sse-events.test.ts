// Cutting SSE into events: every way a socket can split a stream gives the same events, and an
// event that never ends is refused at the bound rather than searched again on every read.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { EventSplitter, EventTooLargeError } from '../../src/upstream/sse-events.js';

const events = ['data: {"a":1}\n\n', 'data: {"b":2}\r\n\r\n', ': comment\n\n', 'event: x\ndata: y\n\n', 'data: [DONE]\n\n'];
const stream = events.join('');

void test('EventSplitter: the same events whatever the split, one cut or two anywhere', () => {
  for (let i = 0; i <= stream.length; i++) {
    for (let j = i; j <= stream.length; j++) {
      const s = new EventSplitter(1024);
      const got = [...s.push(stream.slice(0, i)), ...s.push(stream.slice(i, j)), ...s.push(stream.slice(j))];
      assert.deepEqual(got, events, `cut at ${i} and ${j}`);
      assert.equal(s.rest(), '');
    }
  }
});

void test('EventSplitter: a character at a time', () => {
  const s = new EventSplitter(1024);
  const got = [...stream].flatMap((c) => s.push(c));
  assert.deepEqual(got, events);
});

void test('EventSplitter: an unfinished event is what rest() gives back', () => {
  const s = new EventSplitter(1024);
  assert.deepEqual(s.push('data: 1\n\ndata: 2'), ['data: 1\n\n']);
  assert.deepEqual(s.push('\n'), []);
  assert.equal(s.rest(), 'data: 2\n');
});

void test('EventSplitter: an event over the bound throws, whether it ends or not', () => {
  const bound = 100;
  const endless = new EventSplitter(bound);
  assert.throws(() => {
    for (let i = 0; i < 1000; i++) endless.push('x'.repeat(7));
  }, EventTooLargeError);
  const ended = new EventSplitter(bound);
  assert.throws(() => ended.push(`data: ${'x'.repeat(bound)}\n\n`), { code: 'LLMGW_UPSTREAM_EVENT_TOO_LARGE', message: /max_event_bytes/ });
  // Exactly at the bound is accepted.
  const exact = `data: ${'x'.repeat(bound - 8)}\n\n`;
  assert.deepEqual(new EventSplitter(bound).push(exact), [exact]);
});
