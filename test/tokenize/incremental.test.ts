// The local tokenizer the router trusts must give the engine's ids exactly. For many generated
// conversations, each turn as a client resends it: the ids encoded piece by piece through one
// shared segment cache equal a whole encode of the rendered text, and equal the sim's /tokenize;
// the rendering equals Python's jinja2 with transformers' environment on the same inputs.
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { request } from 'undici';
import { resolveSimOptions, startSim } from '../../src/sim/index.js';
import {
  byteModel,
  chatInputOf,
  hfModel,
  IncrementalEncoder,
  promptTextOf,
  qwen3TokenizerFile,
  renderChat,
  templateMode,
  type TokenizerModel,
} from '../../src/tokenize/index.js';
import { repoRoot } from '../support/shared.js';
import { conversation, turnsOf, type ChatBody } from './conversations.js';

const seeds = Array.from({ length: 40 }, (_, i) => 1000 + i);
const bodies: { seed: number; body: ChatBody }[] = seeds.flatMap((seed) =>
  turnsOf(conversation(seed, { maxTurns: 8, longDocChars: seed % 10 === 0 ? 60_000 : 0 })).map((body) => ({ seed, body })),
);

let qwen3: Promise<TokenizerModel> | undefined;
const model = (): Promise<TokenizerModel> => (qwen3 ??= hfModel('qwen3'));

void test('qwen3: its pieces between added tokens encode apart (NFC, ByteLevel, no stripping tokens)', async () => {
  assert.equal((await model()).dependent, undefined);
});

for (const [name, load] of [['qwen3', model], ['bytes', () => Promise.resolve(byteModel())]] as const) {
  void test(`${name}: every turn of ${seeds.length} generated conversations encodes by pieces exactly as whole`, async () => {
    const m = await load();
    // One encoder for all, as one worker serves every request: the cache carries turns over.
    const enc = new IncrementalEncoder(m, { cacheBytes: 64 * 1024 * 1024, selfChecks: 0 });
    for (const { seed, body } of bodies) {
      const p = promptTextOf('chat', body, m);
      const pieces = await enc.encode(p.parts, p.addSpecialTokens);
      const whole = await m.encodeWhole(p.parts.join(''), p.addSpecialTokens);
      assert.deepEqual(pieces, whole, `seed ${seed}, ${body.messages.length} messages`);
    }
    assert.equal(enc.stats.broken, undefined);
    // A next turn takes the turn before's ids whole; pieces seen elsewhere come from the cache.
    assert.ok(enc.stats.extended > 0, 'later turns extend the turn before');
    assert.ok(enc.cache.stats.hitChars + enc.stats.extendedChars > enc.cache.stats.missChars, 'later turns mostly come from earlier work');
  });
}

void test('qwen3: completions prompts, with and without special tokens, encode by pieces exactly as whole', async () => {
  const m = await model();
  const enc = new IncrementalEncoder(m, { cacheBytes: 1 << 20, selfChecks: 0 });
  for (const { body } of bodies.slice(0, 30)) {
    const text = JSON.stringify(body.messages) + '<|im_start|>user\nhi<|im_end|>';
    for (const add of [true, false]) {
      const p = promptTextOf('completions', { prompt: text, add_special_tokens: add }, m);
      assert.deepEqual(await enc.encode(p.parts, p.addSpecialTokens), await m.encodeWhole(text, add));
    }
  }
});

void test("qwen3: the ids equal the sim's /tokenize for every generated conversation", async (t) => {
  const sim = await startSim(resolveSimOptions({ model: 'qwen3', servedModelNames: ['qwen3'], host: '127.0.0.1', port: 0, tokenizer: 'qwen3', hashSeed: '0' }));
  t.after(() => sim.close());
  await sim.ready;
  const m = await model();
  const enc = new IncrementalEncoder(m, { cacheBytes: 64 * 1024 * 1024, selfChecks: 0 });
  for (const { seed, body } of bodies) {
    const p = promptTextOf('chat', body, m);
    const ours = [...(await enc.encode(p.parts, p.addSpecialTokens))];
    const res = await request(new URL('/tokenize', sim.url), { method: 'POST', body: JSON.stringify(body), headers: { 'content-type': 'application/json' }, signal: AbortSignal.timeout(30_000) });
    const answer = (await res.body.json()) as { tokens?: number[] };
    assert.equal(res.statusCode, 200, `seed ${seed}: ${JSON.stringify(answer)}`);
    assert.deepEqual(ours, answer.tokens, `seed ${seed}, ${body.messages.length} messages`);
  }
});

void test("rendering equals Python's jinja2 (transformers' environment) on every generated conversation", async () => {
  const cfgFile = join(dirname(qwen3TokenizerFile()), 'tokenizer_config.json');
  const cfg = JSON.parse(readFileSync(cfgFile, 'utf8')) as { chat_template: string };
  const m = await model();
  const cases = bodies.map(({ body }) => {
    const input = chatInputOf(body);
    return {
      messages: input.messages,
      tools: input.tools ?? null,
      add_generation_prompt: input.addGenerationPrompt,
      continue_final_message: input.continueFinalMessage,
      kwargs: input.chatTemplateKwargs ?? {},
    };
  });
  const script = join(repoRoot, 'test', 'tokenize', 'fixtures', 'render_jinja2.py');
  const out = execFileSync('/usr/bin/python3', [script], {
    input: JSON.stringify({ template: cfg.chat_template, special_tokens: m.template.specialTokens, cases }),
    maxBuffer: 256 * 1024 * 1024,
    timeout: 60_000,
  });
  const python = JSON.parse(out.toString('utf8')) as string[];
  assert.equal(python.length, bodies.length);
  bodies.forEach(({ seed, body }, i) => {
    const input = chatInputOf(body);
    assert.equal(renderChat(m.template, input.messages, input), python[i], `seed ${seed}, ${body.messages.length} messages`);
  });
  // Past its first self-checked renders, the template rendered compiled: jinja2 checked that form.
  assert.equal(templateMode(cfg.chat_template).mode, 'compiled');
});

void test('selfChecksLeft: each text up to the self-check bound spends one whole-text check; a longer text, none', async () => {
  let wholes = 0;
  const m = byteModel();
  const counted: TokenizerModel = { ...m, encodeWhole: (text, add) => (wholes++, m.encodeWhole(text, add)) };
  const enc = new IncrementalEncoder(counted, { cacheBytes: 1 << 20, selfChecks: 2 });
  assert.equal(enc.selfChecksLeft, 2);
  await enc.encode('x'.repeat(40_000), false);
  assert.equal(enc.selfChecksLeft, 2, 'a text over the bound is not checked');
  await enc.encode('first', false);
  await enc.encode('second', false);
  await enc.encode('third', false);
  assert.equal(enc.selfChecksLeft, 0);
  assert.equal(wholes, 2);
});
