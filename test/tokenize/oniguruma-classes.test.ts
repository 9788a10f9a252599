// Our byte-level split regexes must split every text as tokenizers' Oniguruma does. The regexes
// depend on a character only through the classes it is in (\p{L}, \p{N}, \s, and the letters the
// contractions fold), so: (1) for every code point, Oniguruma's membership in each class is asked of
// tokenizers itself and must equal oniguruma-classes.ts (and our case folds); (2) the whole
// pre-tokenizers (Qwen3's, Llama 3's, GPT-2's) must split every code point in ascending runs, and
// random text over a few characters of each class in every combination, as tokenizers does.
// Asking per code point and context costs tokenizers' binding some 4 µs a returned piece (30 s for
// a million code points in a few contexts); a split that removes what it matches returns only the
// runs between matches, so a class over all code points costs a few hundred pieces.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { Tokenizer } from 'tokenizers';
import { prng } from '../../src/e2e/index.js';
import { byteLevelBpeOf, byteLevelChars } from '../../src/tokenize/byte-level-bpe.js';
import { onigLetters, onigNumbers, onigSpaces } from '../../src/tokenize/oniguruma-classes.js';

// Every code point but the surrogates, in strings of a few thousand (tokenizers' binding slows on
// much longer ones).
const codePoints: number[] = [];
for (let c = 0; c <= 0x10ffff; c++) if (c < 0xd800 || c > 0xdfff) codePoints.push(c);
const chunkCodePoints = 4096;
const chunks: { readonly first: number; readonly text: string }[] = [];
for (let i = 0; i < codePoints.length; i += chunkCodePoints) chunks.push({ first: i, text: String.fromCodePoint(...codePoints.slice(i, i + chunkCodePoints)) });

// A tokenizer that only pre-tokenizes: a byte-level vocabulary and no merges, loaded in a moment.
const byteVocab = Object.fromEntries(byteLevelChars().map((c, i) => [c, i]));
function tokenizerJson(preTokenizer: unknown): Record<string, unknown> {
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: [],
    normalizer: null,
    pre_tokenizer: preTokenizer,
    post_processor: null,
    decoder: null,
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, vocab: byteVocab, merges: [] },
  };
}
const preTokenizerOf = (pre: unknown): NonNullable<ReturnType<Tokenizer['getPreTokenizer']>> => {
  const p = Tokenizer.fromString(JSON.stringify(tokenizerJson(pre))).getPreTokenizer();
  assert.ok(p !== null);
  return p;
};

// Which code points Oniguruma's `pattern` matches, from the runs it leaves when it removes its matches.
function onigMatches(pattern: string): Uint8Array {
  const probe = preTokenizerOf({ type: 'Split', pattern: { Regex: pattern }, behavior: 'Removed', invert: false });
  const matched = new Uint8Array(0x110000);
  for (const { first, text } of chunks) {
    const n = Math.min(chunkCodePoints, codePoints.length - first);
    const kept = new Uint8Array(n);
    // Offsets count code points.
    for (const [, [from, to]] of probe.preTokenizeString(text)) kept.fill(1, from, to);
    for (let k = 0; k < n; k++) if (kept[k] === 0) matched[codePoints[first + k] ?? 0] = 1;
  }
  return matched;
}

// oniguruma-classes.ts's form: hex ranges, lines of at most 110 characters.
function rangeLines(member: Uint8Array): string[] {
  const items: string[] = [];
  for (let c = 0; c < 0x110000; c++) {
    if (member[c] !== 1) continue;
    let end = c;
    while (end + 1 < 0x110000 && member[end + 1] === 1) end++;
    items.push(end === c ? c.toString(16) : `${c.toString(16)}-${end.toString(16)}`);
    c = end;
  }
  const lines: string[] = [];
  for (const it of items) {
    const last = lines.at(-1);
    if (last !== undefined && last.length + 1 + it.length <= 110) lines[lines.length - 1] = `${last} ${it}`;
    else lines.push(it);
  }
  return lines;
}

