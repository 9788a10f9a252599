// A GGUF header read from a file the gateway was pointed at: only the header's bytes are read, a
// hostile or broken header is refused with an error that says what is wrong, and what we read equals
// what llama.cpp's own Python reader (gguf-py, from the pinned source) reads from the same file.
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { encodeGguf, readGgufHeaderFile, type GgufValue } from '../../src/gguf/index.js';
import { tinyModel } from '../support/llamacpp.js';
import { sharedDir } from '../support/shared.js';

function tempDir(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-gguf-header-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

// A header written by hand, field by field, for the files our writer would never make.
class Bytes {
  readonly parts: Buffer[] = [];
  u32(v: number): this {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v);
    this.parts.push(b);
    return this;
  }
  u64(v: bigint): this {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(v);
    this.parts.push(b);
    return this;
  }
  str(s: string): this {
    const b = Buffer.from(s, 'utf8');
    return this.u64(BigInt(b.length)).raw(b);
  }
  raw(b: Buffer): this {
    this.parts.push(b);
    return this;
  }
  done(): Buffer {
    return Buffer.concat(this.parts);
  }
}

const header = (tensors: bigint, kvs: bigint): Bytes => new Bytes().raw(Buffer.from('GGUF')).u32(3).u64(tensors).u64(kvs);
const STRING = 8;
const ARRAY = 9;

const hostile: readonly { why: string; bytes: () => Buffer; want: RegExp }[] = [
  { why: 'a zip file', bytes: () => Buffer.from('PK\x03\x04 a zip file, not a model, padded out a little'), want: /not a GGUF file: it starts with 0x04034b50/ },
  { why: 'GGUF version 1', bytes: () => new Bytes().raw(Buffer.from('GGUF')).u32(1).u64(0n).u64(0n).done(), want: /GGUF version 1; this reader knows 2 and 3/ },
  { why: 'a metadata count of 2^60', bytes: () => header(0n, 1n << 60n).done(), want: /ends inside the metadata count.*the file has 24; it is truncated or corrupt/ },
  { why: 'a key 2^40 bytes long', bytes: () => header(0n, 1n).u64(1n << 40n).raw(Buffer.alloc(32, 'k')).done(), want: /ends inside a string.*truncated or corrupt/ },
  { why: 'an array of arrays', bytes: () => header(0n, 1n).str('nested').u32(ARRAY).u32(ARRAY).u64(1n).u32(ARRAY).u64(0n).done(), want: /array of arrays, which gguf\.h does not allow/ },
  { why: 'an array of an unknown type', bytes: () => header(0n, 1n).str('odd').u32(ARRAY).u32(99).u64(1n).done(), want: /holds value type 99, not one gguf\.h defines/ },
  { why: 'a value of an unknown type', bytes: () => header(0n, 1n).str('odd').u32(42).done(), want: /GGUF value type 42 is not one gguf\.h defines/ },
  { why: 'a key twice', bytes: () => header(0n, 2n).str('k').u32(STRING).str('a').str('k').u32(STRING).str('b').done(), want: /key "k" appears twice/ },
  { why: 'a tensor of 9 dimensions', bytes: () => header(1n, 0n).str('t').u32(9).raw(Buffer.alloc(9 * 8 + 12)).done(), want: /tensor "t" has 9 dimensions; ggml allows at most 4/ },
  { why: 'an alignment of 3', bytes: () => header(0n, 1n).str('general.alignment').u32(4).u32(3).done(), want: /general\.alignment is 3, not a power of two/ },
];

for (const h of hostile) {
  void test(`gguf header file: ${h.why} is refused, saying why`, async (t) => {
    const path = join(tempDir(t), 'model.gguf');
    writeFileSync(path, h.bytes());
    await assert.rejects(readGgufHeaderFile(path), (e: unknown) => e instanceof Error && 'code' in e && e.code === 'LLMGW_GGUF_FORMAT' && h.want.test(e.message) && e.message.includes(path));
  });
}

void test('gguf header file: a missing file, and a header larger than the bound, are refused', async (t) => {
  const dir = tempDir(t);
  await assert.rejects(readGgufHeaderFile(join(dir, 'none.gguf')), /none\.gguf: cannot open it \(ENOENT\); give the path of a GGUF file/);
  const path = join(dir, 'big.gguf');
  writeFileSync(path, Buffer.concat(encodeGguf(new Map([['k', { type: 'string', value: 'x'.repeat(10_000) }]]), [])));
  await assert.rejects(readGgufHeaderFile(path, { maxHeaderBytes: 4096 }), /header is larger than 4096 bytes/);
});

