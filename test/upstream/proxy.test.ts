// Passing an engine's SSE answer through: the client gets every event as it was, and the events are
// kept for the pool to read the answer from only when asked and only up to the bound.
import { strict as assert } from 'node:assert';
import type { ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import { pipeEvents, type UpstreamResponse } from '../../src/upstream/proxy.js';

const events = Array.from({ length: 20 }, (_, i) => `data: {"choices":[{"index":0,"delta":{"content":"w${i} "}}]}\n\n`).concat(['data: [DONE]\n\n']);

async function piped(keepAnswerChars: number): Promise<{ answer: string | undefined; sent: string }> {
  let sent = '';
  const res = { destroyed: false, write: (c: string | Buffer) => ((sent += c.toString()), true), on: () => res, off: () => res };
  // Chunks cut across event boundaries, as a socket delivers them.
  const whole = events.join('');
  const chunks = [whole.slice(0, 50), whole.slice(50, 333), whole.slice(333)];
  const up = { status: 200, contentType: 'text/event-stream', body: Readable.from(chunks) } as unknown as UpstreamResponse;
  const out = await pipeEvents(up, res as unknown as ServerResponse, { replica: 'r0', maxEventChars: 1 << 20, hideUsage: false, onFirstByte: () => undefined, keepAnswerChars });
  return { answer: out.answer, sent };
}

void test('pipeEvents: the answer is kept as the events passed on, when asked and within the bound', async () => {
  const within = await piped(1 << 20);
  assert.equal(within.sent, events.join(''));
  assert.equal(within.answer, events.join(''));
});

void test('pipeEvents: past the bound, or not asked, nothing is kept and the client still gets every event', async () => {
  for (const bound of [100, 0]) {
    const r = await piped(bound);
    assert.equal(r.answer, undefined, `bound ${bound}`);
    assert.equal(r.sent, events.join(''));
  }
});

void test("pipeEvents: an engine's error event mid-stream is held back and reported as the stream's failure", async () => {
  let sent = '';
  const res = { destroyed: false, write: (c: string | Buffer) => ((sent += c.toString()), true), on: () => res, off: () => res };
  const error = 'data: {"error": {"object": "error", "message": "CUDA error", "type": "InternalServerError", "param": null, "code": 500}}\n\n';
  const up = { status: 200, contentType: 'text/event-stream', body: Readable.from([events[0] ?? '', error, 'data: [DONE]\n\n']) } as unknown as UpstreamResponse;
  const out = await pipeEvents(up, res as unknown as ServerResponse, { replica: 'r0', maxEventChars: 1 << 20, hideUsage: false, onFirstByte: () => undefined });
  assert.equal(sent, events[0]);
  assert.equal(out.errorEvent, error);
  assert.match(out.failed?.message ?? '', /error event mid-stream/);
});
