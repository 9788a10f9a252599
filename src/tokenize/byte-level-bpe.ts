// Our own encoder for byte-level BPE tokenizers (GPT-2, Llama 3, Qwen2/2.5/3), giving the ids
// Hugging Face tokenizers gives for the tokenizer.json shapes it accepts; which those are is decided
// once, from the JSON, and anything else stays with tokenizers. Why: tokenizers' encode of a chat
// turn was the largest part of a routing decision (0.7 ms for 714 characters through the napi
// binding; here 0.1 ms when its words were seen before, 0.4 ms when none was).
// Exactness rests on three things, each checked against tokenizers in test/tokenize: the split
// regexes are hand-written equivalents of a few known Oniguruma patterns (matched as exact strings,
// never translated), over Oniguruma's own character classes; NFC is tokenizers' own normalizer; and
// merging is BPE's Word::merge_all (the pair of lowest rank first, the leftmost of equal ones).
import { onigLetters, onigNumbers, onigSpaces } from './oniguruma-classes.js';

// A regex class body from oniguruma-classes' hex ranges ("41-5a aa" -> A-Zª). Characters are
// written as themselves, ASCII punctuation and controls escaped: V8 optimizes no regex whose source
// passes 20 KB (kRegExpTooLargeToOptimize), and written as \u{...} escapes the classes alone would
// pass it and split about five times slower.
const charOf = (hex: string): string => {
  const c = Number.parseInt(hex, 16);
  return c < 0x80 && !/[0-9A-Za-z]/.test(String.fromCharCode(c)) ? `\\u{${hex}}` : String.fromCodePoint(c);
};
const classOf = (ranges: string): string =>
  ranges
    .split(' ')
    .map((r) => r.split('-').map(charOf).join('-'))
    .join('');
const L = classOf(onigLetters);
const N = classOf(onigNumbers);
const W = classOf(onigSpaces);

// Oniguruma's (?i:...) folds U+017F (long s) to s, and none of the other letters to anything but its
// ASCII case (oniguruma-classes.test.ts asks it of every code point). Node 20 has no (?i:...) group,
// and a whole-regex i flag would fold the classes too.
const contractions = "'(?:[sS\\u017f]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])";
const qwenLike = (digits: string): string =>
  `${contractions}|[^\\r\\n${L}${N}]?[${L}]+|[${N}]${digits}| ?[^${W}${L}${N}]+[\\r\\n]*|[${W}]*[\\r\\n]+|[${W}]+(?![^${W}])|[${W}]+`;

// Split patterns as tokenizer.json spells them, with their JavaScript equivalents. Each pattern
// matches at every position (each code point is a letter, a number, a space or none of them, and
// each of those starts some alternative), so with the sticky flag one match follows the last.
const splitPatterns = new Map<string, string>([
  // Qwen2, Qwen2.5, Qwen3.
  [String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`, qwenLike('')],
  // Llama 3: digits in runs of up to three.
  [String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`, qwenLike('{1,3}')],
]);
// ByteLevel's own regex (use_regex), GPT-2's.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?[${L}]+| ?[${N}]+| ?[^${W}${L}${N}]+|[${W}]+(?![^${W}])|[${W}]+`;

/** GPT-2's bytes_to_unicode: the character each byte stands for in a byte-level vocabulary. */
export function byteLevelChars(): string[] {
  const chars: string[] = [];
  let next = 256;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    chars.push(String.fromCharCode(printable ? b : next++));
  }
  return chars;
}

const utf8 = new TextEncoder();
const byteChars = byteLevelChars();

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

const shown = (v: unknown): string => (JSON.stringify(v) ?? String(v)).slice(0, 120);
const absent = (v: unknown): boolean => v === undefined || v === null;
// BPE's continuing_subword_prefix and end_of_word_suffix: "" is glued on and changes nothing.
const emptyAffix = (v: unknown): boolean => absent(v) || v === '';

// Post-processors that leave the ids alone when special tokens are not added (encodePieces never adds them).
const idPreservingProcessors = new Set(['ByteLevel', 'TemplateProcessing', 'BertProcessing', 'RobertaProcessing']);

function processorProblem(p: unknown): string | undefined {
  if (absent(p)) return undefined;
  if (!isRecord(p)) return `post_processor ${shown(p)} is not an object`;
  if (p.type === 'Sequence' && Array.isArray(p.processors)) {
    for (const q of p.processors) {
      const why = processorProblem(q);
      if (why !== undefined) return why;
    }
    return undefined;
  }
  return typeof p.type === 'string' && idPreservingProcessors.has(p.type) ? undefined : `post_processor ${shown(p.type)} may change ids`;
}

