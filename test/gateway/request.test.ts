// A request body on the event loop: a chat's next turn parses only what it added, and what goes
// upstream is the client's own bytes with the gateway's fields added, never parsed and written again.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { ChatBodyParser } from '../../src/limits/index.js';
import { forwardedBody } from '../../src/gateway/index.js';
import { defaultRequestPolicy, parseGenerationRequest } from '../../src/limits/index.js';

const turns = (n: number): { role: string; content: string }[] =>
  Array.from({ length: n }, (_, i) => ({ role: i % 2 === 0 ? 'user' : 'assistant', content: `turn ${i}: ${'words of a long conversation '.repeat(200)}` }));

void test('parseGenerationRequest with kept bodies: the next turn is parsed from what it added, equal to a whole parse', () => {
  const bodies = new ChatBodyParser({ limits: { maxDepth: 64, maxBytes: 16 * 1024 * 1024 } });
  const first = Buffer.from(JSON.stringify({ model: 'm', messages: turns(5), stream: true }));
  const next = Buffer.from(JSON.stringify({ model: 'm', messages: turns(7), stream: true }));
  parseGenerationRequest('chat', first, defaultRequestPolicy, bodies);
  const incremental = parseGenerationRequest('chat', next, defaultRequestPolicy, bodies);
  assert.equal(bodies.last.how, 'extended');
  assert.deepEqual(incremental, parseGenerationRequest('chat', next, defaultRequestPolicy));
});

void test('parseGenerationRequest with kept bodies: a bad next turn is still a 400 naming the field', () => {
  const bodies = new ChatBodyParser({ limits: { maxDepth: 64, maxBytes: 16 * 1024 * 1024 } });
  parseGenerationRequest('chat', Buffer.from(JSON.stringify({ model: 'm', messages: turns(5) })), defaultRequestPolicy, bodies);
  const bad = Buffer.from(JSON.stringify({ model: 'm', messages: [...turns(5), { role: 7, content: 'x' }] }));
  assert.throws(() => parseGenerationRequest('chat', bad, defaultRequestPolicy, bodies), /messages\[5\]\.role/);
});

const rows: readonly { why: string; raw: string; fields: Record<string, unknown>; want: unknown; sameBytes?: boolean }[] = [
  { why: 'nothing to add: the client bytes go as they are', raw: '{"model":"m","seed":12345678901234567890}', fields: {}, want: '{"model":"m","seed":12345678901234567890}', sameBytes: true },
  {
    why: 'a field the client did not send is written before the closing brace, its other bytes untouched',
    raw: '{"model":"m","seed":12345678901234567890 }\n',
    fields: { stream_options: { include_usage: true } },
    want: '{"model":"m","seed":12345678901234567890 ,"stream_options":{"include_usage":true}}',
  },
  { why: 'a field the client sent is replaced, by writing the body anew', raw: '{"model":"m","max_tokens":900}', fields: { max_tokens: 10 }, want: '{"model":"m","max_tokens":10}' },
];
for (const r of rows) {
  void test(`forwardedBody: ${r.why}`, () => {
    const raw = Buffer.from(r.raw);
    const out = forwardedBody(raw, JSON.parse(r.raw) as Record<string, unknown>, r.fields);
    assert.equal(out.toString(), r.want);
    if (r.sameBytes === true) assert.equal(out, raw);
    assert.deepEqual(JSON.parse(out.toString()), { ...(JSON.parse(r.raw) as object), ...r.fields });
  });
}
