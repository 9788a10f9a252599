// The encoder the workers run: a text is cut at added tokens, each piece's ids come from the cache
// or are encoded (all misses in one call), and the ids are laid end to end. For the first few texts
// it also encodes whole and compares, so a tokenizer whose pieces turn out not to be independent
// (something dependentSegments could not see) goes back to whole encodes instead of giving wrong ids.
import { LlmgwError } from '../errors/index.js';
import { chatInputOf, renderChatParts } from './chat.js';
import type { TokenizerModel } from './model.js';
import { concatIds, firstDifference, selfCheckMaxChars } from './model.js';
import { Generations } from './generations.js';
import { commonRunChars, SegmentCache } from './segments.js';

/** Counts of one encoder: how texts were encoded and what the cache saved. */
export interface EncoderStats {
  incremental: number;
  whole: number;
  /** Texts that began with an earlier text's pieces, and the characters whose ids were taken from it instead of looked up. */
  extended: number;
  extendedChars: number;
  /** Why this encoder stopped encoding by pieces, when it did. */
  broken: string | undefined;
}

/** What encodeExtending answers: the ids, and the earlier text's ids they begin with, when one was found. */
export interface Encoded {
  /** The ids. When they are also `kept`, the encoder holds the same array: copy before moving or writing it. */
  readonly ids: Uint32Array;
  /** The remembered ids of an earlier text this one extends (not to be moved), and how many leading ids the two share. */
  readonly base: Uint32Array | undefined;
  readonly same: number;
  /** The ids remembered for this text, the `base` a later text that extends it will name; undefined when it was not kept. */
  readonly kept: Uint32Array | undefined;
}

// An encoded text as kept for the next turn: the strings it was made of, its ids, and at each end
// of an added token the text offset and the id count there (pieces up to such an end do not depend
// on what follows).
interface Recent {
  readonly parts: readonly string[];
  readonly length: number;
  readonly ids: Uint32Array;
  /** Pairs (char offset, id count), ascending. */
  readonly ends: Int32Array;
}

const lengthOf = (parts: readonly string[]): number => parts.reduce((n, p) => n + p.length, 0);

/**
 * How many leading characters two texts given as parts have in common. Parts at the same place
 * that are the same string compare at once (a conversation's unchanged messages cost nothing);
 * elsewhere the characters are compared across part boundaries, so two renders of one text cut
 * differently (a template's checked renders give one part, its compiled ones many) still share
 * all of it.
 */
export function sharedChars(a: readonly string[], b: readonly string[]): number {
  let chars = 0;
  let i = 0;
  let j = 0;
  // Offsets into a[i] and b[j] once the two cuts have parted.
  let ai = 0;
  let bj = 0;
  while (i < a.length && j < b.length) {
    const x = a[i] ?? '';
    const y = b[j] ?? '';
    if (ai === 0 && bj === 0 && x === y) {
      chars += x.length;
      i++;
      j++;
      continue;
    }
    const n = Math.min(x.length - ai, y.length - bj);
    const k = commonRunChars(x, ai, y, bj, n);
    chars += k;
    if (k < n) return chars;
    ai += n;
    bj += n;
    if (ai === x.length) [i, ai] = [i + 1, 0];
    if (bj === y.length) [j, bj] = [j + 1, 0];
  }
  return chars;
}

// The text of `parts` from char `from` on, built from the parts it spans only.
function textFrom(parts: readonly string[], from: number): string {
  let at = 0;
  for (let i = 0; i < parts.length; i++) {
    const p = parts[i] ?? '';
    if (at + p.length > from) return p.slice(from - at) + parts.slice(i + 1).join('');
    at += p.length;
  }
  return '';
}

// The first `n` characters of `parts`.
function headOf(parts: readonly string[], n: number): string {
  let s = '';
  for (const p of parts) {
    if (s.length >= n) break;
    s += p.slice(0, n - s.length);
  }
  return s;
}

// Texts are found again by their first characters: a conversation keeps its opening, and several
// that share a system prompt are told apart by the longest run of pieces in common. A text shorter
// than that is encoded from the cache alone: there is little to take from an earlier one.
const headChars = 64;
const perHead = 4;
const recentCost = (r: Recent): number => r.length * 2 + r.parts.length * 16 + r.ids.byteLength + r.ends.byteLength + 96;