// The JavaScript split regex a pre_tokenizer stands for, or why it has none.
function splitOf(pre: unknown): { regex: string } | { reason: string } {
  if (!isRecord(pre)) return { reason: `pre_tokenizer ${shown(pre)} is not an object` };
  if (pre.type === 'ByteLevel') {
    if (pre.add_prefix_space !== false) return { reason: 'pre_tokenizer ByteLevel adds a prefix space' };
    if (pre.use_regex === false) return { reason: 'pre_tokenizer ByteLevel splits nothing (use_regex false)' };
    return { regex: gpt2Pattern };
  }
  const parts = pre.pretokenizers;
  if (pre.type !== 'Sequence' || !Array.isArray(parts) || parts.length !== 2) {
    return { reason: `pre_tokenizer ${shown(pre.type)} is not ByteLevel or a Sequence of Split and ByteLevel` };
  }
  const [split, byteLevel] = parts as unknown[];
  if (!isRecord(split) || split.type !== 'Split') return { reason: `pre_tokenizer Sequence begins with ${shown(split)}, not a Split` };
  if (split.behavior !== 'Isolated' || split.invert !== false) return { reason: `pre_tokenizer Split is ${shown(split.behavior)}, invert ${shown(split.invert)}, not Isolated` };
  const pattern = isRecord(split.pattern) ? split.pattern.Regex : undefined;
  const regex = typeof pattern === 'string' ? splitPatterns.get(pattern) : undefined;
  if (regex === undefined) return { reason: `pre_tokenizer Split pattern ${shown(split.pattern)} is not one we have a JavaScript equivalent for` };
  if (!isRecord(byteLevel) || byteLevel.type !== 'ByteLevel') return { reason: `pre_tokenizer Sequence ends with ${shown(byteLevel)}, not ByteLevel` };
  if (byteLevel.add_prefix_space !== false || byteLevel.use_regex !== false) return { reason: 'pre_tokenizer ByteLevel after Split adds a prefix space or splits again' };
  return { regex };
}

/** What a byte-level BPE is built from, read from a tokenizer.json. */
interface ByteLevelConfig {
  readonly regex: string;
  readonly nfc: boolean;
  readonly ignoreMerges: boolean;
  readonly vocab: Record<string, unknown>;
  readonly merges: readonly unknown[];
}

// Why the JSON is not a tokenizer we encode exactly, or what to build.
function configOf(json: unknown): ByteLevelConfig | string {
  if (!isRecord(json)) return 'tokenizer.json is not an object';
  if (!absent(json.truncation)) return 'truncation is set (encode would cut the ids)';
  if (!absent(json.padding)) return 'padding is set (encode would add ids)';
  const norm = json.normalizer;
  const nfc = isRecord(norm) && norm.type === 'NFC';
  if (!nfc && !absent(norm)) return `normalizer ${shown(isRecord(norm) ? norm.type : norm)} is not NFC or none`;
  // A token tokenizers matches in the normalized text could appear in a piece only once normalized.
  const added = Array.isArray(json.added_tokens) ? json.added_tokens : [];
  const normalizedToken = added.find((t) => !isRecord(t) || t.normalized !== false);
  if (nfc && normalizedToken !== undefined) return `added token ${shown(isRecord(normalizedToken) ? normalizedToken.content : normalizedToken)} is matched after normalizing`;
  const split = splitOf(json.pre_tokenizer);
  if ('reason' in split) return split.reason;
  const post = processorProblem(json.post_processor);
  if (post !== undefined) return post;
  const m = json.model;
  if (!isRecord(m) || m.type !== 'BPE') return `model ${shown(isRecord(m) ? m.type : m)} is not BPE`;
  if (!absent(m.dropout)) return `model dropout ${shown(m.dropout)} is set (ids are random)`;
  if (!absent(m.unk_token)) return `model unk_token ${shown(m.unk_token)} is set`;
  if (!emptyAffix(m.continuing_subword_prefix)) return `model continuing_subword_prefix ${shown(m.continuing_subword_prefix)} is not empty`;
  if (!emptyAffix(m.end_of_word_suffix)) return `model end_of_word_suffix ${shown(m.end_of_word_suffix)} is not empty`;
  for (const k of ['fuse_unk', 'byte_fallback'] as const) if (m[k] === true) return `model ${k} is true`;
  if (!absent(m.ignore_merges) && typeof m.ignore_merges !== 'boolean') return `model ignore_merges ${shown(m.ignore_merges)} is not true or false`;
  if (!isRecord(m.vocab) || !Array.isArray(m.merges)) return 'model has no vocab object or merges list';
  return { regex: split.regex, nfc, ignoreMerges: m.ignore_merges === true, vocab: m.vocab, merges: m.merges };
}

