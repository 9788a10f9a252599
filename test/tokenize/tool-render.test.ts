// Tool-calling chats rendered here equal vLLM's render (Python's jinja2 after vLLM's request
// handling, fixtures/render_vllm.py) on generated bodies full of what JS and Python write apart:
// floats written 1.0, 1e16, 1e-05, -0.0, 1.5e-7; integers past 2^53; NaN and Infinity in
// arguments (json.loads takes them); numeric-looking keys out of order; arguments sent as objects;
// empty and missing arguments; tools without a description; content edged with whitespace only
// Python or only JS strips. Every one of them renders here, with the same text and ids.
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { prng } from '../../src/e2e/index.js';
import { ChatError, chatInputOf, hfModel, IncrementalEncoder, NotExactHere, promptTextOf, pyFloatRepr, renderChat, templateConfigOf, templateMode, type TokenizerModel } from '../../src/tokenize/index.js';
import { repoRoot } from '../support/shared.js';

const script = join(repoRoot, 'test', 'tokenize', 'fixtures', 'render_vllm.py');

function vllm(template: string, bodies: readonly string[]): (string | { error: string })[] {
  const out = execFileSync('/usr/bin/python3', [script], { input: JSON.stringify({ template, special_tokens: { eos_token: '<|im_end|>' }, bodies }), timeout: 60_000, maxBuffer: 64 << 20 });
  return JSON.parse(out.toString('utf8')) as (string | { error: string })[];
}

// Templates that print what differs: tools and arguments with tojson, arguments walked with items
// and printed as Qwen3-Coder prints them, content trimmed, reasoning read.
const walking =
  '{%- if tools %}{% for t in tools %}{{ t | tojson }}\n{% endfor %}{% endif %}' +
  '{%- for m in messages %}<{{ m.role }}>{{ m.content | trim }}' +
  '{%- if m.reasoning_content is defined %}[r:{{ m.reasoning_content }}]{% endif %}' +
  '{%- for c in m.tool_calls or [] %}{{ c.function.name }}({% for k, v in c.function.arguments | items %}{{ k }}={{ v | tojson if v is mapping or (v is sequence and v is not string) else v | string }};{{ v | tojson }} {% endfor %}){% endfor %}' +
  '{%- endfor %}';

// Numbers as a client may write them, many of which JS would print otherwise than Python does.
const numbers = ['0', '7', '-3', '-0', '1.5', '0.1', '2.50', '1.0', '0.0', '-0.0', '1e16', '1E3', '1e-05', '1.5e-7', '0.0001', '1e400', '123456789.125', '9007199254740993', '12345678901234567890', '-12', '3.14159'];
// What json.loads takes in an arguments string and JSON (so JSON.parse of the body) does not.
const pythonOnly = ['NaN', 'Infinity', '-Infinity'];
const texts = ['plain', ' padded \t', '\ufeffbom\ufeff', '\x1cfile sep\x85', '\u3000ideographic\u3000', 'Zürich ☀', 'quote " and \\ backslash', 'line\nbreak'];
const keys = ['city', 'days', '10', '2', '1', 'a', '0', 'unit', 'Ünïcode'];