/**
 * Encodes texts piece by piece through a SegmentCache, falling back to whole encodes where unsafe.
 * A text that begins with an earlier one's pieces (a conversation's next turn) takes their ids
 * as they were and encodes only what follows the last added token they share.
 */
export class IncrementalEncoder {
  readonly model: TokenizerModel;
  readonly cache: SegmentCache;
  #checksLeft: number;
  readonly stats: EncoderStats;
  readonly #recentBytes: number;
  // The texts remembered by their heads, most recently used first.
  readonly #recent: Generations<readonly Recent[]>;

  constructor(model: TokenizerModel, o: { cacheBytes: number; selfChecks: number; recentBytes?: number }) {
    this.model = model;
    this.cache = new SegmentCache({ maxBytes: o.cacheBytes });
    this.#checksLeft = o.selfChecks;
    this.#recentBytes = o.recentBytes ?? o.cacheBytes / 2;
    this.#recent = new Generations({ maxBytes: this.#recentBytes, costOf: (_, list) => list.reduce((n, r) => n + recentCost(r), 0) });
    this.stats = { incremental: 0, whole: 0, extended: 0, extendedChars: 0, broken: model.dependent };
  }

  /** The ids of `text` (a string, or the strings it is made of), as the engine's tokenizer gives them; a buffer of our own. */
  async encode(text: string | readonly string[], addSpecialTokens: boolean): Promise<Uint32Array> {
    const r = await this.encodeExtending(text, addSpecialTokens);
    return r.kept === r.ids ? r.ids.slice() : r.ids;
  }

  /**
   * The ids of `text`, and the earlier text's ids they begin with, for a caller that keeps work per
   * text (block hashes). Given as the strings it is made of (renderChatParts), the text is never
   * built whole: only what follows the part shared with an earlier text.
   */
  async encodeExtending(text: string | readonly string[], addSpecialTokens: boolean): Promise<Encoded> {
    const m = this.model;
    const parts = typeof text === 'string' ? [text] : text;
    const length = lengthOf(parts);
    const around = addSpecialTokens ? m.around : { before: new Uint32Array(0), after: new Uint32Array(0) };
    if (this.stats.broken !== undefined || around === undefined) {
      this.stats.whole++;
      return { ids: await m.encodeWhole(parts.join(''), addSpecialTokens), base: undefined, same: 0, kept: undefined };
    }
    const head = `${addSpecialTokens ? '1' : '0'}${headOf(parts, headChars)}`;
    const extending = m.prefixStable && this.#recentBytes > 0 && length >= headChars;
    const shared = extending ? this.#longestShared(head, parts) : undefined;
    const start = shared?.chars ?? 0;
    const segments = m.split(textFrom(parts, start));
    const missing = new Set<string>();
    const found = new Map<string, Uint32Array>();
    for (const s of segments) {
      if (typeof s !== 'string' || found.has(s) || missing.has(s)) continue;
      const ids = this.cache.get(s);
      if (ids === undefined) missing.add(s);
      else found.set(s, ids);
    }
    const texts = [...missing];
    const encoded = await m.encodePieces(texts);
    texts.forEach((t, i) => {
      const ids = encoded[i] ?? new Uint32Array(0);
      found.set(t, ids);
      this.cache.set(t, ids);
    });
    const base = shared?.recent;
    const kept = shared?.ids ?? around.before.length;
    const pieces: Uint32Array[] = [base === undefined ? around.before : base.ids.subarray(0, kept)];
    const ends: number[] = base === undefined ? [] : Array.from(base.ends.subarray(0, 2 * (shared?.index ?? 0)));
    let chars = start;
    let count = kept;
    for (const s of segments) {
      const ids = typeof s === 'number' ? Uint32Array.of(s) : (found.get(s) ?? new Uint32Array(0));
      pieces.push(ids);
      count += ids.length;
      chars += typeof s === 'number' ? (m.added.get(s)?.length ?? 0) : s.length;
      if (typeof s === 'number') ends.push(chars, count);
    }
    pieces.push(around.after);
    const ids = concatIds(pieces);
    this.stats.incremental++;
    if (shared !== undefined) {
      this.stats.extended++;
      this.stats.extendedChars += start;
    }
    if (this.#checksLeft > 0 && length <= selfCheckMaxChars) {
      this.#checksLeft--;
      const whole = await m.encodeWhole(parts.join(''), addSpecialTokens);
      const at = firstDifference(ids, whole);
      if (at !== undefined) {
        this.stats.broken = `pieces encoded apart differ from the whole text at token ${at}`;
        return { ids: whole, base: undefined, same: 0, kept: undefined };
      }
    }
    // Kept only when the pieces were laid as the text reads (their lengths add up to it): anything
    // else would mark ends at the wrong offsets.
    // The array itself is kept: a caller that moves ids copies them (most only read them, and a
    // 100k-token prompt's copy is 400 KB each turn).
    const recent = extending && chars === length ? { parts, length, ids, ends: Int32Array.from(ends) } : undefined;
    const remembered = recent !== undefined && this.#remember(head, recent);
    return { ids, base: base?.ids, same: base === undefined ? 0 : kept, kept: remembered ? recent.ids : undefined };
  }

