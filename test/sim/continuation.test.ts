// The sim continues its own text: a continued answer picks up where the text it is given leaves
// off, so a test can tell a spliced stream from one with a gap or a repeat at the seam.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { continuationOffset } from '../../src/sim/continuation.js';
import { startSim } from '../../src/sim/index.js';
import type { SimHandle } from '../../src/sim/index.js';

const words = [' the', ' quick', ' brown', ' fox'];
const bytes = [...' ab'];

const rules = [
  { why: 'text unrelated to the cycle starts it over', text: 'hello', pieces: words, want: 0 },
  { why: 'the whole first token resumes after it', text: 'x the', pieces: words, want: 1 },
  { why: 'several tokens resume after the last', text: 'prompt the quick brown', pieces: words, want: 3 },
  { why: 'a tail past the end of the cycle wraps around', text: ' the quick brown fox the quick', pieces: words, want: 6 },
  { why: 'half a token is no boundary: the cycle starts over', text: ' the qui', pieces: words, want: 0 },
  { why: 'a tail that matches mid-cycle only is not a continuation', text: ' quick brown', pieces: words, want: 0 },
  { why: 'one byte per token: every character is a boundary', text: 'zz ab a', pieces: bytes, want: 5 },
  { why: 'the longest tail wins over a shorter one', text: ' ab ab', pieces: bytes, want: 6 },
  { why: 'empty text continues nothing', text: '', pieces: words, want: 0 },
];
for (const r of rules) void test(`continuationOffset: ${r.why}`, () => assert.equal(continuationOffset(r.text, r.pieces), r.want));

async function sim(t: { after(fn: () => Promise<void>): void }): Promise<SimHandle> {
  const s = await startSim({ model: 'sim-model', port: 0, tokenizer: 'bytes', decodeTokensPerS: 5000, prefillTokensPerS: 1e6, hashSeed: '0' });
  t.after(() => s.close());
  await s.ready;
  return s;
}

async function post(s: SimHandle, path: string, body: unknown): Promise<Record<string, unknown>> {
  const r = await fetch(s.url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.timeout(10_000) });
  assert.equal(r.status, 200);
  return (await r.json()) as Record<string, unknown>;
}

void test('sim: a chat continuing its final assistant message resumes the answer where the message ends', async (t) => {
  const s = await sim(t);
  const user = { role: 'user', content: 'tell me' };
  const whole = (await post(s, '/v1/chat/completions', { messages: [user], max_tokens: 30 })) as { choices: { message: { content: string } }[] };
  const full = whole.choices[0]?.message.content ?? '';
  const cut = 11;
  const rest = (await post(s, '/v1/chat/completions', {
    messages: [user, { role: 'assistant', content: full.slice(0, cut) }],
    continue_final_message: true,
    add_generation_prompt: false,
    max_tokens: 30 - cut,
  })) as { choices: { message: { content: string } }[]; usage: { prompt_tokens: number } };
  assert.equal(full.slice(0, cut) + (rest.choices[0]?.message.content ?? ''), full);
});

void test('sim: a completion whose prompt ends with the start of the answer continues it', async (t) => {
  const s = await sim(t);
  const whole = (await post(s, '/v1/completions', { prompt: 'once', max_tokens: 25 })) as { choices: { text: string }[] };
  const full = whole.choices[0]?.text ?? '';
  const rest = (await post(s, '/v1/completions', { prompt: `once${full.slice(0, 9)}`, max_tokens: 16 })) as { choices: { text: string }[] };
  assert.equal(full.slice(0, 9) + (rest.choices[0]?.text ?? ''), full);
});
