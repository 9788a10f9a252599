// The GGUF writer and reader agree with each other and with gguf.h's layout, and the tiny qwen3
// model carries Qwen3's tokenizer the way llama.cpp's own converter writes it.
import { strict as assert } from 'node:assert';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { encodeGguf, HeaderTooShort, readGgufHeader, tinyQwen3File, tinyQwen3Shape, toHalf, type GgufValue } from '../../src/gguf/index.js';
import { qwen3TokenizerFile } from '../../src/tokenize/index.js';

const concat = (chunks: readonly Uint8Array[]): Uint8Array => Buffer.concat(chunks);

void test('gguf: metadata and tensor descriptors read back as written, data at aligned offsets', () => {
  const metadata = new Map<string, GgufValue>([
    ['general.architecture', { type: 'string', value: 'qwen3' }],
    ['n', { type: 'u32', value: 7 }],
    ['eps', { type: 'f32', value: 0.5 }],
    ['flag', { type: 'bool', value: true }],
    ['big', { type: 'u64', value: 1n << 40n }],
    ['words', { type: 'array', of: 'string', value: ['a', 'Ġb', '<|im_end|>'] }],
    ['ids', { type: 'array', of: 'i32', value: Int32Array.of(1, -2, 3) }],
  ]);
  const a = { name: 'a', dims: [3], type: 'f32' as const, data: new Uint8Array(Float32Array.of(1, 2, 3).buffer) };
  const b = { name: 'b', dims: [2, 2], type: 'f16' as const, data: new Uint8Array(Uint16Array.of(1, 2, 3, 4).buffer) };
  const bytes = concat(encodeGguf(metadata, [a, b]));
  assert.equal(Buffer.from(bytes.subarray(0, 4)).toString('latin1'), 'GGUF');
  const h = readGgufHeader(bytes);
  assert.equal(h.version, 3);
  assert.deepEqual([...h.metadata.keys()], [...metadata.keys()]);
  assert.deepEqual(h.metadata.get('words'), metadata.get('words'));
  assert.deepEqual(h.metadata.get('big'), { type: 'u64', value: 1n << 40n });
  assert.deepEqual(h.tensors.map((t) => [t.name, t.dims, t.ggmlType, t.offset]), [['a', [3n], 0, 0n], ['b', [2n, 2n], 1, 32n]]);
  // The data section starts at the first multiple of 32 after the header; each tensor is padded to 32.
  assert.equal(h.dataOffset % 32, 0);
  assert.equal(bytes.length, h.dataOffset + 64);
  assert.deepEqual([...new Float32Array(new Uint8Array(bytes.subarray(h.dataOffset, h.dataOffset + 12)).buffer)], [1, 2, 3]);
});

void test('gguf: a truncated header says how much more it needs; a file that is not GGUF is refused', () => {
  const bytes = concat(encodeGguf(new Map([['k', { type: 'string', value: 'x'.repeat(100) }]]), []));
  assert.throws(() => readGgufHeader(bytes.subarray(0, 40)), (e: unknown) => e instanceof HeaderTooShort && e.needBytes > 40);
  assert.throws(() => readGgufHeader(Buffer.from('PK\x03\x04 a zip file, not a model')), /not a GGUF file/);
});

const halves = [
  { why: 'one', x: 1, want: 0x3c00 },
  { why: 'a negative power of two', x: -2, want: 0xc000 },
  { why: 'a tenth rounds to nearest', x: 0.1, want: 0x2e66 },
  { why: 'the largest half', x: 65504, want: 0x7bff },
  { why: 'a subnormal', x: 1e-5, want: 0x00a8 },
  { why: 'zero', x: 0, want: 0 },
];
for (const r of halves) void test(`gguf: toHalf of ${r.why}`, () => assert.equal(toHalf(r.x), r.want));

void test('gguf: the tiny qwen3 model is made once, holds Qwen3 tokenizer and template, and is reused', async (t) => {
  const cacheDir = mkdtempSync(join(tmpdir(), 'llmgw-gguf-'));
  t.after(() => rmSync(cacheDir, { recursive: true, force: true }));
  const tokenizerDir = dirname(qwen3TokenizerFile());
  const first = await tinyQwen3File({ cacheDir, tokenizerDir });
  assert.equal(first.made, true);
  const again = await tinyQwen3File({ cacheDir, tokenizerDir });
  assert.deepEqual(again, { path: first.path, made: false });
  // Another shape is another file: a changed input never reuses a stale model.
  assert.notEqual((await tinyQwen3File({ cacheDir, tokenizerDir, shape: { ...tinyQwen3Shape, layers: 1, embedding: 8, heads: 2, kvHeads: 1, feedForward: 8 } })).path, first.path);

  const bytes = readFileSync(first.path);
  const h = readGgufHeader(bytes);
  const md = h.metadata;
  const hf = JSON.parse(readFileSync(join(tokenizerDir, 'tokenizer.json'), 'utf8')) as { model: { vocab: Record<string, number>; merges: string[][] } };
  const tokens = md.get('tokenizer.ggml.tokens');
  assert.ok(tokens?.type === 'array' && tokens.of === 'string');
  assert.equal(tokens.value.length, Object.keys(hf.model.vocab).length + 26);
  assert.equal(tokens.value[14990], 'hello');
  assert.equal(tokens.value[151644], '<|im_start|>');
  const types = md.get('tokenizer.ggml.token_type');
  assert.ok(types?.type === 'array' && types.of === 'i32');
  assert.equal(types.value[151644], 3, '<|im_start|> is a control token');
  assert.equal(types.value[14990], 1);
  const merges = md.get('tokenizer.ggml.merges');
  assert.ok(merges?.type === 'array' && merges.of === 'string');
  assert.equal(merges.value[0], hf.model.merges[0]?.join(' '));
  assert.deepEqual(md.get('tokenizer.ggml.pre'), { type: 'string', value: 'qwen2' });
  assert.deepEqual(md.get('tokenizer.ggml.eos_token_id'), { type: 'u32', value: 151645 });
  const template = md.get('tokenizer.chat_template');
  assert.ok(template?.type === 'string' && template.value.includes('<|im_start|>'));
  assert.deepEqual(md.get('qwen3.block_count'), { type: 'u32', value: tinyQwen3Shape.layers });
  // Tied embeddings: no output.weight, and the embedding spans the whole vocabulary.
  assert.equal(h.tensors.find((x) => x.name === 'output.weight'), undefined);
  assert.deepEqual(h.tensors.find((x) => x.name === 'token_embd.weight')?.dims, [BigInt(tinyQwen3Shape.embedding), BigInt(tokens.value.length)]);
  // The last tensor ends the file, padded to the alignment: the loader checks the data section's size.
  const last = h.tensors.at(-1);
  assert.ok(last !== undefined);
  const lastBytes = Number(last.dims.reduce((n, d) => n * d, 1n)) * (last.ggmlType === 0 ? 4 : 2);
  assert.equal(statSync(first.path).size, h.dataOffset + Number(last.offset) + Math.ceil(lastBytes / 32) * 32);
});
