// The encoder the workers run: a text is cut at added tokens, each piece's ids come from the cache
// or are encoded (all misses in one call), and the ids are laid end to end. For the first few texts
// it also encodes whole and compares, so a tokenizer whose pieces turn out not to be independent
// (something dependentSegments could not see) goes back to whole encodes instead of giving wrong ids.
import { LlmgwError } from '../errors/index.js';
import { chatInputOf, renderChat } from './chat.js';
import type { TokenizerModel } from './model.js';
import { concatIds } from './model.js';
import { SegmentCache } from './segments.js';

/** Counts of one encoder: how texts were encoded and what the cache saved. */
export interface EncoderStats {
  incremental: number;
  whole: number;
  /** Why this encoder stopped encoding by pieces, when it did. */
  broken: string | undefined;
}

/** Encodes texts piece by piece through a SegmentCache, falling back to whole encodes where unsafe. */
export class IncrementalEncoder {
  readonly model: TokenizerModel;
  readonly cache: SegmentCache;
  #checksLeft: number;
  readonly stats: EncoderStats;

  constructor(model: TokenizerModel, o: { cacheBytes: number; selfChecks: number }) {
    this.model = model;
    this.cache = new SegmentCache({ maxBytes: o.cacheBytes });
    this.#checksLeft = o.selfChecks;
    this.stats = { incremental: 0, whole: 0, broken: model.dependent };
  }

  /** The ids of `text`, as the engine's tokenizer gives them; a buffer of our own. */
  async encode(text: string, addSpecialTokens: boolean): Promise<Uint32Array> {
    const m = this.model;
    const around = addSpecialTokens ? m.around : { before: new Uint32Array(0), after: new Uint32Array(0) };
    if (this.stats.broken !== undefined || around === undefined) {
      this.stats.whole++;
      return m.encodeWhole(text, addSpecialTokens);
    }
    const segments = m.split(text);
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
    const parts: Uint32Array[] = [around.before];
    for (const s of segments) parts.push(typeof s === 'number' ? Uint32Array.of(s) : (found.get(s) ?? new Uint32Array(0)));
    parts.push(around.after);
    const ids = concatIds(parts);
    this.stats.incremental++;
    if (this.#checksLeft > 0) {
      this.#checksLeft--;
      const whole = await m.encodeWhole(text, addSpecialTokens);
      const at = firstDifference(ids, whole);
      if (at !== undefined) {
        this.stats.broken = `pieces encoded apart differ from the whole text at token ${at}`;
        return whole;
      }
    }
    return ids;
  }
}

/** The first index where two id arrays differ (a length difference counts at the shorter's end), or undefined. */
export function firstDifference(a: ArrayLike<number>, b: ArrayLike<number>): number | undefined {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? undefined : n;
}

/** The text a generation body is encoded from, and whether special tokens are added, as vLLM decides. */
export interface PromptText {
  readonly text: string;
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
    return { text: renderChat(model.template, input.messages, input), addSpecialTokens: input.addSpecialTokens };
  }
  let p = body.prompt;
  if (Array.isArray(p) && p.length === 1) p = p[0];
  if (typeof p !== 'string') throw new LlmgwError('LLMGW_PROMPT_SHAPE', 'prompt: not one string (token ids need no tokenizer; several prompts are not routed by content)');
  const add = body.add_special_tokens;
  return { text: p, addSpecialTokens: typeof add === 'boolean' ? add : true };
}