// A merge as tokenizer.json lists it: [a, b], or "a b" (byte-level tokens hold no space).
function mergePair(m: unknown): readonly [string, string] | undefined {
  if (Array.isArray(m)) return m.length === 2 && typeof m[0] === 'string' && typeof m[1] === 'string' ? [m[0], m[1]] : undefined;
  if (typeof m !== 'string') return undefined;
  const parts = m.split(' ');
  return parts.length === 2 && parts[0] !== undefined && parts[1] !== undefined ? [parts[0], parts[1]] : undefined;
}

// Merges by pair of ids, open addressing in one Int32Array of [left, right, rank, merged] slots
// (a Map keyed by a string or a 40-bit number per pair costs several times more per lookup).
const slotInts = 4;
const noRank = 0x7fffffff;

function slotHash(a: number, b: number, mask: number): number {
  return Math.imul(a ^ Math.imul(b, 0x85ebca6b), 0x9e3779b1) & mask;
}

// The heap's order: (rank a, position a) comes before (rank b, position b), the lowest rank first
// and of equal ranks the leftmost, as merge_all's queue orders its merges.
const lower = (ra: number, pa: number, rb: number, pb: number): boolean => ra < rb || (ra === rb && pa < pb);

/**
 * A ByteLevelBpe as plain data, for a thread that did not read the file: the merges table is a few
 * MB to clone, where reading and building Qwen3's takes most of a second and some 170 MB.
 */
export interface ByteLevelTables {
  readonly regex: string;
  readonly nfc: boolean;
  readonly byteIds: Int32Array;
  readonly merges: Int32Array;
  readonly mask: number;
}

/** The encoder `t` describes; `normalize` is tokenizers' NFC (nfcNormalizer) when `t.nfc`. */
export function byteLevelBpeOfTables(t: ByteLevelTables, normalize: (text: string) => string): ByteLevelBpe {
  return new ByteLevelBpe(new RegExp(t.regex, 'uy'), t.nfc ? normalize : undefined, t.byteIds, t.merges, t.mask, undefined);
}

/** What a tokenizer.json's pieces are encoded by, read once: our byte-level BPE or, where it cannot be exact, why not. */
export type ByteLevelSupport = { readonly bpe: ByteLevelBpe } | { readonly reason: string };

/**
 * Our encoder for `tokenizerJson` (parsed), or why its pieces stay with tokenizers. `normalize` is
 * tokenizers' own normalizer of the same file, used for NFC (exact by construction, and cheap).
 */
export function byteLevelBpeOf(tokenizerJson: unknown, normalize: ((text: string) => string) | undefined): ByteLevelSupport {
  const c = configOf(tokenizerJson);
  if (typeof c === 'string') return { reason: c };
  if (c.nfc && normalize === undefined) return { reason: 'normalizer NFC, but tokenizers has no normalizer to run' };
  // The parsed object is the vocabulary: copying 150k entries into a Map would double the build.
  // An inherited name (toString, __proto__) is a function or an object, never a number.
  const vocab = c.vocab;
  const idOf = (token: string): number | undefined => {
    const id = vocab[token];
    return typeof id === 'number' ? id : undefined;
  };
  const tokens = Object.keys(vocab);
  // merge_all tells a stale pair from a live one by the merged id alone, which two tokens sharing
  // an id would fool. Ids are checked dense enough for a bitmap (real vocabularies are 0..n-1).
  const seen = new Uint8Array(2 * tokens.length + 1024);
  for (const token of tokens) {
    const id = vocab[token];
    if (typeof id !== 'number' || !Number.isInteger(id) || id < 0 || id >= seen.length) return { reason: `vocab id ${shown(id)} of ${shown(token)} is not a whole number below ${seen.length}` };
    if (seen[id] === 1) return { reason: `vocab gives id ${id} to two tokens, ${shown(token)} one of them` };
    seen[id] = 1;
  }
  const byteIds = new Int32Array(256);
  for (let b = 0; b < 256; b++) {
    const id = idOf(byteChars[b] ?? '');
    if (id === undefined) return { reason: `vocab lacks byte ${b}'s character ${shown(byteChars[b])}` };
    byteIds[b] = id;
  }
  let size = 1;
  while (size < c.merges.length * 1.5 + 1) size *= 2;
  const table = new Int32Array(size * slotInts).fill(-1);
  const mask = size - 1;
  for (let rank = 0; rank < c.merges.length; rank++) {
    const pair = mergePair(c.merges[rank]);
    if (pair === undefined) return { reason: `merges[${rank}] ${shown(c.merges[rank])} is not a pair` };
    const a = idOf(pair[0]);
    const b = idOf(pair[1]);
    const merged = idOf(pair[0] + pair[1]);
    if (a === undefined || b === undefined || merged === undefined) return { reason: `merges[${rank}] ${shown(pair)} names a token not in the vocab` };
    let s = slotHash(a, b, mask);
    // A pair listed twice takes its later rank, as the HashMap tokenizers collects the merges into does.
    while (table[s * slotInts] !== -1 && !(table[s * slotInts] === a && table[s * slotInts + 1] === b)) s = (s + 1) & mask;
    const at = s * slotInts;
    table[at] = a;
    table[at + 1] = b;
    table[at + 2] = rank;
    table[at + 3] = merged;
  }
  return { bpe: new ByteLevelBpe(new RegExp(c.regex, 'uy'), c.nfc ? normalize : undefined, byteIds, table, mask, c.ignoreMerges ? idOf : undefined) };
}

