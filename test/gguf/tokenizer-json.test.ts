// A llama.cpp model's tokenizer rebuilt from its GGUF: the tiny model's vocabulary, merges and
// template are Qwen3's, its ids are Qwen3's where llama.cpp's are (no NFC: llama.cpp does not
// normalize), and a tokenizer that cannot be rebuilt exactly is refused with the reason.
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { ggufTokenizer, readGgufHeaderFile, type GgufValue } from '../../src/gguf/index.js';
import { ggufModel, hfModel, qwen3TokenizerFile } from '../../src/tokenize/index.js';
import { tinyModel } from '../support/llamacpp.js';

const qwen3Dir = dirname(qwen3TokenizerFile());

void test('gguf tokenizer: the tiny model holds Qwen3 vocabulary, merges and chat template', async () => {
  const h = await readGgufHeaderFile(await tinyModel());
  const g = ggufTokenizer(h.metadata);
  const hf = JSON.parse(readFileSync(qwen3TokenizerFile(), 'utf8')) as { model: { vocab: Record<string, number>; merges: unknown[] }; added_tokens: unknown[] };
  const cfg = JSON.parse(readFileSync(join(qwen3Dir, 'tokenizer_config.json'), 'utf8')) as { chat_template: string };
  assert.equal(g.vocabularySize, Object.keys(hf.model.vocab).length + hf.added_tokens.length);
  assert.equal(g.vocabularySize, 151_669);
  assert.equal(g.mergeCount, hf.model.merges.length);
  assert.equal(g.chatTemplate, cfg.chat_template);
  assert.deepEqual(g.specialTokens, { bos_token: '<|endoftext|>', eos_token: '<|im_end|>' });
  // No normalizer: llama.cpp runs none, whatever the original tokenizer.json had.
  assert.equal(g.tokenizerJson.normalizer, null);
});

void test('gguf tokenizer: ids equal Qwen3\'s own, except where Qwen3 normalizes to NFC and llama.cpp does not', async () => {
  const gguf = await ggufModel(await tinyModel());
  const qwen3 = await hfModel('qwen3');
  assert.equal(gguf.template.template, qwen3.template.template);
  assert.deepEqual(gguf.pieceEncoder, { name: 'bpe' }, 'our byte-level BPE encodes its pieces');
  for (const text of ['Hello, world!', 'naïve café, 日本語 and 🙂 emoji', "<|im_start|>user\nwhat's 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", '  spaces\t\tand\n\n\nnewlines  ']) {
    assert.deepEqual(await gguf.encodeWhole(text, true), await qwen3.encodeWhole(text, true), text);
    assert.deepEqual((await gguf.encodePieces([text.replace(/<[^>]*>/g, '')]))[0], (await qwen3.encodePieces([text.replace(/<[^>]*>/g, '')]))[0], text);
  }
  const decomposed = 'cafe\u0301';
  // Qwen3's tokenizer.json composes "e" and the accent into "é" first; llama.cpp, and so the GGUF's
  // tokenizer, encodes the two code points as they came (the real-engine test checks llama-server).
  assert.deepEqual(await qwen3.encodeWhole(decomposed, false), await qwen3.encodeWhole('café', false));
  assert.notDeepEqual(await gguf.encodeWhole(decomposed, false), await qwen3.encodeWhole(decomposed, false));
});

const base = (over: Record<string, GgufValue | undefined>): Map<string, GgufValue> => {
  const md = new Map<string, GgufValue>([
    ['tokenizer.ggml.model', { type: 'string', value: 'gpt2' }],
    ['tokenizer.ggml.pre', { type: 'string', value: 'qwen2' }],
    ['tokenizer.ggml.tokens', { type: 'array', of: 'string', value: ['a', 'b', 'ab', '<s>'] }],
    ['tokenizer.ggml.token_type', { type: 'array', of: 'i32', value: Int32Array.of(1, 1, 1, 3) }],
    ['tokenizer.ggml.merges', { type: 'array', of: 'string', value: ['a b'] }],
    ['tokenizer.ggml.bos_token_id', { type: 'u32', value: 3 }],
  ]);
  for (const [k, v] of Object.entries(over)) {
    if (v === undefined) md.delete(k);
    else md.set(k, v);
  }
  return md;
};

const refusals: readonly { why: string; over: Record<string, GgufValue | undefined>; want: RegExp }[] = [
  { why: 'a SentencePiece model', over: { 'tokenizer.ggml.model': { type: 'string', value: 'llama' } }, want: /tokenizer\.ggml\.model is "llama"; only "gpt2"/ },
  { why: 'an unknown pre-tokenizer', over: { 'tokenizer.ggml.pre': { type: 'string', value: 'llama-bpe' } }, want: /tokenizer\.ggml\.pre is "llama-bpe"; the gateway knows llama\.cpp's split for qwen2/ },
  { why: 'no pre-tokenizer (llama.cpp\'s "default")', over: { 'tokenizer.ggml.pre': undefined }, want: /tokenizer\.ggml\.pre is "default"/ },
  { why: 'no merges', over: { 'tokenizer.ggml.merges': undefined }, want: /tokenizer\.ggml\.merges is missing/ },
  { why: 'token types of another length', over: { 'tokenizer.ggml.token_type': { type: 'array', of: 'i32', value: Int32Array.of(1) } }, want: /token_type is not an array of 4 i32/ },
  { why: 'a merge without a space', over: { 'tokenizer.ggml.merges': { type: 'array', of: 'string', value: ['ab'] } }, want: /merges\[0\] is "ab", not "left right"/ },
  { why: 'a BOS id past the vocabulary', over: { 'tokenizer.ggml.bos_token_id': { type: 'u32', value: 9 } }, want: /bos_token_id is 9, not a token id below 4/ },
  { why: 'a token twice', over: { 'tokenizer.ggml.tokens': { type: 'array', of: 'string', value: ['a', 'b', 'a', '<s>'] } }, want: /holds "a" twice \(ids 0 and 2\)/ },
];

for (const r of refusals) {
  void test(`gguf tokenizer: ${r.why} is refused, and local tokenizing stays off`, () => {
    assert.throws(
      () => ggufTokenizer(base(r.over)),
      (e: unknown) => e instanceof Error && 'code' in e && e.code === 'LLMGW_GGUF_TOKENIZER' && r.want.test(e.message) && /local tokenizing stays off for this model/.test(e.message),
    );
  });
}

void test('gguf tokenizer: a file that asks for a BOS gets it before the text, as llama.cpp adds it', () => {
  const g = ggufTokenizer(base({ 'tokenizer.ggml.add_bos_token': { type: 'bool', value: true } }));
  assert.deepEqual((g.tokenizerJson.post_processor as { single: unknown[] }).single, [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }]);
  assert.equal((ggufTokenizer(base({})).tokenizerJson.post_processor as { type: string }).type, 'ByteLevel');
});