const classes = [
  { name: 'onigLetters', pattern: String.raw`\p{L}+`, ours: onigLetters },
  { name: 'onigNumbers', pattern: String.raw`\p{N}+`, ours: onigNumbers },
  { name: 'onigSpaces', pattern: String.raw`\s+`, ours: onigSpaces },
];
for (const c of classes) {
  void test(`${c.name}: every code point is in it exactly when Oniguruma's ${c.pattern.slice(0, -1)} matches it`, () => {
    const lines = rangeLines(onigMatches(c.pattern));
    const source = `export const ${c.name} = [\n${lines.map((l) => `  '${l}',`).join('\n')}\n].join(' ');`;
    assert.equal(lines.join(' '), c.ours, `tokenizers' Oniguruma has other ${c.pattern} than src/tokenize/oniguruma-classes.ts; write there:\n${source}`);
  });
}

void test("contractions: Oniguruma's (?i) folds exactly these characters to the contractions' letters, as our group does", () => {
  const folded = onigMatches('(?i:[stremvld])');
  const found = [...folded.keys()].filter((c) => folded[c] === 1).map((c) => String.fromCodePoint(c));
  assert.deepEqual(found.sort(), [...'DELMRSTVdelmrstvſ'].sort());
});

const qwenPattern = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
const byteLevelAfterSplit = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false };
const splitBy = (pattern: string): unknown => ({
  type: 'Sequence',
  pretokenizers: [{ type: 'Split', pattern: { Regex: pattern }, behavior: 'Isolated', invert: false }, byteLevelAfterSplit],
});
const preTokenizers = [
  { name: 'qwen3', pre: splitBy(qwenPattern) },
  { name: 'llama3', pre: splitBy(qwenPattern.replace(String.raw`|\p{N}|`, String.raw`|\p{N}{1,3}|`)) },
  { name: 'gpt2', pre: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: true } },
];

// A few characters of every class and of none, the contractions' letters and their look-alikes:
// a text's split depends on its characters only through these classes.
const alphabet = [
  ...'aZé中ꙮ\u{1d49c}\u{10d4a}',
  ...'\u088f\u{16ea0}\u{323b0}',
  ...'09٣½\u{1d7d9}\u{11de0}',
  ...' \t\r\n\v\f\u00a0\u0085\u1680\u2000\u2028\u2029\u3000\ufeff\u200b',
  ...'sStTrReEvVmMlLdDſßẞ\u212aﬅﬆİı',
  ..."'’`\"",
  ...'!-.,;😀\u0301\u200d\ue000\u{10ffff}\u0378',
];

for (const p of preTokenizers) {
  void test(`${p.name}: our split equals tokenizers' over every code point in ascending runs, and over random text of every class`, () => {
    const theirs = preTokenizerOf(p.pre);
    const built = byteLevelBpeOf(tokenizerJson(p.pre), undefined);
    assert.ok('bpe' in built, 'reason' in built ? built.reason : '');
    const check = (text: string, what: string): void => {
      const want = theirs.preTokenizeString(text).map(([w]) => w);
      const got = built.bpe.preTokenize(text);
      const at = got.findIndex((w, i) => w !== want[i]);
      assert.ok(at < 0 && got.length === want.length, `${what}: word ${at < 0 ? Math.min(got.length, want.length) : at} is ${JSON.stringify(got[at])}, tokenizers has ${JSON.stringify(want[at])}`);
    };
    for (const { first, text } of chunks) check(text, `code points from U+${(codePoints[first] ?? 0).toString(16)}`);
    const r = prng(42);
    for (let n = 0; n < 40; n++) {
      let text = '';
      for (let i = 0; i < 2000; i++) text += alphabet[Math.floor(r() * alphabet.length)] ?? '';
      check(text, `random text ${n}`);
    }
  });
}
