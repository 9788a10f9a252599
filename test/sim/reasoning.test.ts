// A thinking answer split into reasoning and content as vLLM's reasoning parsers split it: the
// parser (tokenize/reasoning.ts, shared with the gateway) whole and streamed in any cut, and the
// sim's answers with --think-tokens and --reasoning-parser, including a raw continuation of one.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { startSim } from '../../src/sim/index.js';
import type { SimHandle } from '../../src/sim/index.js';
import { ReasoningSplitter, splitReasoning } from '../../src/tokenize/index.js';
import type { ReasoningParserName, ThinkState } from '../../src/tokenize/index.js';

const whole = [
  { why: 'qwen3: both tags split reasoning from content', parser: 'qwen3', text: '<think>\nhm\n</think>\n\nyes', want: { reasoning: '\nhm\n', content: '\n\nyes' } },
  { why: 'qwen3: no </think> (cut off mid-think) is all content, tag included', parser: 'qwen3', text: '<think>\nhm', want: { reasoning: null, content: '<think>\nhm' } },
  { why: 'qwen3: no tags is all content', parser: 'qwen3', text: 'yes', want: { reasoning: null, content: 'yes' } },
  { why: 'qwen3: nothing after </think> is a null content', parser: 'qwen3', text: '<think>hm</think>', want: { reasoning: 'hm', content: null } },
  { why: 'deepseek_r1: no </think> is all reasoning', parser: 'deepseek_r1', text: '<think>hm', want: { reasoning: 'hm', content: null } },
  { why: 'deepseek_r1: <think> in the prompt, only </think> in the answer', parser: 'deepseek_r1', text: 'hm</think>yes', want: { reasoning: 'hm', content: 'yes' } },
] as const;
for (const w of whole) void test(`splitReasoning: ${w.why}`, () => assert.deepEqual(splitReasoning(w.parser, w.text), w.want));

// Every way of cutting `text` in three: the streamed fields must add up to the same split each time.
function streamed(parser: ReasoningParserName, text: string, cuts: readonly number[], state?: ThinkState): { reasoning: string; content: string } {
  const s = new ReasoningSplitter(parser, state);
  let reasoning = '';
  let content = '';
  let from = 0;
  for (const at of [...cuts, text.length]) {
    const d = s.push(text.slice(from, at));
    reasoning += d.reasoning;
    content += d.content;
    from = at;
  }
  const f = s.flush();
  return { reasoning: reasoning + f.reasoning, content: content + f.content };
}

function everyCut(parser: ReasoningParserName, text: string, want: { reasoning: string; content: string }, state?: ThinkState): void {
  for (let i = 0; i <= text.length; i++) {
    for (let j = i; j <= text.length; j++) assert.deepEqual(streamed(parser, text, [i, j], state), want, `cut at ${i} and ${j}`);
  }
}

void test('ReasoningSplitter: tags split across deltas anywhere cut where the whole text is cut', () => {
  everyCut('qwen3', '<think>\na <b\n</think>\n\nc</d', { reasoning: '\na <b\n', content: '\n\nc</d' });
});

void test('ReasoningSplitter: a </think> that never comes leaves the rest as reasoning, held tails included', () => {
  everyCut('qwen3', '<think>\nhm </thi', { reasoning: '\nhm </thi', content: '' });
});

void test('ReasoningSplitter: text before any tag is content for qwen3 and reasoning for deepseek_r1', () => {
  everyCut('qwen3', 'plain <th', { reasoning: '', content: 'plain <th' });
  everyCut('deepseek_r1', 'deep</think>end', { reasoning: 'deep', content: 'end' });
});

void test('ReasoningSplitter: started inside the think block (a continuation), the text is reasoning until </think>', () => {
  everyCut('qwen3', 'more\n</think>\n\nok', { reasoning: 'more\n', content: '\n\nok' }, 'thinking');
});

