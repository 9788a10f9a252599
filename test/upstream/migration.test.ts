// Continuing a broken stream, without sockets: which requests may be continued, the continuation
// built from what the client was sent, and the next engine's events rewritten into the client's stream.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { breakReasonOf, requestRefusal, StreamSplice } from '../../src/upstream/index.js';

const sse = (data: unknown): string => `data: ${JSON.stringify(data)}\n\n`;
const chatChunk = (id: string, delta: Record<string, unknown>, finish: string | null = null): string =>
  sse({ id, object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] });
const textChunk = (id: string, text: string, finish: string | null = null): string =>
  sse({ id, object: 'text_completion', created: 1, model: 'm', choices: [{ index: 0, text, logprobs: null, finish_reason: finish }] });
const chat = { model: 'm', messages: [{ role: 'user', content: 'hi' }], stream: true, max_tokens: 10 };

const refusals = [
  { why: 'several choices interleave and each would need its own continuation', endpoint: 'chat', body: { ...chat, n: 2 }, want: 'choices' },
  { why: 'best_of picks among choices the client never sees', endpoint: 'completions', body: { prompt: 'x', best_of: 3 }, want: 'choices' },
  { why: 'logprobs after the seam would be of a re-tokenized prefix', endpoint: 'chat', body: { ...chat, logprobs: true }, want: 'logprobs' },
  { why: 'completion logprobs likewise', endpoint: 'completions', body: { prompt: 'x', logprobs: 2 }, want: 'logprobs' },
  { why: 'a grammar would restart from its first state', endpoint: 'chat', body: { ...chat, response_format: { type: 'json_object' } }, want: 'structured' },
  { why: "vLLM's guided decoding likewise", endpoint: 'completions', body: { prompt: 'x', guided_regex: 'a+' }, want: 'structured' },
  { why: 'echo would echo the prompt again', endpoint: 'completions', body: { prompt: 'x', echo: true }, want: 'echo' },
  { why: 'text cannot be appended to token ids', endpoint: 'completions', body: { prompt: [1, 2, 3] }, want: 'token-prompt' },
  { why: 'an insertion has text after the answer', endpoint: 'completions', body: { prompt: 'x', suffix: 'y' }, want: 'suffix' },
  { why: 'a continued message of content parts has no one text to extend', endpoint: 'chat', body: { ...chat, messages: [{ role: 'assistant', content: [{ type: 'text', text: 'a' }] }], continue_final_message: true, add_generation_prompt: false }, want: 'content-parts' },
  { why: 'plain text response format is no grammar', endpoint: 'chat', body: { ...chat, response_format: { type: 'text' } }, want: undefined },
  { why: 'a one-prompt list is one prompt', endpoint: 'completions', body: { prompt: ['x'] }, want: undefined },
  { why: 'logprobs: false asks for none', endpoint: 'chat', body: { ...chat, logprobs: false, n: 1 }, want: undefined },
] as const;
for (const r of refusals) void test(`requestRefusal: ${r.why}`, () => assert.equal(requestRefusal(r.endpoint, r.body), r.want));

void test('breakReasonOf: a body timeout is a timeout, a broken bound is a bound, anything else a reset', () => {
  assert.equal(breakReasonOf(Object.assign(new Error('x'), { code: 'UND_ERR_BODY_TIMEOUT' })), 'timeout');
  assert.equal(breakReasonOf(Object.assign(new Error('x'), { code: 'LLMGW_UPSTREAM_STALLED' })), 'timeout');
  assert.equal(breakReasonOf(Object.assign(new Error('x'), { code: 'LLMGW_UPSTREAM_EVENT_TOO_LARGE' })), 'bound');
  assert.equal(breakReasonOf(Object.assign(new Error('x'), { code: 'LLMGW_UPSTREAM_ANSWER_TOO_LARGE' })), 'bound');
  assert.equal(breakReasonOf(Object.assign(new Error('x'), { code: 'UND_ERR_SOCKET' })), 'reset');
  assert.equal(breakReasonOf(undefined), 'reset');
});

void test('StreamSplice: a chat continues as the final assistant message, max_tokens less what was sent', () => {
  const s = new StreamSplice('chat', chat, 2);
  for (const e of [chatChunk('c1', { role: 'assistant', content: '' }), chatChunk('c1', { content: ' the' }), chatChunk('c1', { content: ' quick' })]) assert.equal(s.pass(e), e);
  const c = s.continuation();
  assert.ok(!('refused' in c));
  assert.deepEqual(c.body.messages, [...chat.messages, { role: 'assistant', content: ' the quick' }]);
  assert.equal(c.body.continue_final_message, true);
  assert.equal(c.body.add_generation_prompt, false);
  assert.equal(c.body.max_tokens, 8);
  assert.deepEqual(c.body.stream_options, { include_usage: true });
  assert.equal(c.hop, 1);
  assert.equal(c.sentTokens, 2);
});

