// A chat body that begins with an earlier one is parsed from where its messages part ways: for many
// generated conversations, every turn, edits, odd spacing and escapes included, the result equals
// JSON.parse of the whole body, and the limits hold exactly as for a whole parse.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { prng } from '../../src/e2e/index.js';
import { hasCode } from '../../src/errors/index.js';
import { ChatBodyParser } from '../../src/limits/index.js';

const limits = { maxDepth: 64, maxBytes: 64 * 1024 * 1024 };
const pieces = ['plain words', 'quotes " and \\ backslashes', 'unicode Zürich 日本語 🚀', 'a "messages" string', '{"not": ["json", 1]}', '\n\t\u0000 control', 'é'];

function content(rand: () => number, chars: number): unknown {
  let s = '';
  while (s.length < chars) s += (pieces[Math.floor(rand() * pieces.length)] ?? '') + ' ';
  // Now and then a list of parts, so messages nest deeper than a string.
  return rand() < 0.2 ? [{ type: 'text', text: s }, { type: 'text', text: 'more' }] : s;
}

// The client's own serialisation: key order, spacing and fields around "messages" vary by seed.
function serialise(rand: () => number, body: { model: string; messages: unknown[] }, after: Record<string, unknown>): Buffer {
  const space = rand() < 0.3 ? 2 : undefined;
  const ordered = rand() < 0.5 ? { model: body.model, messages: body.messages, ...after } : { model: body.model, stream: true, messages: body.messages, ...after };
  return Buffer.from(JSON.stringify(ordered, null, space));
}

void test('every turn of generated conversations parses as JSON.parse does, later turns from the turn before', () => {
  const parser = new ChatBodyParser({ limits, minBytes: 1024 });
  let extended = 0;
  for (let seed = 1; seed <= 30; seed++) {
    const rand = prng(seed);
    const messages: unknown[] = [{ role: 'system', content: `system prompt ${seed % 3} ${'shared '.repeat(60)}` }];
    const after = rand() < 0.5 ? { max_tokens: 16, tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }] } : {};
    for (let turn = 0; turn < 6; turn++) {
      messages.push({ role: 'user', content: content(rand, 200 + Math.floor(rand() * 3000)) });
      // Sometimes a client edits an earlier message: only the messages before it are shared.
      if (turn > 2 && rand() < 0.2) messages[1] = { role: 'user', content: 'edited' };
      const raw = serialise(rand, { model: 'm', messages }, after);
      assert.deepEqual(parser.parse(raw), JSON.parse(raw.toString('utf8')), `seed ${seed} turn ${turn}`);
      if (parser.last.how === 'extended') extended++;
      messages.push({ role: 'assistant', content: content(rand, 100 + Math.floor(rand() * 1000)) });
    }
  }
  assert.ok(extended > 60, `${extended} of 180 bodies extended an earlier one`);
});

void test('a body that only looks like a next turn is parsed whole: a second "messages", other fields first', () => {
  const parser = new ChatBodyParser({ limits, minBytes: 0 });
  const first = { model: 'm', messages: [{ role: 'user', content: 'x'.repeat(300) }] };
  parser.parse(Buffer.from(JSON.stringify(first)));
  const twice = Buffer.from(`${JSON.stringify(first).slice(0, -2)}],"messages":[{"role":"user","content":"later wins"}]}`);
  assert.deepEqual(parser.parse(twice), JSON.parse(twice.toString()));
  const standIn = Buffer.from(`${JSON.stringify(first).slice(0, -2)}],"\\u0000llmgw-rest":[1]}`);
  assert.deepEqual(parser.parse(standIn), JSON.parse(standIn.toString()));
});

void test('the rest of an extended body is held to the same limits and grammar as a whole body', () => {
  const parser = new ChatBodyParser({ limits: { maxDepth: 8, maxBytes: 100_000 }, minBytes: 0 });
  const first = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'y'.repeat(300) }] });
  parser.parse(Buffer.from(first));
  const open = first.slice(0, -2);
  const deep = Buffer.from(`${open},{"role":"user","content":${'['.repeat(8)}${']'.repeat(8)}}]}`);
  assert.throws(() => parser.parse(deep), (e: unknown) => hasCode(e, 'LLMGW_JSON_LIMIT'));
  const broken = Buffer.from(`${open},{"role":"user","content":"unterminated}]}`);
  assert.throws(() => parser.parse(broken), (e: unknown) => hasCode(e, 'LLMGW_BAD_JSON'));
  const big = Buffer.from(`${open},{"role":"user","content":"${'z'.repeat(100_000)}"}]}`);
  assert.throws(() => parser.parse(big), (e: unknown) => hasCode(e, 'LLMGW_JSON_LIMIT'));
  const fine = Buffer.from(`${open},{"role":"assistant","content":"ok"}]}`);
  assert.deepEqual(parser.parse(fine), JSON.parse(fine.toString()));
  assert.equal(parser.last.how, 'extended');
});

void test('kept bodies are bounded in bytes: with room for none, every body is parsed whole', () => {
  const parser = new ChatBodyParser({ limits, minBytes: 0, maxBytes: 100 });
  const body = { model: 'm', messages: [{ role: 'user', content: 'w'.repeat(300) }] };
  parser.parse(Buffer.from(JSON.stringify(body)));
  body.messages.push({ role: 'assistant', content: 'a' });
  parser.parse(Buffer.from(JSON.stringify(body)));
  assert.equal(parser.last.how, 'whole');
});
