// Compiled chat templates render what @huggingface/jinja's interpreter renders (which the chat and
// incremental tests hold against Python's jinja2), construct by construct and on generated
// conversations with Qwen3's own template; what the compiled form does not know stays interpreted.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { Template } from '@huggingface/jinja';
import { compileTemplate } from '../../src/tokenize/compiled-template.js';
import { ChatError, chatInputOf, hfModel, renderChat, renderChatParts, templateConfigOf, templateMode } from '../../src/tokenize/index.js';
import { conversation } from './conversations.js';

const vars = {
  messages: [
    { role: 'system', content: 'be brief' },
    { role: 'user', content: '  hello there\n' },
    { role: 'assistant', content: '<think>\nhmm\n</think>\n\nhi', tool_calls: [{ function: { name: 'f', arguments: { city: 'Zürich', n: 2 } } }] },
    { role: 'user', content: 'bye' },
  ],
  tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
  add_generation_prompt: true,
  eos_token: '</s>',
  count: 3,
  nothing: null,
};

function interpreted(source: string, v: Record<string, unknown> = vars): string {
  return new Template(source).render(v);
}

function compiledRender(source: string, v: Record<string, unknown> = vars): string {
  const c = compileTemplate(new Template(source).parsed);
  if (!c.ok) throw new Error(`not compiled: ${c.reason}`);
  return c.render(v).join('');
}

const same: readonly { why: string; source: string }[] = [
  { why: 'text and variables print as they are', source: 'a{{ eos_token }}b{{ count }}' },
  { why: 'none and undefined print nothing', source: '[{{ nothing }}{{ missing }}]' },
  { why: 'booleans print as the interpreter prints them', source: '{{ add_generation_prompt }} {{ not add_generation_prompt }}' },
  { why: 'for gives loop.index0, first, last, length, revindex', source: '{% for m in messages %}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}|{% endfor %}' },
  { why: 'for over a reversed slice', source: '{% for m in messages[::-1] %}{{ m.role }},{% endfor %}' },
  { why: 'slices of lists and strings, negative indices', source: '{{ messages[1:3] | length }} {{ messages[-1].content }} {{ eos_token[1:-1] }} {{ eos_token[-1] }}' },
  { why: 'a for with a condition and an else', source: '{% for m in messages if m.role == "user" %}{{ m.content | trim }};{% endfor %}{% for x in [] %}x{% else %}empty{% endfor %}' },
  { why: 'set inside a loop stays in the loop; namespace carries out', source: '{% set ns = namespace(n=0, last=-1) %}{% set outer = 1 %}{% for m in messages %}{% set outer = 2 %}{% set ns.n = ns.n + 1 %}{% if m.role == "user" %}{% set ns.last = loop.index0 %}{% endif %}{% endfor %}{{ ns.n }} {{ ns.last }} {{ outer }}' },
  { why: 'set with a block body', source: '{% set greeting %}hi {{ eos_token }}{% endset %}[{{ greeting }}]' },
  { why: 'and, or return their operands; ternaries and select', source: "{{ (nothing or 'x') ~ (eos_token and 'y') }} {{ 'a' if count > 2 else 'b' }} {{ 'c' if false }}" },
  { why: 'string methods: startswith with a tuple, endswith, split, upper, lower, replace', source: "{{ messages[2].content.startswith(('x', '<think>')) }} {{ eos_token.endswith('>') }} {{ messages[2].content.split('</think>')[-1] }} {{ 'Ab'.upper() }}{{ 'Ab'.lower() }} {{ 'a-b-c'.replace('-', '+') }} {{ 'a b  c'.split() | length }} {{ 'a,b,c'.split(',', 1)[1] }}" },
  { why: 'strip with and without characters (the strip rewrite)', source: "[{{ messages[1].content.strip() }}][{{ messages[1].content.lstrip() }}][{{ messages[1].content.rstrip() }}]" },
  { why: 'in over strings, lists and dicts', source: "{{ '</think>' in messages[2].content }} {{ 'user' in ['user', 'x'] }} {{ 'role' in messages[0] }} {{ 'zz' not in messages[0] }} {{ 'a' in missing }}" },
  { why: 'tests: defined, none, string, mapping, iterable, number, odd', source: '{{ missing is defined }} {{ nothing is none }} {{ eos_token is string }} {{ messages[0] is mapping }} {{ messages is iterable }} {{ count is number }} {{ count is odd }} {{ messages[2].tool_calls is not none }}' },
  { why: 'tojson as Python writes it, with and without indent', source: '{{ tools | tojson }}\n{{ messages[2].tool_calls[0].function.arguments | tojson(indent=2) }}' },
  { why: 'dict methods get, items, keys, values', source: "{{ messages[0].get('role') }} {{ messages[0].get('nope', 'dflt') }} {% for k, v in messages[0].items() %}{{ k }}={{ v }};{% endfor %}{{ messages[0].keys() | join(',') }}" },
  { why: 'filters: length, first, last, join, default, reverse, list', source: "{{ messages | length }} {{ (messages | first).role }} {{ (messages | last).role }} {{ ['a','b'] | join('-') }} {{ missing | default('d') }} {{ '' | default('e', true) }} {{ (messages | reverse | list)[0].role }}" },
  { why: 'integer arithmetic and comparisons', source: '{{ count + 2 }} {{ count - 5 }} {{ count * 2 }} {{ count // 2 }} {{ count % 2 }} {{ -count }} {{ count >= 3 }} {{ count < 3 }} {{ messages|length - 1 }}' },
  { why: 'string concatenation with + and ~', source: "{{ 'a' + eos_token + 'b' }} {{ 'n' ~ count }} {{ 'x' + count }}" },
  { why: 'range and object literals', source: "{% for i in range(3) %}{{ i }}{% endfor %} {% for i in range(1, 7, 2) %}{{ i }}{% endfor %} {{ {'a': 1}.a }}" },
  { why: 'for over a dict gives its keys', source: '{% for k in messages[0] %}{{ k }},{% endfor %}' },
  { why: 'whitespace control as the interpreter trims it', source: '{%- for m in messages %}\n  {{- m.role }}\n{%- endfor %}\n' },
];
for (const r of same) {
  void test(`compiled template: ${r.why}`, () => {
    assert.equal(compiledRender(r.source), interpreted(r.source));
  });
}