// NFC leaves a text with no code unit from U+0300 on as it is (a test holds tokenizers' NFC to that),
// and most chat text is such: it skips the trip to tokenizers.
const beyondNfcStable = /[\u0300-\uffff]/;

// Words are cached by their text, as tokenizers caches them: chats repeat words. Two generations of
// up to this many words each: when the newer fills it becomes the older, and the older is dropped
// whole. (Deleting a Map's oldest key one at a time leaves holes V8 skips on every next deletion
// until it rehashes: a chat turn of new words took five times as long once the cache was full.)
// Long pieces (runs of spaces, a base64 blob) seldom repeat and would make the bound in entries a
// loose one in bytes.
const cacheGeneration = 16_384;
const maxCachedChars = 64;
// Words up to this many bytes merge by scanning their pairs; longer ones (a CJK sentence is one
// word) through a heap, as merge_all does, so the cost grows as n log n and not n².
const maxScannedBytes = 48;
// Scratch arrays longer than this are not kept past the text that needed them: a megabyte-long run
// of one letter would otherwise hold some 40 MB per model for good.
const keptScratch = 1 << 16;


/** A byte-level BPE encoder, built by byteLevelBpeOf; its ids are tokenizers' for the same text (no added tokens in it, none added). */
export class ByteLevelBpe {
  readonly #split: RegExp;
  readonly #normalize: ((text: string) => string) | undefined;
  readonly #byteIds: Int32Array;
  readonly #merges: Int32Array;
  readonly #mask: number;
  // Whole words in the vocab, taken as one token before any merge (ignore_merges, Llama 3's).
  readonly #wholeWord: ((chars: string) => number | undefined) | undefined;
  #cache = new Map<string, number | Uint32Array>();
  #older = new Map<string, number | Uint32Array>();
  // Scratch, grown as texts and words need and let go of after a big one (keptScratch).
  #out = new Uint32Array(1024);
  #bytes = new Uint8Array(256);
  #sym = new Uint32Array(256);
  readonly #rank = new Int32Array(maxScannedBytes);
  readonly #merged = new Int32Array(maxScannedBytes);
  #prev = new Int32Array(0);
  #next = new Int32Array(0);
  #heapRank = new Int32Array(0);
  #heapPos = new Int32Array(0);
  #heapMerged = new Int32Array(0);

  constructor(split: RegExp, normalize: ((text: string) => string) | undefined, byteIds: Int32Array, merges: Int32Array, mask: number, wholeWord: ((chars: string) => number | undefined) | undefined) {
    this.#split = split;
    this.#normalize = normalize;
    this.#byteIds = byteIds;
    this.#merges = merges;
    this.#mask = mask;
    this.#wholeWord = wholeWord;
  }