function generate(seed: number): string {
  const r = prng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)] as T;
  // `number` picks the numbers a place may hold: NaN and Infinity only inside an arguments string.
  const value = (depth: number, number: () => string): string => {
    const roll = r();
    if (roll < 0.35) return number();
    if (roll < 0.6) return JSON.stringify(pick(texts));
    if (roll < 0.7) return pick(['true', 'false', 'null']);
    if (depth > 2) return number();
    if (roll < 0.85) return `[${Array.from({ length: Math.floor(r() * 3) }, () => value(depth + 1, number)).join(', ')}]`;
    return object(depth + 1, number);
  };
  const object = (depth: number, number: () => string): string => {
    const ks = [...new Set(Array.from({ length: 1 + Math.floor(r() * 3) }, () => pick(keys)))];
    return `{${ks.map((k) => `${JSON.stringify(k)}: ${value(depth, number)}`).join(', ')}}`;
  };
  const json = (): string => pick(numbers);
  const python = (): string => (r() < 0.1 ? pick(pythonOnly) : pick(numbers));
  const args = (): string => {
    const roll = r();
    if (roll < 0.08) return '""';
    if (roll < 0.12) return 'null';
    if (roll < 0.16) return JSON.stringify('{}');
    if (roll < 0.2) return JSON.stringify('{"city": ');
    // Sent as an object, which vLLM hands to the template as it is.
    if (roll < 0.35) return object(0, json);
    return JSON.stringify(object(0, python));
  };
  const tool = (name: string): string => {
    const described = r() < 0.5 ? `"description": ${JSON.stringify(pick(texts))}, ` : '';
    const strict = r() < 0.3 ? ', "strict": true' : '';
    const extra = r() < 0.5 ? `, "x-extra": ${object(1, json)}` : '';
    return `{"type": "function", "function": {"name": "${name}", ${described}"parameters": {"type": "object", "properties": {"days": {"type": "number", "minimum": ${json()}, "default": ${value(2, json)}}}${extra}}${strict}}}`;
  };
  const messages: string[] = [`{"role": "system", "content": ${JSON.stringify(pick(texts))}}`];
  for (let turn = 0; turn < 1 + Math.floor(r() * 3); turn++) {
    messages.push(`{"role": "user", "content": ${JSON.stringify(pick(texts))}}`);
    const reasoning = r() < 0.3 ? `, "reasoning": ${JSON.stringify(pick(texts))}` : r() < 0.2 ? `, "reasoning_content": "dropped by vLLM"` : '';
    const calls = r() < 0.15 ? '[]' : `[{"id": "call_${turn}", "type": "function", "function": {"name": "f", "arguments": ${args()}}}]`;
    messages.push(`{"role": "assistant", "content": ${JSON.stringify(pick(texts))}${reasoning}, "tool_calls": ${calls}}`);
    messages.push(`{"role": "tool", "tool_call_id": "call_${turn}", "content": ${JSON.stringify(pick(texts))}}`);
  }
  const tools = r() < 0.8 ? `, "tools": [${tool('f')}, ${tool('g')}]` : '';
  return `{"model": "m", "messages": [${messages.join(', ')}]${tools}}`;
}

const seeds = Array.from({ length: 300 }, (_, i) => 5000 + i);

let qwen3: Promise<TokenizerModel> | undefined;
const model = (): Promise<TokenizerModel> => (qwen3 ??= hfModel('qwen3'));

void test('pyFloatRepr: Python\'s repr of floats', () => {
  const rows: [number, string][] = [
    [1, '1.0'],
    [-0, '-0.0'],
    [1e16, '1e+16'],
    [1.5e16, '1.5e+16'],
    [1e15, '1000000000000000.0'],
    [0.0001, '0.0001'],
    [1e-5, '1e-05'],
    [1.5e-7, '1.5e-07'],
    [123.456, '123.456'],
    [0.1, '0.1'],
  ];
  for (const [x, want] of rows) assert.equal(pyFloatRepr(x), want, String(x));
});

// A number as the template gets it from a tool call: json.dumps text, str(), truth, int or float.
const printing =
  '{%- for c in messages[0].tool_calls %}{% set x = c.function.arguments.x %}' +
  '{{ x | tojson }}|{{ x | string }}|{% if x %}T{% else %}F{% endif %}|{% if x is integer %}int{% elif x is number %}float{% endif %}' +
  '{%- endfor %}';

const bodyWith = (args: string): string => `{"messages": [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": ${args}}}]}]}`;

// Rendered from the body's text, as the gateway's workers render a request.
function renderedHere(template: string, body: string): string {
  const input = chatInputOf(JSON.parse(body) as Record<string, unknown>, Buffer.from(body));
  return renderChat(templateConfigOf({ chat_template: template }), input.messages, { ...input, addGenerationPrompt: false });
}

// `json`: Python's json.dumps, `str`: its str(); `asObject`: also sent as an object (JSON has no NaN).
const numberRows: readonly { written: string; json: string; str: string; truth: 'T' | 'F'; kind: 'int' | 'float'; asObject: boolean }[] = [
  { written: '1.0', json: '1.0', str: '1.0', truth: 'T', kind: 'float', asObject: true },
  { written: '1e16', json: '1e+16', str: '1e+16', truth: 'T', kind: 'float', asObject: true },
  { written: '1e-05', json: '1e-05', str: '1e-05', truth: 'T', kind: 'float', asObject: true },
  { written: '-0.0', json: '-0.0', str: '-0.0', truth: 'F', kind: 'float', asObject: true },
  { written: '0.0', json: '0.0', str: '0.0', truth: 'F', kind: 'float', asObject: true },
  { written: '1.5', json: '1.5', str: '1.5', truth: 'T', kind: 'float', asObject: true },
  { written: '-0', json: '0', str: '0', truth: 'F', kind: 'int', asObject: true },
  { written: '9007199254740993', json: '9007199254740993', str: '9007199254740993', truth: 'T', kind: 'int', asObject: true },
  { written: '12345678901234567890', json: '12345678901234567890', str: '12345678901234567890', truth: 'T', kind: 'int', asObject: true },
  { written: '1e400', json: 'Infinity', str: 'inf', truth: 'T', kind: 'float', asObject: true },
  { written: 'NaN', json: 'NaN', str: 'nan', truth: 'T', kind: 'float', asObject: false },
  { written: '-Infinity', json: '-Infinity', str: '-inf', truth: 'T', kind: 'float', asObject: false },
];

