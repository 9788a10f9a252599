// Chat rendering rules, each against Python's jinja2 with transformers' environment where the
// difference would change the ids the engine hashes; and the render inputs vLLM takes from a body.
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { hasCode } from '../../src/errors/index.js';
import { byteModel, chatInputOf, ChatError, conversationOf, promptTextOf, renderChat, templateConfigOf, type ChatMessage } from '../../src/tokenize/index.js';
import { repoRoot } from '../support/shared.js';

const script = join(repoRoot, 'test', 'tokenize', 'fixtures', 'render_jinja2.py');

function python(template: string, messages: readonly ChatMessage[], o: { continueFinal?: boolean } = {}): string {
  const cases = [{ messages, tools: null, add_generation_prompt: false, continue_final_message: o.continueFinal ?? false, kwargs: {} }];
  const out = execFileSync('/usr/bin/python3', [script], { input: JSON.stringify({ template, special_tokens: { eos_token: '</s>' }, cases }), timeout: 30_000 });
  const list = JSON.parse(out.toString('utf8')) as string[];
  return list[0] ?? '';
}

const msg = (content: string): ChatMessage[] => [{ role: 'user', content }];
const rows: readonly { why: string; template: string; content: string; continueFinal?: boolean }[] = [
  { why: "lstrip('\\n') strips newlines only (Qwen3's assistant turns), not the space after them", template: "{{ messages[0].content.lstrip('\\n') }}", content: '\n\n  keep the spaces' },
  { why: "rstrip('\\n') keeps trailing spaces", template: "{{ messages[0].content.rstrip('\\n') }}|", content: 'text  \n\n' },
  { why: "strip('x') strips that character at both ends", template: "{{ messages[0].content.strip('x') }}", content: 'xx middle x' },
  { why: 'strip() without an argument still strips whitespace', template: '{{ messages[0].content.strip() }}|', content: ' \t padded \n' },
  { why: 'tojson writes non-ASCII as it is, with Python separators', template: '{{ messages | tojson }}', content: 'Zürich ☀' },
  { why: 'the special tokens are variables of the template', template: '{{ messages[0].content }}{{ eos_token }}', content: 'end' },
  { why: 'continue_final_message cuts right after the final text, its trailing spaces kept', template: '{{ messages[0].content }}<|im_end|>\n', content: 'to be continued ', continueFinal: true },
];
for (const r of rows) {
  void test(`render: ${r.why}`, () => {
    const messages = msg(r.content);
    const ours = renderChat(templateConfigOf({ chat_template: r.template, eos_token: '</s>' }), messages, {
      addGenerationPrompt: false,
      continueFinalMessage: r.continueFinal ?? false,
    });
    assert.equal(ours, python(r.template, messages, { continueFinal: r.continueFinal }));
  });
}

void test('conversation: text parts are joined by a newline, tool-call arguments parsed, unknown fields dropped as vLLM does', () => {
  const got = conversationOf([
    { role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }], extra: 1 },
    { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{"x": 1}' } }] },
    { role: 'tool', tool_call_id: 'c', content: 'ok', name: 'f' },
  ]);
  assert.deepEqual(got, [
    { role: 'user', content: 'a\nb' },
    { role: 'assistant', content: '', tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: { x: 1 } } }] },
    { role: 'tool', content: 'ok', name: 'f', tool_call_id: 'c' },
  ]);
});

const bad: readonly { why: string; body: Record<string, unknown>; param: string }[] = [
  { why: 'no messages', body: { messages: [] }, param: 'messages' },
  { why: 'an image part cannot be rendered to text here', body: { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, param: 'messages' },
  { why: 'both generation prompt and continuation', body: { messages: [{ role: 'user', content: 'x' }], add_generation_prompt: true, continue_final_message: true }, param: 'continue_final_message' },
  { why: 'tools that are not a list', body: { messages: [{ role: 'user', content: 'x' }], tools: {} }, param: 'tools' },
];
for (const r of bad) {
  void test(`chat input: ${r.why} is a ChatError naming the field`, () => {
    assert.throws(() => chatInputOf(r.body), (e: unknown) => e instanceof ChatError && e.param === r.param && hasCode(e, 'LLMGW_CHAT_TEMPLATE'));
  });
}

void test('templateConfigOf: a named default template, special tokens as strings or objects, ChatML when there is none', () => {
  const cfg = templateConfigOf({ chat_template: [{ name: 'tool_use', template: 'T' }, { name: 'default', template: 'D' }], bos_token: { content: '<s>' }, eos_token: '</s>' });
  assert.deepEqual(cfg, { template: 'D', specialTokens: { bos_token: '<s>', eos_token: '</s>' } });
  assert.match(templateConfigOf({}).template, /im_start/);
});

void test("promptTextOf: a request's own chat template is left to the engine (code from a client must not stall a pool thread)", () => {
  const m = byteModel();
  const messages = [{ role: 'user', content: 'x' }];
  for (const extra of [{ chat_template: '{{ 1 }}' }, { chat_template_kwargs: { chat_template: '{{ 1 }}' } }]) {
    assert.throws(() => promptTextOf('chat', { messages, ...extra }, m), (e: unknown) => hasCode(e, 'LLMGW_PROMPT_SHAPE'));
  }
  assert.equal(promptTextOf('chat', { messages }, m).parts.join(''), '<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n');
});