  /**
   * Its tables, for byteLevelBpeOfTables on another thread; undefined when it takes whole words from
   * the vocabulary (ignore_merges), which is the whole parsed vocabulary to clone.
   */
  tables(): ByteLevelTables | undefined {
    if (this.#wholeWord !== undefined) return undefined;
    return { regex: this.#split.source, nfc: this.#normalize !== undefined, byteIds: this.#byteIds, merges: this.#merges, mask: this.#mask };
  }

  /** The ids of `text`; a buffer of our own. */
  encode(text: string): Uint32Array {
    const t = this.#normalize !== undefined && beyondNfcStable.test(text) ? this.#normalize(text) : text;
    let n = 0;
    for (let at = 0, end = 0; at < t.length; at = end) {
      end = this.#wordEnd(t, at);
      n = this.#word(t.slice(at, end), n);
    }
    const ids = this.#out.slice(0, n);
    if (this.#out.length > keptScratch || this.#bytes.length > keptScratch) {
      this.#out = new Uint32Array(1024);
      this.#bytes = new Uint8Array(256);
      this.#sym = new Uint32Array(256);
      this.#prev = this.#next = this.#heapRank = this.#heapPos = this.#heapMerged = new Int32Array(0);
    }
    return ids;
  }

  /** The words `text` splits into, in byte-level characters and not normalized, as tokenizers' preTokenizeString gives them: for checks against it. */
  preTokenize(text: string): string[] {
    const words: string[] = [];
    for (let at = 0, end = 0; at < text.length; at = end) {
      end = this.#wordEnd(text, at);
      let chars = '';
      for (const b of utf8.encode(text.slice(at, end))) chars += byteChars[b] ?? '';
      words.push(chars);
    }
    return words;
  }

  // Where the word starting at `at` ends.
  #wordEnd(text: string, at: number): number {
    const re = this.#split;
    re.lastIndex = at;
    if (!re.test(text)) throw new Error(`byte-level split regex matched nothing at char ${at} (code point ${text.codePointAt(at)}); every code point should start a match`);
    return re.lastIndex;
  }

  // Appends the ids of one pre-tokenized word at `n` in #out; answers the new length.
  #word(w: string, n: number): number {
    let ids = this.#cache.get(w);
    if (ids === undefined) {
      ids = this.#older.get(w) ?? this.#encodeWord(w);
      if (w.length <= maxCachedChars) {
        if (this.#cache.size >= cacheGeneration) {
          this.#older = this.#cache;
          this.#cache = new Map();
        }
        this.#cache.set(w, ids);
      }
    }
    const count = typeof ids === 'number' ? 1 : ids.length;
    if (n + count > this.#out.length) {
      const grown = new Uint32Array(Math.max(2 * this.#out.length, n + count));
      grown.set(this.#out.subarray(0, n));
      this.#out = grown;
    }
    if (typeof ids === 'number') this.#out[n] = ids;
    else this.#out.set(ids, n);
    return n + count;
  }

  // One word's ids: a single id as a number (most words), else their own array.
  #encodeWord(w: string): number | Uint32Array {
    if (this.#bytes.length < 3 * w.length) this.#bytes = new Uint8Array(3 * w.length);
    // TextEncoder writes a lone surrogate as U+FFFD, as the binding's string conversion does.
    const len = utf8.encodeInto(w, this.#bytes).written;
    const bytes = this.#bytes;
    if (this.#wholeWord !== undefined) {
      let chars = '';
      for (let i = 0; i < len; i++) chars += byteChars[bytes[i] ?? 0];
      const id = this.#wholeWord(chars);
      if (id !== undefined) return id;
    }
    if (this.#sym.length < len) this.#sym = new Uint32Array(len);
    const sym = this.#sym;
    for (let i = 0; i < len; i++) sym[i] = this.#byteIds[bytes[i] ?? 0] ?? 0;
    const left = len <= maxScannedBytes ? this.#mergeScanning(len) : this.#mergeWithHeap(len);
    return left === 1 ? (sym[0] ?? 0) : sym.slice(0, left);
  }

  // The slot of pair (a, b) in #merges, or -1.
  #slot(a: number, b: number): number {
    const t = this.#merges;
    for (let s = slotHash(a, b, this.#mask); ; s = (s + 1) & this.#mask) {
      const at = s * slotInts;
      const x = t[at];
      if (x === a && t[at + 1] === b) return at;
      if (x === -1) return -1;
    }
  }

  // Sets #rank[i] and #merged[i] for the pair at symbols i, i+1.
  #pairAt(i: number): void {
    const s = this.#slot(this.#sym[i] ?? 0, this.#sym[i + 1] ?? 0);
    this.#rank[i] = s < 0 ? noRank : (this.#merges[s + 2] ?? noRank);
    this.#merged[i] = s < 0 ? -1 : (this.#merges[s + 3] ?? -1);
  }

  // Merges #sym[0..len) in place, the lowest-ranked pair first; answers how many symbols are left.
  #mergeScanning(len: number): number {
    const sym = this.#sym;
    const rank = this.#rank;
    const merged = this.#merged;
    for (let i = 0; i + 1 < len; i++) this.#pairAt(i);
    for (;;) {
      let best = noRank;
      let at = -1;
      for (let i = 0; i + 1 < len; i++) {
        const r = rank[i] ?? noRank;
        if (r < best) {
          best = r;
          at = i;
        }
      }
      if (at < 0) return len;
      sym[at] = merged[at] ?? 0;
      sym.copyWithin(at + 1, at + 2, len);
      rank.copyWithin(at + 1, at + 2, len - 1);
      merged.copyWithin(at + 1, at + 2, len - 1);
      len--;
      if (at > 0) this.#pairAt(at - 1);
      if (at + 1 < len) this.#pairAt(at);
    }
  }

  // merge_all's own way for long words: symbols stay where they are, linked both ways; a min-heap
  // holds (rank, position) of each pair as it forms, the lowest rank first and then the leftmost,
  // and an entry whose pair has since changed is dropped when it comes up.
  #mergeWithHeap(len: number): number {
    const sym = this.#sym;
    if (this.#next.length < len) {
      this.#prev = new Int32Array(len);
      this.#next = new Int32Array(len);
      // Each merge pushes at most two pairs.
      this.#heapRank = new Int32Array(3 * len);
      this.#heapPos = new Int32Array(3 * len);
      this.#heapMerged = new Int32Array(3 * len);
    }
    const prev = this.#prev;
    const next = this.#next;
    const hr = this.#heapRank;
    const hp = this.#heapPos;
    const hm = this.#heapMerged;
    let size = 0;
    const put = (i: number, rank: number, pos: number, merged: number): void => {
      hr[i] = rank;
      hp[i] = pos;
      hm[i] = merged;
    };
    const push = (pos: number): void => {
      const s = this.#slot(sym[pos] ?? 0, sym[next[pos] ?? 0] ?? 0);
      if (s < 0) return;
      const rank = this.#merges[s + 2] ?? 0;
      let i = size++;
      while (i > 0) {
        const up = (i - 1) >> 1;
        if (lower(hr[up] ?? 0, hp[up] ?? 0, rank, pos)) break;
        put(i, hr[up] ?? 0, hp[up] ?? 0, hm[up] ?? 0);
        i = up;
      }
      put(i, rank, pos, this.#merges[s + 3] ?? 0);
    };
    for (let i = 0; i < len; i++) {
      prev[i] = i - 1;
      next[i] = i + 1 < len ? i + 1 : -1;
    }
    for (let i = 0; i + 1 < len; i++) push(i);
    let left = len;
    while (size > 0) {
      const pos = hp[0] ?? 0;
      const m = hm[0] ?? 0;
      size--;
      const lastRank = hr[size] ?? 0;
      const lastPos = hp[size] ?? 0;
      const lastMerged = hm[size] ?? 0;
      let i = 0;
      for (;;) {
        let c = 2 * i + 1;
        if (c >= size) break;
        const d = c + 1;
        if (d < size && lower(hr[d] ?? 0, hp[d] ?? 0, hr[c] ?? 0, hp[c] ?? 0)) c = d;
        if (lower(lastRank, lastPos, hr[c] ?? 0, hp[c] ?? 0)) break;
        put(i, hr[c] ?? 0, hp[c] ?? 0, hm[c] ?? 0);
        i = c;
      }
      put(i, lastRank, lastPos, lastMerged);
      const right = next[pos] ?? -1;
      // A merged-away symbol is marked by prev -2; an entry whose pair no longer merges to m is stale.
      if (prev[pos] === -2 || right < 0) continue;
      const s = this.#slot(sym[pos] ?? 0, sym[right] ?? 0);
      if (s < 0 || this.#merges[s + 3] !== m) continue;
      sym[pos] = m;
      const after = next[right] ?? -1;
      next[pos] = after;
      prev[right] = -2;
      if (after >= 0) prev[after] = pos;
      left--;
      const before = prev[pos] ?? -1;
      if (before >= 0) push(before);
      if (after >= 0) push(pos);
    }
    let k = 0;
    for (let i = 0; i >= 0; i = next[i] ?? -1) sym[k++] = sym[i] ?? 0;
    return left;
  }
}