void test('tool numbers: each renders through tojson, string, truth and the number tests as Python does, in string and object arguments', () => {
  const bodies: string[] = [];
  const wants: string[] = [];
  for (const r of numberRows) {
    const want = `${r.json}|${r.str}|${r.truth}|${r.kind}`;
    const forms = [JSON.stringify(`{"x": ${r.written}}`), ...(r.asObject ? [`{"x": ${r.written}}`] : [])];
    for (const args of forms) {
      const body = bodyWith(args);
      assert.equal(renderedHere(printing, body), want, body);
      bodies.push(body);
      wants.push(want);
    }
  }
  assert.deepEqual(vllm(printing, bodies), wants, 'Python renders the same');
});

void test('tool numbers: keys keep the order sent, numeric-looking ones included, at every depth, in arguments and tool schemas', () => {
  const template = '{{ tools[0].function.parameters | tojson }}|{{ messages[0].tool_calls[0].function.arguments | tojson }}';
  const json = '{"2": 1.0, "1": [1e16, {"b": -0.0, "0": 2}], "a": {"10": 9007199254740993, "9": "x"}}';
  const tools = `[{"type": "function", "function": {"name": "f", "parameters": ${json}}}]`;
  const want = `${json}|${json}`.replaceAll('1e16', '1e+16');
  const bodies = [JSON.stringify(json), json].map((args) => bodyWith(args).replace(/}$/, `, "tools": ${tools}}`));
  for (const body of bodies) assert.equal(renderedHere(template, body), want, body);
  assert.deepEqual(vllm(template, bodies), [want, want], 'Python renders the same');
});

void test('tool numbers: a chat only the interpreter can render (a macro, a comparison of one) goes to the engine rather than render it otherwise', () => {
  const macro = '{% macro p(v) %}{{ v | tojson }}{% endmacro %}{% for c in messages[0].tool_calls %}{{ p(c.function.arguments) }}{% endfor %}';
  const compare = '{% for c in messages[0].tool_calls %}{% if c.function.arguments.x > 0 %}+{% endif %}{% endfor %}';
  assert.equal(templateMode(macro).mode, 'interpreted');
  assert.equal(templateMode(compare).mode, 'compiled');
  for (const template of [macro, compare]) {
    assert.throws(() => renderedHere(template, bodyWith(JSON.stringify('{"x": 1.0}'))), NotExactHere, template);
    // A number JS writes as Python does renders there as ever.
    assert.equal(renderedHere(template, bodyWith(JSON.stringify('{"x": 2}'))), template === macro ? '{"x": 2}' : '+');
  }
});

for (const [name, template] of [['walking', walking], ['qwen3', undefined]] as const) {
  void test(`tool chats (${name} template): ${seeds.length} generated bodies render here as vLLM renders them, text and ids`, async () => {
    const m = await model();
    const cfg = template === undefined ? m.template : templateConfigOf({ chat_template: template, eos_token: '<|im_end|>' });
    const local: TokenizerModel = { ...m, template: cfg };
    const bodies = seeds.map(generate);
    const theirs = vllm(cfg.template, bodies);
    const enc = new IncrementalEncoder(local, { cacheBytes: 16 << 20, selfChecks: 0 });
    let exact = 0;
    for (const [i, text] of bodies.entries()) {
      const want = theirs[i];
      const why = `seed ${seeds[i] ?? ''}: ${text}`;
      let parts: readonly string[];
      try {
        parts = promptTextOf('chat', JSON.parse(text), local, Buffer.from(text)).parts;
      } catch (e) {
        // What vLLM refuses is refused here too; nothing is left to the engine's /tokenize.
        assert.ok(e instanceof ChatError && !(e instanceof NotExactHere) && typeof want === 'object', `${why}: ${String(e)}`);
        continue;
      }
      assert.equal(typeof want, 'string', `${why}: vLLM refused it: ${JSON.stringify(want)}`);
      assert.equal(parts.join(''), want, why);
      // The ids follow from the text; encoded by pieces as the router does, against Python's text whole.
      assert.deepEqual(await enc.encode(parts, false), await m.encodeWhole(String(want), false), why);
      exact++;
    }
    console.log(`${name}: ${exact} bodies rendered here exactly as vLLM, ${bodies.length - exact} refused as vLLM refuses them`);
    assert.ok(exact > seeds.length / 2, 'most bodies render here');
  });
}
