// Our byte-level BPE must give tokenizers' ids for every text, or not be used. Held against
// tokenizers itself (no mocks) on many generated texts for Qwen3's tokenizer.json and for variants
// with Llama 3's and GPT-2's splits; every shape it does not know goes to tokenizers with a reason;
// and a model whose ids turn out to differ goes back to tokenizers at the first difference.
import { strict as assert } from 'node:assert';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { Tokenizer } from 'tokenizers';
import { prng } from '../../src/e2e/index.js';
import { byteLevelBpeOf, type ByteLevelBpe } from '../../src/tokenize/byte-level-bpe.js';
import { byteModel, firstDifference, hfModel, piecesModelOf, piecesSnapshotOf, qwen3TokenizerFile } from '../../src/tokenize/index.js';
import { checkedPieces, PieceEncoderNews, type PieceEncoder, type TokenizerModel } from '../../src/tokenize/model.js';

const qwen3Text = readFileSync(qwen3TokenizerFile(), 'utf8');
type Json = Record<string, unknown> & { model: Record<string, unknown> & { vocab: Record<string, number>; merges: readonly unknown[] } };
const qwen3 = JSON.parse(qwen3Text) as Json;
const qwen3Merges = qwen3.model.merges as readonly [string, string][];

// Llama 3's split (digits in threes) and its ignore_merges, merges written as "a b", no normalizer.
const llama3Pattern = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
const llama3Like: Json = {
  ...qwen3,
  normalizer: null,
  pre_tokenizer: {
    type: 'Sequence',
    pretokenizers: [
      { type: 'Split', pattern: { Regex: llama3Pattern }, behavior: 'Isolated', invert: false },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
    ],
  },
  model: { ...qwen3.model, ignore_merges: true, merges: qwen3Merges.map(([a, b]) => `${a} ${b}`) },
};
// GPT-2's: ByteLevel alone, with its own regex.
const gpt2Like: Json = { ...qwen3, normalizer: null, pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true } };

interface Loaded {
  readonly tk: Tokenizer;
  readonly bpe: ByteLevelBpe;
}
const loaded = new Map<string, Loaded>();
function load(name: string, json: Json): Loaded {
  let l = loaded.get(name);
  if (l === undefined) {
    const tk = Tokenizer.fromString(name === 'qwen3' ? qwen3Text : JSON.stringify(json));
    const normalizer = tk.getNormalizer();
    const built = byteLevelBpeOf(json, normalizer === null ? undefined : (t) => normalizer.normalizeString(t));
    assert.ok('bpe' in built, `${name}: ${'reason' in built ? built.reason : ''}`);
    l = { tk, bpe: built.bpe };
    loaded.set(name, l);
  }
  return l;
}

// Generated text: fragments of many kinds, mixed at random, so words meet every kind of neighbour.
const fragments: readonly ((r: () => number) => string)[] = [
  () => 'The quick brown fox jumps over the lazy dog. ',
  () => 'Routing picks the replica holding the longest cached prefix of the prompt, ',
  () => 'function f(x) {\n  return x.map((y) => y * 2); // doubled\n}\n',
  () => '\tif (a && b) {\r\n\t\treturn;\r\n\t}\n',
  () => 'SELECT id, name FROM users WHERE age >= 18;\n',
  () => '{"key": [1, 2.5, -3e10], "nested": {"ok": true}}',
  () => '日本語のテキストと中文文本，还有한국어 문장도 있습니다。',
  () => 'emoji 👩‍👩‍👧‍👦 🏳️‍🌈 👍🏽 🇯🇵 1️⃣ 🚀🦊✨ ',
  () => 'e\u0301 a\u0308\u0301 \u1100\u1161\u11a8 \u212b \u2126 \u0340 क्षि ñ ',
  () => 'مرحبا بالعالم שלום עולם ',
  (r) => [' ', '\t', '\r', '\n', '\r\n', '\u00a0', '\u3000', '\u0085', '\u2028', '\ufeff', '\v', '\f', '\u200b'][Math.floor(r() * 13)] ?? ' ',
  () => "don't DON'T we'LL It'S they'Re I'D you'VE 'ſ it'ſ ’s ''s 'm 'Ll ",
  () => '1234567890 3.14159 1,000,000 ٣٤٥ ½ Ⅻ ① ',
  (r) => String(Math.floor(r() * 1e12)),
  (r) => ' '.repeat(1 + Math.floor(r() * 200)),
  (r) => '\n'.repeat(1 + Math.floor(r() * 5)) + ' '.repeat(Math.floor(r() * 8)),
  // Words longer than the scanning bound merge through the heap.
  (r) => 'a'.repeat(40 + Math.floor(r() * 3000)),
  (r) => 'ab'.repeat(30 + Math.floor(r() * 500)),
  (r) => '漢字'.repeat(20 + Math.floor(r() * 400)),
  (r) => 'x'.repeat(1 + Math.floor(r() * 60)) + 'ing',
  // Letters V8 (Unicode 17) knows and Oniguruma (16) does not, between letters where that splits
  // differently, and Unicode 16 letters both know.
  () => 'a\u088fb c\ua7ced x\u{16ea0}y q\u{323b0}r g\u{10d4a}h k\u{11380}l ',
  (r) => {
    let s = '';
    for (let i = 0; i < 1 + Math.floor(r() * 12); i++) {
      const c = Math.floor(r() * 0x110000);
      // A lone surrogate now and then: the binding and TextEncoder both make it U+FFFD.
      s += c >= 0xd800 && c < 0xe000 && r() < 0.7 ? 'z' : String.fromCodePoint(c);
    }
    return s;
  },
];

