// A GGUF's tokenizer rebuilt as a Hugging Face tokenizer.json, so the gateway tokenizes a llama.cpp
// model with the same machinery as the others: the `tokenizers` package for whole texts and the
// reference, our byte-level BPE for pieces (it reads the same JSON, self-checked against tokenizers).
// A tokenizer.json rather than a second BPE fed from GGUF arrays: one encoder per model type to keep
// exact, and the self-check that already guards our BPE guards this one too.
//
// Built to give llama.cpp's ids, not the original model's: llama.cpp applies no normalizer (Qwen's
// tokenizer.json has NFC; the GGUF does not say so and llama-server does not do it), so none is
// written, and only pre-tokenizers whose split llama.cpp runs as a known regex are accepted.
import { LlmgwError } from '../errors/index.js';
import type { GgufValue } from './format.js';

/** What the gateway needs of a GGUF to tokenize and render chats as llama-server does. */
export interface GgufTokenizer {
  /** A tokenizer.json (parsed) giving llama.cpp's ids for the model. */
  readonly tokenizerJson: Record<string, unknown>;
  /** tokenizer.chat_template, or undefined when the file has none (llama.cpp then uses ChatML). */
  readonly chatTemplate: string | undefined;
  /** The texts of the tokens the template sees as bos_token and eos_token. */
  readonly specialTokens: Readonly<Record<string, string>>;
  /** How many tokens and merges the file holds, for the log. */
  readonly vocabularySize: number;
  readonly mergeCount: number;
}

// llama.cpp's split regex for its pre-tokenizer types, by the names tokenizer.ggml.pre gives them
// (llama-vocab.cpp maps these four to LLAMA_VOCAB_PRE_TYPE_QWEN2), written as the original
// tokenizer.json writes it, which is what our BPE and tokenizers know. Another name is refused:
// a guessed split would tokenize wrong, and the verification would only turn it off later.
const qwen2Split = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
const splitOfPre = new Map<string, string>([
  ['qwen2', qwen2Split],
  ['deepseek-r1-qwen', qwen2Split],
  ['kormo', qwen2Split],
  ['f2llmv2', qwen2Split],
]);

// llama_token_type in gguf-py's constants.
const CONTROL = 3;
const USER_DEFINED = 4;

const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false };

function refuse(what: string): never {
  throw new LlmgwError('LLMGW_GGUF_TOKENIZER', `${what}; local tokenizing stays off for this model and its engine's /tokenize is used`);
}

function stringArray(md: ReadonlyMap<string, GgufValue>, key: string): readonly string[] {
  const v = md.get(key);
  if (v?.type !== 'array' || v.of !== 'string') refuse(`GGUF ${key} is ${v === undefined ? 'missing' : 'not an array of strings'}`);
  return v.value;
}

function tokenId(md: ReadonlyMap<string, GgufValue>, key: string, vocabularySize: number): number | undefined {
  const v = md.get(key);
  if (v === undefined) return undefined;
  const id = v.type === 'u64' || v.type === 'i64' ? Number(v.value) : 'value' in v && typeof v.value === 'number' ? v.value : NaN;
  if (!Number.isInteger(id) || id < 0 || id >= vocabularySize) refuse(`GGUF ${key} is ${'value' in v ? String(v.value) : 'an array'}, not a token id below ${vocabularySize}`);
  return id;
}

const flag = (md: ReadonlyMap<string, GgufValue>, key: string): boolean => {
  const v = md.get(key);
  return v?.type === 'bool' && v.value;
};

/**
 * The tokenizer of a GGUF's metadata, or an LLMGW_GGUF_TOKENIZER error saying why it cannot be
 * rebuilt exactly (a model type other than `gpt2`, a pre-tokenizer we have no split for, a broken
 * vocabulary). Pure: the metadata comes in as readGgufHeader gives it.
 */
