// Incremental tokenization. Hugging Face tokenizers cut the text at added tokens (<|im_start|>,
// <|im_end|>, …) before anything else and normalize and pre-tokenize each piece alone, so the ids of
// a rendered chat are the ids of its pieces laid end to end. A chat resends the whole conversation
// every turn; with each piece's ids kept by its text, a new turn encodes only what is new.
// Some tokenizers break that independence (an added token that eats the spaces beside it, a
// Metaspace that marks only the text's first piece, a component we do not know); those encode whole.
import { Generations } from './generations.js';

/** A text split at added tokens: strings to encode, numbers are an added token's id. */
export type Segment = string | number;

/** An added token as tokenizer.json lists it. */
export interface AddedToken {
  readonly id: number;
  readonly content: string;
}

const escape = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** A splitter at `tokens`; at any position the longest one matches, as the tokenizer's own matcher does. */
export function splitterOf(tokens: readonly AddedToken[]): (text: string) => Segment[] {
  const byContent = new Map(tokens.filter((t) => t.content !== '').map((t) => [t.content, t.id]));
  if (byContent.size === 0) return (text) => (text === '' ? [] : [text]);
  const alternatives = [...byContent.keys()].sort((a, b) => b.length - a.length).map(escape);
  const re = new RegExp(alternatives.join('|'), 'g');
  return (text) => {
    const out: Segment[] = [];
    let from = 0;
    for (const m of text.matchAll(re)) {
      if (m.index > from) out.push(text.slice(from, m.index));
      out.push(byContent.get(m[0]) ?? 0);
      from = m.index + m[0].length;
    }
    if (from < text.length) out.push(text.slice(from));
    return out;
  };
}

/**
 * Whether a text's pieces up to the end of an added token are the same whatever text follows: true
 * unless one added token holds another inside it, the one case where a match could start before
 * that end and run past it. A chat's next turn then keeps the pieces of the turn before.
 */
export function prefixStable(tokens: readonly AddedToken[]): boolean {
  // Checking every pair of thousands of added tokens would cost a model's load seconds; such a
  // vocabulary simply encodes every turn's pieces through the cache.
  if (tokens.length > 1024) return false;
  const byId = new Map<number, string>();
  for (const t of tokens) {
    // Two texts under one id would leave a piece's length in the text unknown from its id.
    const seen = byId.get(t.id);
    if (seen !== undefined && seen !== t.content) return false;
    byId.set(t.id, t.content);
  }
  const contents = [...new Set(tokens.map((t) => t.content).filter((c) => c !== ''))];
  return contents.every((a) => contents.every((b) => a === b || !a.includes(b)));
}

/** How many leading UTF-16 code units two strings have in common. */
export function commonPrefixChars(a: string, b: string): number {
  return commonRunChars(a, 0, b, 0, Math.min(a.length, b.length));
}

/** How many of the `n` code units from a[i] and from b[j] on are the same, counted from the start. */
export function commonRunChars(a: string, i: number, b: string, j: number, n: number): number {
  let k = 0;
  while (k < n && a.charCodeAt(i + k) === b.charCodeAt(j + k)) k++;
  return k;
}

/** Hits and misses of a SegmentCache, in UTF-16 code units of text. */
export interface SegmentStats {
  hitChars: number;
  missChars: number;
  /** What the cache holds now, read from its generations. */
  readonly entries: number;
  readonly bytes: number;
}

// What an entry costs: its key (two bytes a code unit), its ids, and the Map's own overhead.
const entryBytes = (text: string, ids: Uint32Array): number => text.length * 2 + ids.byteLength + 96;

/** Segment ids by segment text, bounded in bytes; pieces used since the last turn-over of its generations are kept. */
export class SegmentCache {
  readonly #entries: Generations<Uint32Array>;
  readonly stats: SegmentStats;