async function sim(t: { after(fn: () => Promise<void>): void }, extra: { reasoningParser?: ReasoningParserName } = {}): Promise<SimHandle> {
  const s = await startSim({ model: 'sim-model', port: 0, decodeTokensPerS: 5000, prefillTokensPerS: 1e6, hashSeed: '0', thinkTokens: 6, ...extra });
  t.after(() => s.close());
  await s.ready;
  return s;
}

async function post(s: SimHandle, path: string, body: unknown): Promise<Response> {
  const r = await fetch(s.url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.timeout(10_000) });
  assert.equal(r.status, 200);
  return r;
}

const messages = [{ role: 'user', content: 'think first' }];

async function deltas(r: Response): Promise<Record<string, unknown>[]> {
  const text = await r.text();
  return text
    .split('\n\n')
    .filter((e) => e.startsWith('data: {'))
    .map((e) => JSON.parse(e.slice(6)) as { choices: { delta?: Record<string, unknown> }[] })
    .map((e) => e.choices[0]?.delta ?? {});
}

void test('sim: a thinking answer without a parser is the raw text, think block and all', async (t) => {
  const s = await sim(t);
  const r = (await (await post(s, '/v1/chat/completions', { messages, max_tokens: 14 })).json()) as { choices: { message: Record<string, unknown> }[] };
  assert.equal(r.choices[0]?.message.content, `<think>\n the quick brown fox jumps over\n</think>\n\n the quick brown`);
});

void test('sim: with --reasoning-parser qwen3 the answer comes in reasoning and content, streamed and whole', async (t) => {
  const s = await sim(t, { reasoningParser: 'qwen3' });
  const w = (await (await post(s, '/v1/chat/completions', { messages, max_tokens: 14 })).json()) as { choices: { message: Record<string, unknown> }[] };
  assert.equal(w.choices[0]?.message.reasoning, '\n the quick brown fox jumps over\n');
  assert.equal(w.choices[0]?.message.content, '\n\n the quick brown');
  assert.equal('reasoning_content' in (w.choices[0]?.message ?? {}), false, 'vLLM removed the old name');
  const ds = await deltas(await post(s, '/v1/chat/completions', { messages, max_tokens: 14, stream: true }));
  const sum = (k: string): string => ds.map((d) => (typeof d[k] === 'string' ? d[k] : '')).join('');
  assert.equal(sum('reasoning'), '\n the quick brown fox jumps over\n');
  assert.equal(sum('content'), '\n\n the quick brown');
  assert.ok(ds.every((d) => !('reasoning_content' in d)));
});

void test('sim: thinking off in the template (an empty think block) answers without thinking', async (t) => {
  const s = await sim(t, { reasoningParser: 'qwen3' });
  const w = (await (await post(s, '/v1/chat/completions', { messages, max_tokens: 4, chat_template_kwargs: { enable_thinking: false } })).json()) as { choices: { message: Record<string, unknown> }[] };
  assert.equal(w.choices[0]?.message.content, ' the quick brown fox');
  assert.equal(w.choices[0]?.message.reasoning, null);
});

void test('sim: a raw completion of the rendered prompt plus the think block so far resumes it exactly', async (t) => {
  const s = await sim(t, { reasoningParser: 'qwen3' });
  const ids = ((await (await post(s, '/tokenize', { messages })).json()) as { tokens: number[] }).tokens;
  const prompt = ((await (await post(s, '/detokenize', { tokens: ids })).json()) as { prompt: string }).prompt;
  const full = `<think>\n the quick brown fox jumps over\n</think>\n\n the quick brown`;
  // Mid-think, and mid-answer: the completion's raw text is the rest of the chat's.
  for (const cut of ['<think>\n the quick', '<think>\n the quick brown fox jumps over\n</think>\n\n the']) {
    const c = (await (await post(s, '/v1/completions', { prompt: prompt + cut, max_tokens: 30, add_special_tokens: false })).json()) as { choices: { text: string }[] };
    assert.ok((cut + (c.choices[0]?.text ?? '')).startsWith(full), `after ${JSON.stringify(cut)}: ${JSON.stringify(c.choices[0]?.text)}`);
  }
});