void test("StreamSplice: a client's own continued message is extended, not followed by a second one", () => {
  const body = { ...chat, messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'Once' }], continue_final_message: true, add_generation_prompt: false };
  const s = new StreamSplice('chat', body, 1);
  s.pass(chatChunk('c1', { content: ' upon' }));
  const c = s.continuation();
  assert.ok(!('refused' in c));
  assert.deepEqual(c.body.messages, [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'Once upon' }]);
});

void test('StreamSplice: a completion continues with the answer appended to its prompt', () => {
  const s = new StreamSplice('completions', { model: 'm', prompt: ['Once'], max_tokens: 5, min_tokens: 3, stream: true }, 1);
  s.pass(textChunk('t1', ' upon'));
  s.pass(textChunk('t1', ' a'));
  const c = s.continuation();
  assert.ok(!('refused' in c));
  assert.equal(c.body.prompt, 'Once upon a');
  assert.equal(c.body.max_tokens, 3);
  assert.equal(c.body.min_tokens, 1);
});

void test("StreamSplice: the next engine's events take the client's id, lose their role delta, and charge the prompt once", () => {
  const s = new StreamSplice('chat', chat, 1);
  s.pass(chatChunk('first', { role: 'assistant', content: '' }));
  for (const w of [' a', ' b', ' c']) s.pass(chatChunk('first', { content: w }));
  assert.ok(!('refused' in s.continuation()));
  assert.equal(s.pass(chatChunk('second', { role: 'assistant', content: '' })), undefined, 'a second role delta is dropped');
  assert.equal(s.pass(chatChunk('second', { role: 'assistant', content: null })), undefined, "llama-server's null content too");
  const word = JSON.parse((s.pass(chatChunk('second', { content: ' d' })) ?? '').slice(6)) as { id: string; choices: { delta: unknown }[] };
  assert.equal(word.id, 'first');
  assert.deepEqual(word.choices[0]?.delta, { content: ' d' });
  // The engine's prompt held the 3 tokens sent before: 20 + 3; it wrote 7 more.
  const usage = { prompt_tokens: 23, completion_tokens: 7, total_tokens: 30, prompt_tokens_details: { cached_tokens: 22 } };
  const out = JSON.parse((s.pass(sse({ id: 'second', object: 'chat.completion.chunk', created: 2, model: 'm', choices: [], usage })) ?? '').slice(6)) as { id: string; usage: typeof usage };
  assert.equal(out.id, 'first');
  assert.deepEqual(out.usage, { prompt_tokens: 20, completion_tokens: 10, total_tokens: 30, prompt_tokens_details: { cached_tokens: 20 } });
  assert.deepEqual(s.usage({ promptTokens: 23, completionTokens: 7, cachedTokens: 22 }), { promptTokens: 20, completionTokens: 10, cachedTokens: 20 });
  assert.equal(s.pass('data: [DONE]\n\n'), 'data: [DONE]\n\n');
});

void test('StreamSplice: a tool call under way, a thinking chat offered tools, and the migration limit refuse a continuation', () => {
  const tool = new StreamSplice('chat', chat, 3);
  tool.pass(chatChunk('c', { tool_calls: [{ index: 0, id: 't', type: 'function', function: { name: 'f', arguments: '{"a' } }] }));
  assert.deepEqual(tool.continuation(), { refused: 'tool-call' });
  const thinking = new StreamSplice('chat', { ...chat, tools: [{ type: 'function', function: { name: 'f' } }] }, 3);
  thinking.pass(chatChunk('c', { reasoning: 'hmm' }));
  assert.deepEqual(thinking.continuation(), { refused: 'tools' });
  const once = new StreamSplice('chat', chat, 1);
  once.pass(chatChunk('c', { content: 'x' }));
  assert.ok(!('refused' in once.continuation()));
  assert.deepEqual(once.continuation(), { refused: 'limit' });
  assert.deepEqual(new StreamSplice('chat', { ...chat, n: 2 }, 1).continuation(), { refused: 'choices' });
});

void test('StreamSplice: an answer whose finish the client already has is finished, however its stream ended', () => {
  const s = new StreamSplice('chat', chat, 1);
  s.pass(chatChunk('c', { content: 'x' }));
  assert.equal(s.finished, false);
  s.pass(chatChunk('c', {}, 'stop'));
  assert.equal(s.finished, true);
});