  // The remembered text sharing the most leading pieces with `parts`: how many of its ends
  // (index), and the char offset and id count at the last of them.
  #longestShared(head: string, parts: readonly string[]): { recent: Recent; index: number; chars: number; ids: number } | undefined {
    let best: { recent: Recent; index: number; chars: number; ids: number } | undefined;
    for (const r of this.#recent.get(head) ?? []) {
      const last = r.ends.length / 2;
      // A text whose every piece is shorter than the best found cannot beat it.
      if (last === 0 || (best !== undefined && (r.ends[2 * (last - 1)] ?? 0) <= best.chars)) continue;
      const same = sharedChars(r.parts, parts);
      // The last end of an added token inside the shared characters, by halving.
      let lo = 0;
      let hi = last;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if ((r.ends[2 * (mid - 1)] ?? 0) <= same) lo = mid;
        else hi = mid - 1;
      }
      const chars = lo === 0 ? 0 : (r.ends[2 * (lo - 1)] ?? 0);
      if (lo > 0 && (best === undefined || chars > best.chars)) best = { recent: r, index: lo, chars, ids: r.ends[2 * lo - 1] ?? 0 };
    }
    if (best !== undefined) this.#touch(head, best.recent);
    return best;
  }

  #touch(head: string, r: Recent): void {
    const list = this.#recent.get(head);
    if (list !== undefined && list[0] !== r) this.#recent.set(head, [r, ...list.filter((x) => x !== r)]);
  }

  #remember(head: string, r: Recent): boolean {
    // A text the new one begins with is dropped: the new one holds all of its pieces and more.
    const keep = (this.#recent.get(head) ?? []).filter((x) => sharedChars(x.parts, r.parts) < x.length).slice(0, perHead - 1);
    // A list too big to keep whole may still keep the new text alone.
    return this.#recent.set(head, [r, ...keep]) || this.#recent.set(head, [r]);
  }
}

/** The text a generation body is encoded from (as the strings it is made of), and whether special tokens are added, as vLLM decides. */
export interface PromptText {
  readonly parts: readonly string[];
  readonly addSpecialTokens: boolean;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The prompt text of a chat or completions body: a chat rendered with the model's template. Throws for what cannot be tokenized here. */
export function promptTextOf(endpoint: 'chat' | 'completions', body: unknown, model: TokenizerModel): PromptText {
  if (!isRecord(body)) throw new LlmgwError('LLMGW_PROMPT_SHAPE', 'the request body is not a JSON object');
  if (endpoint === 'chat') {
    const input = chatInputOf(body);
    // A template a client sent is code: the engine renders it on a thread it can stop at a
    // deadline; a pool thread stuck in its loop would stall every request's routing.
    if (input.chatTemplate !== undefined || (input.chatTemplateKwargs !== undefined && 'chat_template' in input.chatTemplateKwargs)) {
      throw new LlmgwError('LLMGW_PROMPT_SHAPE', "a request's own chat template is not rendered in the gateway; the engine's /tokenize renders it");
    }
    return { parts: renderChatParts(model.template, input.messages, input), addSpecialTokens: input.addSpecialTokens };
  }
  let p = body.prompt;
  if (Array.isArray(p) && p.length === 1) p = p[0];
  if (typeof p !== 'string') throw new LlmgwError('LLMGW_PROMPT_SHAPE', 'prompt: not one string (token ids need no tokenizer; several prompts are not routed by content)');
  const add = body.add_special_tokens;
  return { parts: [p], addSpecialTokens: typeof add === 'boolean' ? add : true };
}
