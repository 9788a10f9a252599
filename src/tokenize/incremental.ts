// The encoder the workers run: a text is cut at added tokens, each piece's ids come from the cache
// or are encoded (all misses in one call), and the ids are laid end to end. For the first few texts
// it also encodes whole and compares, so a tokenizer whose pieces turn out not to be independent
// (something dependentSegments could not see) goes back to whole encodes instead of giving wrong ids.
import { LlmgwError } from '../errors/index.js';
import { chatInputOf, renderChatParts } from './chat.js';
import type { TokenizerModel } from './model.js';
import { firstDifference, selfCheckMaxChars } from './model.js';
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

/**
 * What encodeExtending hands its `use`: the ids, and the earlier text's ids they begin with, when
 * one was found. They stand while `use` runs; after, a later text may write over them (a remembered
 * text's ids share their buffer with the next turn's), so copy what you keep and never move them.
 */
export interface Encoded {
  readonly ids: Uint32Array;
  /** The remembered ids of an earlier text this one extends (not to be moved), and how many leading ids the two share. */
  readonly base: Uint32Array | undefined;
  readonly same: number;
  /** The ids remembered for this text, the `base` a later text that extends it will name; undefined when it was not kept. */
  readonly kept: Uint32Array | undefined;
}

/**
 * One buffer of ids that a conversation's turns grow in place. Each turn's text begins with the last
 * one's ids and adds a few hundred, so copying 100k ids into a new array each turn cost a worker
 * 70 us of a 1 ms decision, most of it the kernel zeroing the pages of a fresh 400 KB allocation
 * (measured in bench/tokenize). A text's ids are a view [0, n) of the run; a later text that begins
 * with the ids of the run's last text writes its own from where they part, over what followed.
 * `cuts` lists every offset written over, so a text can tell whether its ids still stand.
 */
class IdRun {
  readonly buf: Uint32Array;
  /** Ids written, from 0: the length of the last text laid in this run. */
  used = 0;
  readonly cuts: number[] = [];

  constructor(capacity: number) {
    this.buf = new Uint32Array(capacity);
  }

  /** Whether the first `n` ids are as they were when `cutsSeen` offsets had been written over. */
  holds(n: number, cutsSeen: number): boolean {
    for (let i = cutsSeen; i < this.cuts.length; i++) if ((this.cuts[i] ?? 0) < n) return false;
    return true;
  }
}

// Texts laid over each other in one run before it takes no more: a prompt sent again and again (a
// retry, a regenerate) cuts its run each time, and every cut is a number kept and read by `holds`.
const maxCuts = 64;

// Room left past a new run's ids for the turns that will extend it in place: an eighth (a 100k-token
// conversation's next 60 or so turns of 200 ids). None below 4096 ids: a short text's ids copy in
// less time than zeroing the room would take, and short chats are most of a gateway's requests.
const runCapacity = (ids: number): number => ids + (ids < 4096 ? 0 : Math.ceil(ids / 8));

// An encoded text as kept for the next turn: the strings it was made of, its ids, and at each end
// of an added token the text offset and the id count there (pieces up to such an end do not depend
// on what follows).
interface Recent {
  readonly parts: readonly string[];
  readonly length: number;
  readonly ids: Uint32Array;
  /** Pairs (char offset, id count), ascending. */
  readonly ends: Int32Array;
  /** The run its ids are a view of, and how many cuts the run had when they were laid. */
  readonly run: IdRun;
  readonly cutsSeen: number;
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

/** Texts shorter than this are not remembered for a next turn unless the encoder is told otherwise. */
export const defaultRememberMinChars = 2048;

// Texts are found again by their first characters: a conversation keeps its opening, and several
// that share a system prompt are told apart by the longest run of pieces in common.
const headChars = 64;
const perHead = 4;
// A text is charged its whole run: once a later text grows the run, the earlier one leaves the list.
const recentCost = (r: Recent): number => r.length * 2 + r.parts.length * 16 + r.run.buf.byteLength + r.ends.byteLength + 96;

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
  readonly #rememberMinChars: number;
  // The texts remembered by their heads, most recently used first.
  readonly #recent: Generations<readonly Recent[]>;

  /**
   * `rememberMinChars`: texts shorter than this (default defaultRememberMinChars) are encoded from the segment cache
   * alone and not remembered for a later text to extend. Re-encoding a short text from cached pieces
   * costs microseconds, while remembering it keeps its ids, their ends, a list entry and the key
   * chains hashed from them alive until the budget evicts them: with distinct short chats at the
   * event loop's rate, those mid-lived objects are what its collector spends its time on (26% of a
   * tokenize call's time, 11% without them, and 27 us a call down to 21; measured on the inline runner).
   */
  constructor(model: TokenizerModel, o: { cacheBytes: number; selfChecks: number; recentBytes?: number; rememberMinChars?: number }) {
    this.model = model;
    this.cache = new SegmentCache({ maxBytes: o.cacheBytes });
    this.#checksLeft = o.selfChecks;
    this.#recentBytes = o.recentBytes ?? o.cacheBytes / 2;
    this.#rememberMinChars = Math.max(headChars, o.rememberMinChars ?? defaultRememberMinChars);
    this.#recent = new Generations({ maxBytes: this.#recentBytes, costOf: (_, list) => list.reduce((n, r) => n + recentCost(r), 0) });
    this.stats = { incremental: 0, whole: 0, extended: 0, extendedChars: 0, broken: model.dependent };
  }

  /** Texts still to be encoded whole too, to check that pieces encode apart; none once they are known not to. */
  get selfChecksLeft(): number {
    return this.stats.broken === undefined ? this.#checksLeft : 0;
  }