  constructor(o: { maxBytes: number }) {
    const entries = new Generations({ maxBytes: o.maxBytes, costOf: entryBytes });
    this.#entries = entries;
    this.stats = {
      hitChars: 0,
      missChars: 0,
      get entries() {
        return entries.entries;
      },
      get bytes() {
        return entries.bytes;
      },
    };
  }

  /** The ids of `text`, marked as just used; undefined (and counted as a miss) when not held. */
  get(text: string): Uint32Array | undefined {
    const ids = this.#entries.get(text);
    if (ids === undefined) this.stats.missChars += text.length;
    else this.stats.hitChars += text.length;
    return ids;
  }

  /** Keeps `ids` for `text`; a segment bigger than half the bound is not kept. */
  set(text: string, ids: Uint32Array): void {
    this.#entries.set(text, ids);
  }
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

// Components that work on one piece at a time, whatever comes before or after it.
const pieceNormalizers = new Set(['NFC', 'NFD', 'NFKC', 'NFKD', 'Lowercase', 'Strip', 'StripAccents', 'Replace', 'Prepend', 'BertNormalizer', 'Precompiled', 'ByteLevel']);
const piecePreTokenizers = new Set([
  'ByteLevel', 'Split', 'Whitespace', 'WhitespaceSplit', 'Punctuation', 'Digits', 'Metaspace', 'BertPreTokenizer', 'UnicodeScripts', 'CharDelimiterSplit',
]);

function componentProblem(kind: string, known: ReadonlySet<string>, c: unknown): string | undefined {
  if (c === null || c === undefined) return undefined;
  if (!isRecord(c) || typeof c.type !== 'string') return `${kind} is not an object with a type`;
  if (c.type === 'Sequence') {
    const parts = c.normalizers ?? c.pretokenizers;
    if (!Array.isArray(parts)) return `${kind} Sequence has no list`;
    for (const p of parts) {
      const why = componentProblem(kind, known, p);
      if (why !== undefined) return why;
    }
    return undefined;
  }
  if (!known.has(c.type)) return `${kind} ${c.type} is not known to work piece by piece`;
  // Metaspace's "first" marks only the piece at offset 0 of the whole text: a piece's ids depend on
  // whether it comes first.
  if (c.type === 'Metaspace' && (c.prepend_scheme === 'first' || (c.prepend_scheme === undefined && c.add_prefix_space === true))) {
    return `${kind} Metaspace prepends to the first piece only`;
  }
  return undefined;
}

/** Why a tokenizer.json's pieces cannot be encoded apart, or undefined when they can. */
export function dependentSegments(tokenizerJson: unknown): string | undefined {
  if (!isRecord(tokenizerJson)) return 'tokenizer.json is not an object';
  const added = tokenizerJson.added_tokens;
  if (!Array.isArray(added)) return 'tokenizer.json has no added_tokens list';
  for (const t of added) {
    if (!isRecord(t)) return 'an added token is not an object';
    // lstrip/rstrip take the neighbours' spaces into the token; single_word looks at the
    // neighbours; a normalized token is matched after normalizing, which our split does not see.
    for (const k of ['lstrip', 'rstrip', 'single_word', 'normalized'] as const) {
      if (t[k] === true) return `added token ${JSON.stringify(t.content)} has ${k}`;
    }
  }
  return componentProblem('normalizer', pieceNormalizers, tokenizerJson.normalizer) ?? componentProblem('pre_tokenizer', piecePreTokenizers, tokenizerJson.pre_tokenizer);
}

/** The added tokens of a tokenizer.json, for the splitter. */
export function addedTokensOf(tokenizerJson: unknown): AddedToken[] {
  if (!isRecord(tokenizerJson) || !Array.isArray(tokenizerJson.added_tokens)) return [];
  const out: AddedToken[] = [];
  for (const t of tokenizerJson.added_tokens) {
    if (isRecord(t) && typeof t.id === 'number' && typeof t.content === 'string') out.push({ id: t.id, content: t.content });
  }
  return out;
}