void test('StreamSplice: a long answer is folded as it streams and continued whole', () => {
  const s = new StreamSplice('completions', { prompt: 'p', max_tokens: 100_000 }, 1);
  const words = Array.from({ length: 5000 }, (_, i) => ` w${i}`);
  for (const w of words) s.pass(textChunk('t', w));
  const c = s.continuation();
  assert.ok(!('refused' in c));
  assert.equal(c.body.prompt, `p${words.join('')}`);
  assert.equal(c.body.max_tokens, 95_000);
});

void test('StreamSplice: a stream broken before any text is sent again as it came (no empty message to continue)', () => {
  const s = new StreamSplice('chat', chat, 1);
  s.pass(chatChunk('c', { role: 'assistant', content: '' }));
  const c = s.continuation();
  assert.ok(!('refused' in c));
  assert.deepEqual(c.body.messages, chat.messages);
  assert.equal(c.body.continue_final_message, undefined);
  assert.equal(c.body.max_tokens, 10);
});

void test('StreamSplice: a chat broken after nothing but spaces is refused (no message of text to continue, nothing to resend)', () => {
  const s = new StreamSplice('chat', chat, 1);
  s.pass(chatChunk('c', { content: ' ' }));
  assert.deepEqual(s.continuation(), { refused: 'blank-prefix' });
  const c = new StreamSplice('completions', { prompt: 'p', max_tokens: 3 }, 1);
  c.pass(textChunk('t', ' '));
  assert.ok(!('refused' in c.continuation()), 'a completion prompt takes the spaces as they are');
});

void test('StreamSplice: a thinking chat goes on as a raw completion of <think>, the reasoning, </think> and the content so far', () => {
  const s = new StreamSplice('chat', { ...chat, max_completion_tokens: 20, chat_template_kwargs: { enable_thinking: true }, temperature: 0 }, 2);
  s.pass(chatChunk('c1', { role: 'assistant', content: '' }));
  for (const r of ['\n', 'a', ' b', '\n']) s.pass(chatChunk('c1', { reasoning: r }));
  s.pass(chatChunk('c1', { content: '\n\n' }));
  s.pass(chatChunk('c1', { content: 'Yes' }));
  const c = s.continuation();
  assert.ok(!('refused' in c));
  assert.deepEqual(c.raw, { original: { ...chat, max_completion_tokens: 20, chat_template_kwargs: { enable_thinking: true }, temperature: 0 }, suffix: '<think>\na b\n</think>\n\nYes' });
  // Six tokens shown and the two tags the parser hid: 20 - 8.
  assert.equal(c.sentTokens, 8);
  assert.equal(c.body.max_tokens, 12);
  for (const k of ['messages', 'chat_template_kwargs', 'max_completion_tokens']) assert.equal(k in c.body, false, k);
  assert.equal(c.body.temperature, 0);
  assert.equal(c.body.add_special_tokens, false);
  const delta = (e: string | undefined): unknown => (e === undefined ? undefined : (JSON.parse(e.slice(6)) as { choices: { delta: unknown }[] }).choices[0]?.delta);
  assert.deepEqual(delta(s.pass(textChunk('cmpl', ' more'))), { content: ' more' });
  const usage = { prompt_tokens: 28, completion_tokens: 4, total_tokens: 32 };
  const out = JSON.parse((s.pass(sse({ id: 'cmpl', object: 'text_completion', created: 2, model: 'm', choices: [], usage })) ?? '').slice(6)) as { id: string; object: string; usage: typeof usage };
  assert.equal(out.id, 'c1');
  assert.equal(out.object, 'chat.completion.chunk');
  assert.deepEqual(out.usage, { prompt_tokens: 20, completion_tokens: 12, total_tokens: 32 });
});

void test('StreamSplice: mid-think, the raw text is reasoning up to </think>, in the field the first engine used, however the tag is cut', () => {
  const s = new StreamSplice('chat', chat, 2);
  s.pass(chatChunk('c1', { reasoning_content: 'hm' }));
  const c = s.continuation();
  assert.ok(!('refused' in c));
  assert.equal(c.raw?.suffix, '<think>hm');
  assert.equal(c.body.max_tokens, 8, 'one shown, <think> hidden');
  const delta = (e: string | undefined): unknown => (e === undefined ? undefined : (JSON.parse(e.slice(6)) as { choices: { delta: unknown }[] }).choices[0]?.delta);
  assert.deepEqual(delta(s.pass(textChunk('x', ' more</th'))), { reasoning_content: ' more' });
  assert.equal(s.pass(textChunk('x', 'ink>')), undefined, 'the tag alone shows nothing');
  assert.deepEqual(delta(s.pass(textChunk('x', '\n\nok'))), { content: '\n\nok' });
});