function generated(seed: number): string {
  const r = prng(seed);
  let s = '';
  const parts = 1 + Math.floor(r() * 24);
  for (let i = 0; i < parts; i++) s += fragments[Math.floor(r() * fragments.length)]?.(r) ?? '';
  return s;
}

async function assertSameIds(name: string, l: Loaded, seeds: readonly number[]): Promise<void> {
  const texts = seeds.map(generated);
  const want = await l.tk.encodeBatch(texts, { addSpecialTokens: false });
  texts.forEach((t, i) => {
    const ours = l.bpe.encode(t);
    const theirs = want[i]?.getIds() ?? [];
    const at = firstDifference(ours, theirs);
    assert.equal(at, undefined, `${name}, seed ${seeds[i]}: differs at token ${at} (ours ${ours[at ?? 0]}, tokenizers ${theirs[at ?? 0]}) in ${JSON.stringify(t.slice(0, 200))}`);
  });
}

const seeds = Array.from({ length: 2000 }, (_, i) => 7000 + i);

void test('qwen3: our ids equal tokenizers\' for 2000 generated texts', async () => {
  await assertSameIds('qwen3', load('qwen3', qwen3), seeds);
});

void test('qwen3: a text encoded twice (its words cached) gives the same ids', async () => {
  const l = load('qwen3', qwen3);
  await assertSameIds('qwen3 again', l, seeds.slice(0, 300));
});

void test("llama3's split, ignore_merges and merges as strings: our ids equal tokenizers'", async () => {
  await assertSameIds('llama3-like', load('llama3', llama3Like), seeds.slice(0, 1000));
});

void test("gpt2's ByteLevel split: our ids equal tokenizers'", async () => {
  await assertSameIds('gpt2-like', load('gpt2', gpt2Like), seeds.slice(0, 1000));
});

void test('NFC changes no text whose every character is below U+0300, so such text skips the normalizer', () => {
  const nfc = load('qwen3', qwen3).tk.getNormalizer();
  assert.ok(nfc !== null);
  // Every ordered pair of such characters side by side: composition joins a pair or nothing.
  let s = '';
  for (let a = 0; a < 0x300; a++) {
    const pairs: string[] = [];
    for (let b = 0; b < 0x300; b++) pairs.push(String.fromCharCode(a, b));
    s += pairs.join('');
  }
  assert.equal(nfc.normalizeString(s) === s, true);
  assert.notEqual(nfc.normalizeString('e\u0300'), 'e\u0300', 'the bound is where composing starts');
});