void test('gguf header file: only the header is read, not the gigabytes of tensor data after it', async (t) => {
  const path = join(tempDir(t), 'sparse.gguf');
  const metadata = new Map<string, GgufValue>([['tokenizer.ggml.tokens', { type: 'array', of: 'string', value: Array.from({ length: 50_000 }, (_, i) => `token${i}`) }]]);
  const tensor = { name: 'w', dims: [4], type: 'f32' as const, data: new Uint8Array(16) };
  writeFileSync(path, Buffer.concat(encodeGguf(metadata, [tensor])));
  // A sparse 64 GiB file: reading it whole would fail (no buffer that big), reading the header does not.
  truncateSync(path, 64 * 1024 ** 3);
  const h = await readGgufHeaderFile(path);
  const tokens = h.metadata.get('tokenizer.ggml.tokens');
  assert.ok(tokens?.type === 'array' && tokens.of === 'string');
  assert.equal(tokens.value.length, 50_000);
  assert.equal(tokens.value[49_999], 'token49999');
  assert.deepEqual(h.tensors.map((x) => x.name), ['w']);
});

// gguf-py from the pinned llama.cpp source, run by Debian's python3 with its numpy (.ci/run installs
// python3-numpy, as it does the other Python cross-checks' modules).
const python = '/usr/bin/python3';
function ggufPy(t: TestContext): string {
  const dir = join(sharedDir, 'engines', 'llama.cpp');
  const tarball = readdirSync(dir).find((n) => n.endsWith('-src.tar.gz'));
  if (tarball === undefined) throw new Error(`no llama.cpp source tarball in ${dir}`);
  const out = tempDir(t);
  execFileSync('tar', ['xzf', join(dir, tarball), '-C', out, '--strip-components=1', '--wildcards', '*/gguf-py/gguf/*']);
  return join(out, 'gguf-py');
}

// What gguf-py reads of the tokenizer keys: counts, ends, the ids and the template.
const pyDump = `
import json, sys
from gguf import GGUFReader
r = GGUFReader(sys.argv[1])
def val(name):
    f = r.fields[name]
    return f.contents()
toks = r.fields['tokenizer.ggml.tokens']
merges = r.fields['tokenizer.ggml.merges']
types = val('tokenizer.ggml.token_type')
print(json.dumps({
  'keys': list(r.fields.keys()),
  'tokens': len(toks.data), 'firstToken': val('tokenizer.ggml.tokens')[0], 'lastToken': toks.contents(len(toks.data) - 1),
  'merges': len(merges.data), 'lastMerge': merges.contents(len(merges.data) - 1),
  'typeSum': int(sum(types)), 'pre': val('tokenizer.ggml.pre'), 'eos': int(val('tokenizer.ggml.eos_token_id')),
  'template': val('tokenizer.chat_template'),
  'tensors': [[x.name, [int(d) for d in x.shape], int(x.tensor_type), int(x.data_offset)] for x in r.tensors],
}))
`;

void test('gguf header file: the tiny model reads as llama.cpp\'s gguf-py reads it', async (t) => {
  const py = ggufPy(t);
  const path = await tinyModel();
  const theirs = JSON.parse(execFileSync(python, ['-c', pyDump, path], { env: { ...process.env, PYTHONPATH: py }, maxBuffer: 64 * 1024 * 1024 }).toString('utf8')) as Record<string, unknown>;
  const h = await readGgufHeaderFile(path);
  const md = h.metadata;
  const arr = (k: string): readonly string[] => {
    const v = md.get(k);
    assert.ok(v?.type === 'array' && v.of === 'string');
    return v.value;
  };
  const types = md.get('tokenizer.ggml.token_type');
  assert.ok(types?.type === 'array' && types.of === 'i32');
  const pre = md.get('tokenizer.ggml.pre');
  const eos = md.get('tokenizer.ggml.eos_token_id');
  const template = md.get('tokenizer.chat_template');
  // gguf-py lists the header's three counts as fields too.
  assert.deepEqual(theirs.keys, ['GGUF.version', 'GGUF.tensor_count', 'GGUF.kv_count', ...md.keys()]);
  assert.deepEqual(
    { tokens: theirs.tokens, firstToken: theirs.firstToken, lastToken: theirs.lastToken, merges: theirs.merges, lastMerge: theirs.lastMerge, typeSum: theirs.typeSum, pre: theirs.pre, eos: theirs.eos, template: theirs.template },
    {
      tokens: arr('tokenizer.ggml.tokens').length,
      firstToken: arr('tokenizer.ggml.tokens')[0],
      lastToken: arr('tokenizer.ggml.tokens').at(-1),
      merges: arr('tokenizer.ggml.merges').length,
      lastMerge: arr('tokenizer.ggml.merges').at(-1),
      typeSum: types.value.reduce((a, b) => a + b, 0),
      pre: pre?.type === 'string' ? pre.value : undefined,
      eos: eos?.type === 'u32' ? eos.value : undefined,
      template: template?.type === 'string' ? template.value : undefined,
    },
  );
  // gguf-py gives offsets from the file's start.
  assert.deepEqual(
    theirs.tensors,
    h.tensors.map((x) => [x.name, x.dims.map(Number), x.ggmlType, h.dataOffset + Number(x.offset)]),
  );
});