const refused: readonly { why: string; source: string }[] = [
  { why: 'macros', source: '{% macro f(x) %}{{ x }}{% endmacro %}{{ f(1) }}' },
  { why: 'break, whose output before it the interpreter drops', source: '{% for m in messages %}{{ m.role }}{% break %}{% endfor %}' },
  { why: 'a filter it does not know', source: "{{ messages | map(attribute='role') | join(',') }}" },
  { why: 'float literals (1.0 prints as 1.0, a JavaScript number cannot tell)', source: '{{ 1.0 }}' },
];
for (const r of refused) {
  void test(`compiled template: ${r.why} stay interpreted, and renderChat still renders them`, () => {
    const c = compileTemplate(new Template(r.source).parsed);
    assert.equal(c.ok, false);
    assert.equal(templateMode(r.source).mode, 'interpreted');
    const cfg = templateConfigOf({ chat_template: r.source });
    assert.equal(renderChat(cfg, vars.messages, { addGenerationPrompt: false, continueFinalMessage: false }), interpreted(r.source, { ...vars, add_generation_prompt: false, tools: null, documents: null }));
  });
}

void test('compiled template: a value it cannot print exactly (a float) is rendered by the interpreter instead', () => {
  const source = '{{ x }}|{{ messages[0].content }}';
  const cfg = templateConfigOf({ chat_template: source });
  const messages = [{ role: 'user', content: 'hi' }];
  const out = renderChat(cfg, messages, { addGenerationPrompt: false, continueFinalMessage: false, chatTemplateKwargs: { x: 2.5 } });
  assert.equal(out, '2.5|hi');
  assert.equal(templateMode(source).mode, 'compiled');
});

void test('compiled template: a checked render that agrees with the interpreter answers the compiled parts (message contents by identity)', () => {
  const source = '{% for m in messages %}<{{ m.role }}>{{ m.content }}</>{% endfor %}';
  const cfg = templateConfigOf({ chat_template: source });
  const content = 'the same string object '.repeat(10);
  const parts = renderChatParts(cfg, [{ role: 'user', content }], { addGenerationPrompt: false, continueFinalMessage: false });
  assert.equal(parts.join(''), `<user>${content}</>`);
  assert.ok(parts.length > 1 && parts.includes(content), `parts: ${JSON.stringify(parts.map((p) => p.length))}`);
  assert.equal(templateMode(source).mode, 'compiled');
});

void test("compiled template: raise_exception reaches the client in the interpreter's words", () => {
  const source = "{% if messages[0].role != 'user' %}{{ raise_exception('first message must be the user') }}{% endif %}ok";
  const cfg = templateConfigOf({ chat_template: source });
  assert.throws(() => renderChat(cfg, [{ role: 'system', content: 's' }], { addGenerationPrompt: false, continueFinalMessage: false }), /first message must be the user/);
  assert.equal(renderChat(cfg, [{ role: 'user', content: 'u' }], { addGenerationPrompt: false, continueFinalMessage: false }), 'ok');
});

void test("compiled template: Qwen3's template compiles, and its self-checks against the interpreter pass on generated conversations", async () => {
  const m = await hfModel('qwen3');
  const c = compileTemplate(new Template(m.template.template).parsed);
  assert.ok(c.ok, c.ok ? '' : c.reason);
  // The first renders of each template are also interpreted and compared; the Python jinja2
  // property test (incremental.test.ts) holds the compiled renders after them to jinja2 itself.
  for (let seed = 1; seed <= 20; seed++) {
    const input = chatInputOf(conversation(seed));
    try {
      renderChat(m.template, input.messages, input);
    } catch (e) {
      // A generated continuation with no final text is refused as vLLM refuses it; nothing to compare.
      if (!(e instanceof ChatError)) throw e;
    }
  }
  assert.equal(templateMode(m.template.template).mode, 'compiled');
});