// A tokenizer.json changed in one way: the change and the reason our encoder gives for refusing it.
const withModel = (m: Record<string, unknown>): Json => ({ ...qwen3, model: { ...qwen3.model, ...m } });
const withPre = (pre: unknown): Json => ({ ...qwen3, pre_tokenizer: pre });
const split = (o: Record<string, unknown>): Record<string, unknown> => ({ type: 'Split', pattern: { Regex: llama3Pattern }, behavior: 'Isolated', invert: false, ...o });
const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false };
const vocabWith = (change: (v: Record<string, number>) => void): Json => {
  const vocab = { ...qwen3.model.vocab };
  change(vocab);
  return withModel({ vocab });
};

const unsupported: readonly { why: string; json: Json; reason: RegExp }[] = [
  { why: 'a split pattern we have no equivalent for', json: withPre({ type: 'Sequence', pretokenizers: [split({ pattern: { Regex: String.raw`\p{N}{1,2}|\p{L}+|\s+|.` } }), byteLevel] }), reason: /Split pattern/ },
  { why: 'a split by a string, not a regex', json: withPre({ type: 'Sequence', pretokenizers: [split({ pattern: { String: ' ' } }), byteLevel] }), reason: /Split pattern/ },
  { why: 'a split that removes what it matches', json: withPre({ type: 'Sequence', pretokenizers: [split({ behavior: 'Removed' }), byteLevel] }), reason: /not Isolated/ },
  { why: 'an inverted split', json: withPre({ type: 'Sequence', pretokenizers: [split({ invert: true }), byteLevel] }), reason: /invert/ },
  { why: 'a ByteLevel after the split that splits again', json: withPre({ type: 'Sequence', pretokenizers: [split({}), { ...byteLevel, use_regex: true }] }), reason: /splits again/ },
  { why: 'a third pre-tokenizer', json: withPre({ type: 'Sequence', pretokenizers: [split({}), byteLevel, { type: 'Digits', individual_digits: true }] }), reason: /Sequence of Split and ByteLevel/ },
  { why: 'a prefix space', json: withPre({ ...byteLevel, add_prefix_space: true, use_regex: true }), reason: /prefix space/ },
  { why: 'a ByteLevel that splits nothing', json: withPre(byteLevel), reason: /splits nothing/ },
  { why: 'Metaspace', json: withPre({ type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: true }), reason: /Metaspace/ },
  { why: 'a normalizer other than NFC', json: { ...qwen3, normalizer: { type: 'NFKC' } }, reason: /normalizer "NFKC"/ },
  { why: 'NFC inside a Sequence', json: { ...qwen3, normalizer: { type: 'Sequence', normalizers: [{ type: 'NFC' }] } }, reason: /normalizer "Sequence"/ },
  { why: 'an added token matched after normalizing', json: { ...qwen3, added_tokens: [{ id: 151643, content: '<|endoftext|>', normalized: true, special: true }] }, reason: /matched after normalizing/ },
  { why: 'truncation', json: { ...qwen3, truncation: { max_length: 8, strategy: 'LongestFirst', stride: 0, direction: 'Right' } }, reason: /truncation/ },
  { why: 'padding', json: { ...qwen3, padding: { strategy: 'BatchLongest' } }, reason: /padding/ },
  { why: 'a post-processor we do not know', json: { ...qwen3, post_processor: { type: 'Sequence', processors: [{ type: 'ByteLevel' }, { type: 'Novel' }] } }, reason: /post_processor "Novel"/ },
  { why: 'dropout', json: withModel({ dropout: 0.1 }), reason: /dropout/ },
  { why: 'an unknown token', json: withModel({ unk_token: '<unk>' }), reason: /unk_token/ },
  { why: 'a continuing-subword prefix', json: withModel({ continuing_subword_prefix: '##' }), reason: /continuing_subword_prefix/ },
  { why: 'an end-of-word suffix', json: withModel({ end_of_word_suffix: '</w>' }), reason: /end_of_word_suffix/ },
  { why: 'byte_fallback', json: withModel({ byte_fallback: true }), reason: /byte_fallback/ },
  { why: 'fuse_unk', json: withModel({ fuse_unk: true }), reason: /fuse_unk/ },
  { why: 'a model other than BPE', json: withModel({ type: 'WordPiece' }), reason: /not BPE/ },
  { why: 'a merge of three parts', json: withModel({ merges: ['Ġ Ġ Ġ', ...qwen3.model.merges.slice(1)] }), reason: /merges\[0\].*not a pair/ },
  { why: 'a merge naming a token not in the vocab', json: withModel({ merges: [['Ġ', 'zzzq'], ...qwen3.model.merges.slice(1)] }), reason: /merges\[0\].*not in the vocab/ },
  { why: 'a byte with no token', json: vocabWith((v) => delete v['Ġ']), reason: /lacks byte 32/ },
  { why: 'two tokens sharing an id', json: vocabWith((v) => (v.zzzdup = 5)), reason: /id 5 to two tokens/ },
  { why: 'an id that is not a whole number', json: vocabWith((v) => (v.zzzfrac = 1.5)), reason: /not a whole number/ },
];