  /** The ids of `text` (a string, or the strings it is made of), as the engine's tokenizer gives them; a buffer of our own. */
  encode(text: string | readonly string[], addSpecialTokens: boolean): Promise<Uint32Array> {
    return this.encodeExtending(text, addSpecialTokens, (r) => r.ids.slice());
  }

  /**
   * What `use` makes of the ids of `text` and the earlier text's ids they begin with, for a caller
   * that keeps work per text (block hashes). Given as the strings it is made of (renderChatParts),
   * the text is never built whole: only what follows the part shared with an earlier text. `use`
   * runs before anything else on this thread can (the ids are only sure to stand until it returns):
   * this thread's other tasks encode while this one waits for its pieces.
   */
  async encodeExtending<R>(text: string | readonly string[], addSpecialTokens: boolean, use: (e: Encoded) => R): Promise<R> {
    const m = this.model;
    const parts = typeof text === 'string' ? [text] : text;
    const length = lengthOf(parts);
    const around = addSpecialTokens ? m.around : { before: new Uint32Array(0), after: new Uint32Array(0) };
    if (this.stats.broken !== undefined || around === undefined) {
      this.stats.whole++;
      return use({ ids: await m.encodeWhole(parts.join(''), addSpecialTokens), base: undefined, same: 0, kept: undefined });
    }
    const extending = m.prefixStable && this.#recentBytes > 0 && length >= this.#rememberMinChars;
    // The key a text is remembered and found by; a text too short to remember needs none.
    const head = extending ? `${addSpecialTokens ? '1' : '0'}${headOf(parts, headChars)}` : undefined;
    const shared = head === undefined ? undefined : this.#longestShared(head, parts);
    const start = shared?.chars ?? 0;
    const base = shared?.recent;
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
    const check = this.#checksLeft > 0 && length <= selfCheckMaxChars;
    if (check) this.#checksLeft--;
    const whole = check ? await m.encodeWhole(parts.join(''), addSpecialTokens) : undefined;
    // From here to the return nothing waits, so no other task of this thread writes in the run. One
    // may have written over the base's ids while this one waited: then it starts over.
    const kept = shared?.ids ?? around.before.length;
    if (base !== undefined && !base.run.holds(kept, base.cutsSeen)) return this.encodeExtending(text, addSpecialTokens, use);
    const ends: number[] = base === undefined ? [] : Array.from(base.ends.subarray(0, 2 * (shared?.index ?? 0)));
    const pieces: Uint32Array[] = [];
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
    const total = count + around.after.length;
    // Kept only when the pieces were laid as the text reads (their lengths add up to it): anything
    // else would mark ends at the wrong offsets.
    const keepable = extending && chars === length;
    // Laid in the base's run when the base is the last text laid there and the run has room.
    const inPlace = keepable && base !== undefined && base.run.used === base.ids.length && total <= base.run.buf.length && base.run.cuts.length < maxCuts;
    const run = inPlace ? base.run : new IdRun(keepable ? runCapacity(total) : total);
    if (!inPlace) run.buf.set(base === undefined ? around.before : base.ids.subarray(0, kept));
    else if (kept < run.used) run.cuts.push(kept);
    let at = kept;
    for (const p of pieces) {
      run.buf.set(p, at);
      at += p.length;
    }
    run.used = total;
    const ids = run.buf.subarray(0, total);
    this.stats.incremental++;
    if (shared !== undefined) {
      this.stats.extended++;
      this.stats.extendedChars += start;
    }
    if (whole !== undefined) {
      const differs = firstDifference(ids, whole);
      if (differs !== undefined) {
        this.stats.broken = `pieces encoded apart differ from the whole text at token ${differs}`;
        return use({ ids: whole, base: undefined, same: 0, kept: undefined });
      }
    }
    const recent = keepable ? { parts, length, ids, ends: Int32Array.from(ends), run, cutsSeen: run.cuts.length } : undefined;
    const remembered = recent !== undefined && head !== undefined && this.#remember(head, recent);
    // Not kept, no later text may grow the run over its ids.
    if (!remembered) run.used = Infinity;
    return use({ ids, base: base?.ids, same: base === undefined ? 0 : kept, kept: remembered ? recent.ids : undefined });
  }

  // The remembered text sharing the most leading pieces with `parts`: how many of its ends
  // (index), and the char offset and id count at the last of them.
  #longestShared(head: string, parts: readonly string[]): { recent: Recent; index: number; chars: number; ids: number } | undefined {
    let best: { recent: Recent; index: number; chars: number; ids: number } | undefined;
    for (const r of this.#recent.get(head) ?? []) {
      // A text whose ids a later one wrote over leaves the list at the next remember.
      if (!r.run.holds(r.ids.length, r.cutsSeen)) continue;
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
    // A text the new one begins with is dropped: the new one holds all of its pieces and more. So is
    // one whose ids it wrote over.
    const keep = (this.#recent.get(head) ?? []).filter((x) => x.run.holds(x.ids.length, x.cutsSeen) && sharedChars(x.parts, r.parts) < x.length).slice(0, perHead - 1);
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

/**
 * The prompt text of a chat or completions body: a chat rendered with the model's template. Throws
 * for what cannot be tokenized here. `raw`, the body's bytes, is where its tools' numbers are read as written.
 */
export function promptTextOf(endpoint: 'chat' | 'completions', body: unknown, model: TokenizerModel, raw?: Uint8Array): PromptText {
  if (!isRecord(body)) throw new LlmgwError('LLMGW_PROMPT_SHAPE', 'the request body is not a JSON object');
  if (endpoint === 'chat') {
    const input = chatInputOf(body, raw);
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
