// Tool-calling chats rendered here equal vLLM's render (Python's jinja2 after vLLM's request
// handling, fixtures/render_vllm.py) on generated bodies full of what JS and Python write apart:
// floats written 1.0, 1e16, -0.0, 1.5e-7; integers past 2^53; numeric-looking keys out of order;
// empty and missing arguments; tools without a description; content edged with whitespace only
// Python or only JS strips. Where a body cannot be rendered here exactly, it must say so
// (NotExactHere: that request goes to the engine's /tokenize), never render something else.
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { prng } from '../../src/bench/index.js';
import { ChatError, hfModel, IncrementalEncoder, NotExactHere, promptTextOf, pyFloatRepr, templateConfigOf, type TokenizerModel } from '../../src/tokenize/index.js';
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

// Numbers as a client may write them, and whether JS can hold them as Python prints them.
const numbers = ['0', '7', '-3', '1.5', '0.1', '2.50', '1.0', '-0.0', '1e16', '1E3', '1.5e-7', '0.0001', '123456789.125', '9007199254740993', '-12', '3.14159'];
const texts = ['plain', ' padded \t', '\ufeffbom\ufeff', '\x1cfile sep\x85', '\u3000ideographic\u3000', 'Zürich ☀', 'quote " and \\ backslash', 'line\nbreak'];
const keys = ['city', 'days', '10', '2', 'a', '0', 'unit', 'Ünïcode'];

function generate(seed: number): string {
  const r = prng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)] as T;
  const value = (depth: number): string => {
    const roll = r();
    if (roll < 0.35) return pick(numbers);
    if (roll < 0.6) return JSON.stringify(pick(texts));
    if (roll < 0.7) return pick(['true', 'false', 'null']);
    if (depth > 2) return pick(numbers);
    if (roll < 0.85) return `[${Array.from({ length: Math.floor(r() * 3) }, () => value(depth + 1)).join(', ')}]`;
    return object(depth + 1);
  };
  const object = (depth: number): string => {
    const ks = [...new Set(Array.from({ length: 1 + Math.floor(r() * 3) }, () => pick(keys)))];
    return `{${ks.map((k) => `${JSON.stringify(k)}: ${value(depth)}`).join(', ')}}`;
  };
  const args = (): string => {
    const roll = r();
    if (roll < 0.08) return '""';
    if (roll < 0.12) return 'null';
    if (roll < 0.16) return JSON.stringify('{}');
    if (roll < 0.2) return JSON.stringify('{"city": ');
    return JSON.stringify(object(0));
  };
  const tool = (name: string): string => {
    const described = r() < 0.5 ? `"description": ${JSON.stringify(pick(texts))}, ` : '';
    const strict = r() < 0.3 ? ', "strict": true' : '';
    return `{"type": "function", "function": {"name": "${name}", ${described}"parameters": {"type": "object", "properties": {"days": {"type": "number", "minimum": ${pick(['0', '1', '0.5', '1.0'])}}}}${strict}}}`;
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

for (const [name, template] of [['walking', walking], ['qwen3', undefined]] as const) {
  void test(`tool chats (${name} template): ${seeds.length} generated bodies render as vLLM renders them, or say they cannot`, async () => {
    const m = await model();
    const cfg = template === undefined ? m.template : templateConfigOf({ chat_template: template, eos_token: '<|im_end|>' });
    const local: TokenizerModel = { ...m, template: cfg };
    const bodies = seeds.map(generate);
    const theirs = vllm(cfg.template, bodies);
    const enc = new IncrementalEncoder(local, { cacheBytes: 16 << 20, selfChecks: 0 });
    let exact = 0;
    let notExact = 0;
    for (const [i, text] of bodies.entries()) {
      const want = theirs[i];
      const why = `seed ${seeds[i] ?? ''}: ${text}`;
      let parts: readonly string[];
      try {
        parts = promptTextOf('chat', JSON.parse(text), local, Buffer.from(text)).parts;
      } catch (e) {
        if (e instanceof NotExactHere) {
          notExact++;
          continue;
        }
        // What vLLM refuses is refused here too.
        assert.ok(e instanceof ChatError && typeof want === 'object', `${why}: ${String(e)}`);
        continue;
      }
      assert.equal(typeof want, 'string', `${why}: vLLM refused it: ${JSON.stringify(want)}`);
      assert.equal(parts.join(''), want, why);
      // The ids follow from the text; encoded by pieces as the router does, against Python's text whole.
      assert.deepEqual(await enc.encode(parts, false), await m.encodeWhole(String(want), false), why);
      exact++;
    }
    console.log(`${name}: ${exact} bodies rendered here exactly as vLLM, ${notExact} sent to the engine's /tokenize (not exact here), ${bodies.length - exact - notExact} refused as vLLM refuses them`);
    assert.ok(exact > seeds.length / 3, 'most bodies render here');
  });
}