for (const u of unsupported) {
  void test(`support: ${u.why} is left to tokenizers, with a reason`, () => {
    const got = byteLevelBpeOf(u.json, (t) => t);
    assert.ok('reason' in got, 'our encoder was built');
    assert.match(got.reason, u.reason);
  });
}

void test('support: no normalizer, and a TemplateProcessing post-processor, are ours to encode', () => {
  for (const json of [{ ...qwen3, normalizer: null }, { ...qwen3, post_processor: { type: 'TemplateProcessing', single: [], pair: [], special_tokens: {} } }]) {
    const got = byteLevelBpeOf(json, (t) => t);
    assert.ok('bpe' in got, 'reason' in got ? got.reason : '');
  }
  const noNormalizer = byteLevelBpeOf(qwen3, undefined);
  assert.ok('reason' in noNormalizer);
  assert.match(noNormalizer.reason, /NFC, but tokenizers has no normalizer/);
});

void test("hfModel: Qwen3's pieces are ours; a tokenizer.json we do not support encodes its pieces with tokenizers and says why", async (t) => {
  const q = await hfModel('qwen3');
  assert.deepEqual(q.pieceEncoder, { name: 'bpe' });
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-bpe-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  // Digits in pairs: a split tokenizers runs and we have no equivalent for.
  const pairs = llama3Pattern.replace('{1,3}', '{1,2}');
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(withPre({ type: 'Sequence', pretokenizers: [split({ pattern: { Regex: pairs } }), byteLevel] })));
  const m = await hfModel(dir);
  assert.equal(m.pieceEncoder.name, 'tokenizers');
  assert.match(m.pieceEncoder.name === 'tokenizers' ? m.pieceEncoder.reason : '', /Split pattern/);
  const text = 'in 2024, 12345 tokens';
  assert.deepEqual(await m.encodePieces([text]), [await m.encodeWhole(text, false)]);
});

void test('self-check: a difference in the first batches sends every later batch to tokenizers, naming the position', async () => {
  const { tk } = load('qwen3', qwen3);
  // Deliberately wrong: without the first merge (Ġ Ġ), runs of spaces come out as more tokens.
  const wrong = byteLevelBpeOf(withModel({ merges: qwen3.model.merges.slice(1) }), (t) => tk.getNormalizer()?.normalizeString(t) ?? t);
  assert.ok('bpe' in wrong);
  let ours = 0;
  let reference = 0;
  const pieces = checkedPieces(
    (text) => {
      ours++;
      return wrong.bpe.encode(text);
    },
    async (texts) => {
      reference++;
      return (await tk.encodeBatch([...texts], { addSpecialTokens: false })).map((e) => Uint32Array.from(e.getIds()));
    },
    4,
  );
  const want = async (text: string): Promise<number[]> => (await tk.encode(text, null, { addSpecialTokens: false })).getIds();
  assert.deepEqual([...((await pieces.encode(['hello world']))[0] ?? [])], await want('hello world'));
  assert.deepEqual(pieces.encoder, { name: 'bpe' }, 'no difference yet');
  const text = 'indented:\n        x = 1';
  const got = await pieces.encode(['fine', text]);
  assert.deepEqual([...(got[1] ?? [])], await want(text), 'the check answers with tokenizers\' ids');
  assert.equal(pieces.encoder.name, 'tokenizers');
  assert.equal(pieces.checksLeft, 0, 'no check is left once tokenizers encodes every batch');
  assert.match(pieces.encoder.name === 'tokenizers' ? pieces.encoder.reason : '', /at token \d+ of a 23-char piece \(ours \d+, tokenizers \d+\)/);
  const before = ours;
  await pieces.encode(['later', 'text']);
  assert.equal(ours, before, 'ours is not asked again');
  assert.equal(reference, 4);
});