export function ggufTokenizer(md: ReadonlyMap<string, GgufValue>): GgufTokenizer {
  const model = md.get('tokenizer.ggml.model');
  if (model?.type !== 'string' || model.value !== 'gpt2') {
    refuse(`GGUF tokenizer.ggml.model is ${model?.type === 'string' ? JSON.stringify(model.value) : 'missing'}; only "gpt2" (byte-level BPE) is rebuilt here`);
  }
  const pre = md.get('tokenizer.ggml.pre');
  const preName = pre?.type === 'string' ? pre.value : 'default';
  const split = splitOfPre.get(preName);
  if (split === undefined) refuse(`GGUF tokenizer.ggml.pre is ${JSON.stringify(preName)}; the gateway knows llama.cpp's split for ${[...splitOfPre.keys()].join(', ')}`);
  const tokens = stringArray(md, 'tokenizer.ggml.tokens');
  const mergeTexts = stringArray(md, 'tokenizer.ggml.merges');
  const types = md.get('tokenizer.ggml.token_type');
  if (types?.type !== 'array' || types.of !== 'i32' || types.value.length !== tokens.length) {
    refuse(`GGUF tokenizer.ggml.token_type is not an array of ${tokens.length} i32 (one per token)`);
  }
  // Tokens of the vocabulary go to the BPE model; control and user-defined ones are matched in the
  // text before it, as llama.cpp's special-token partition does with parse_special.
  const vocab: Record<string, number> = Object.create(null) as Record<string, number>;
  const added: Record<string, unknown>[] = [];
  for (let id = 0; id < tokens.length; id++) {
    const text = tokens[id] ?? '';
    const type = types.value[id];
    if (type === CONTROL || type === USER_DEFINED) {
      added.push({ id, content: text, single_word: false, lstrip: false, rstrip: false, normalized: false, special: type === CONTROL });
      continue;
    }
    if (vocab[text] !== undefined) refuse(`GGUF tokenizer.ggml.tokens holds ${JSON.stringify(text)} twice (ids ${vocab[text]} and ${id})`);
    vocab[text] = id;
  }
  // llama.cpp splits a merge at the first space after its first character (a merge of a space
  // itself stays whole on the left); the same here.
  const merges = mergeTexts.map((m, i) => {
    const at = m.indexOf(' ', 1);
    if (at < 0) refuse(`GGUF tokenizer.ggml.merges[${i}] is ${JSON.stringify(m)}, not "left right"`);
    return [m.slice(0, at), m.slice(at + 1)];
  });
  const bos = tokenId(md, 'tokenizer.ggml.bos_token_id', tokens.length);
  const eos = tokenId(md, 'tokenizer.ggml.eos_token_id', tokens.length);
  // For these pre-tokenizers llama.cpp adds neither unless the file says so.
  const addBos = flag(md, 'tokenizer.ggml.add_bos_token');
  const addEos = flag(md, 'tokenizer.ggml.add_eos_token');
  if ((addBos && bos === undefined) || (addEos && eos === undefined)) refuse('GGUF asks to add a BOS or EOS token but names no such token id');
  const specialTokens: Record<string, string> = {};
  if (bos !== undefined) specialTokens.bos_token = tokens[bos] ?? '';
  if (eos !== undefined) specialTokens.eos_token = tokens[eos] ?? '';
  const tokenRef = (id: number): { id: string; ids: number[]; tokens: string[] } => ({ id: tokens[id] ?? '', ids: [id], tokens: [tokens[id] ?? ''] });
  const single = [
    ...(addBos && bos !== undefined ? [{ SpecialToken: { id: tokens[bos], type_id: 0 } }] : []),
    { Sequence: { id: 'A', type_id: 0 } },
    ...(addEos && eos !== undefined ? [{ SpecialToken: { id: tokens[eos], type_id: 0 } }] : []),
  ];
  const postProcessor = !addBos && !addEos
    ? byteLevel
    : {
        type: 'TemplateProcessing',
        single,
        pair: [...single, { Sequence: { id: 'B', type_id: 1 } }],
        special_tokens: Object.fromEntries([bos, eos].flatMap((id) => (id === undefined ? [] : [[tokens[id], tokenRef(id)]]))),
      };
  const chatTemplate = md.get('tokenizer.chat_template');
  return {
    tokenizerJson: {
      version: '1.0',
      truncation: null,
      padding: null,
      added_tokens: added,
      normalizer: null,
      pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Split', pattern: { Regex: split }, behavior: 'Isolated', invert: false }, byteLevel] },
      post_processor: postProcessor,
      decoder: byteLevel,
      model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '', fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges },
    },
    chatTemplate: chatTemplate?.type === 'string' ? chatTemplate.value : undefined,
    specialTokens,
    vocabularySize: tokens.length,
    mergeCount: merges.length,
  };
}