void test('self-check: agreeing batches stop being checked after the first few', async () => {
  const l = load('qwen3', qwen3);
  let reference = 0;
  const pieces = checkedPieces(
    (text) => l.bpe.encode(text),
    async (texts) => {
      reference++;
      return (await l.tk.encodeBatch([...texts], { addSpecialTokens: false })).map((e) => Uint32Array.from(e.getIds()));
    },
    2,
  );
  assert.equal(pieces.checksLeft, 2);
  await pieces.encode(['x'.repeat(40_000)]);
  assert.equal(pieces.checksLeft, 2, 'a batch of nothing but pieces over the bound is no check');
  await pieces.encode([]);
  assert.equal(pieces.checksLeft, 2, 'nor is an empty batch (a text whose pieces were all cached)');
  for (let i = 0; i < 5; i++) await pieces.encode([generated(i)]);
  assert.equal(pieces.checksLeft, 0);
  assert.equal(reference, 2);
  assert.deepEqual(pieces.encoder, { name: 'bpe' });
});

void test('PieceEncoderNews: what encodes a source\'s pieces is said once, and again only when it changes', async () => {
  const m = await hfModel('qwen3');
  let encoder: PieceEncoder = { name: 'bpe' };
  // The model as a worker holds it, but for what encodes its pieces, which the test turns.
  const model: TokenizerModel = {
    ...m,
    get pieceEncoder() {
      return encoder;
    },
  };
  const news = new PieceEncoderNews();
  assert.equal(news.news('qwen3', model), 'bpe');
  assert.equal(news.news('qwen3', model), undefined);
  assert.equal(news.news('elsewhere', model), 'bpe', 'each source apart');
  encoder = { name: 'tokenizers', reason: 'our byte-level BPE differed from tokenizers at token 3' };
  assert.equal(news.news('qwen3', model), 'tokenizers (our byte-level BPE differed from tokenizers at token 3)');
  assert.equal(news.news('qwen3', model), undefined);
});

void test('piecesModelOf: a snapshot cloned to another thread encodes every text as the model it was taken from did', async () => {
  const m = await hfModel('qwen3');
  const s = piecesSnapshotOf(m);
  assert.ok(typeof s !== 'string', String(s));
  // As a worker's answer reaches the event loop: cloned, classes and closures gone.
  const copy = piecesModelOf(structuredClone(s));
  const texts = Array.from({ length: 60 }, (_, i) => generated(i));
  assert.deepEqual(await copy.encodePieces(texts), await m.encodePieces(texts));
  const chat = '<|im_start|>user\ncafe\u0301 <|im_end|>\n<|im_start|>assistant\n';
  for (const text of [...texts.slice(0, 20), chat, '<|endoftext|>', '']) {
    for (const special of [false, true]) assert.deepEqual([...(await copy.encodeWhole(text, special))], [...(await m.encodeWhole(text, special))], JSON.stringify(text.slice(0, 80)));
  }
  assert.deepEqual(copy.split(chat), m.split(chat));
  assert.deepEqual({ ...copy.template, around: copy.around, prefixStable: copy.prefixStable, added: copy.added }, { ...m.template, around: m.around, prefixStable: m.prefixStable, added: m.added });
  assert.deepEqual(piecesSnapshotOf(byteModel()), { source: 'bytes', pieces: 'bytes' });
});

void test('piecesSnapshotOf: a model our BPE does not encode alone has no snapshot, and says why', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-bpe-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const rows = [
    { why: 'its pieces are tokenizers\' (a normalizer we do not run)', json: { ...qwen3, normalizer: { type: 'NFKC' } }, reason: /pieces are encoded by tokenizers \(normalizer "NFKC"/ },
    { why: 'whole words come from the vocabulary, which would be cloned whole', json: llama3Like, reason: /ignore_merges/ },
  ];
  for (const [i, r] of rows.entries()) {
    writeFileSync(join(dir, `${i}.json`), JSON.stringify(r.json));
    const s = piecesSnapshotOf(await hfModel(join(dir, `${i}.json`)));
    assert.ok(typeof s === 'string', r.why);
    assert.match(s, r.reason, r.why);
  }
});
