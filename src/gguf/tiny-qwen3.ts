// A deterministic random-weight model in llama.cpp's `qwen3` architecture carrying Qwen3's real
// tokenizer and chat template: a real engine runs it on a CPU, tokenizes and templates exactly as it
// would Qwen3, and caches prefixes per slot, while the weights (and so the words it answers) mean
// nothing. Pure: the tokenizer files come in as parsed JSON, the GGUF goes out as chunks.
import { LlmgwError } from '../errors/index.js';
import { encodeGguf, type GgufTensor, type GgufValue } from './format.js';

/** The shape of the model. The defaults keep the file small (tied embeddings, f16) and make prefill
 * take measurable time on two cores, where the 151k-token output layer dominates decoding. */
export interface TinyQwen3Shape {
  readonly layers: number;
  readonly embedding: number;
  readonly heads: number;
  readonly kvHeads: number;
  readonly feedForward: number;
  readonly contextTokens: number;
  readonly seed: number;
}

/** What the model is made of by default: 4 layers of width 128, 4 query and 2 KV heads of 32. */
export const tinyQwen3Shape: TinyQwen3Shape = { layers: 4, embedding: 128, heads: 4, kvHeads: 2, feedForward: 384, contextTokens: 16_384, seed: 1 };

/** The two files of a Hugging Face tokenizer, parsed: tokenizer.json and tokenizer_config.json. */
export interface HfTokenizerFiles {
  readonly tokenizer: unknown;
  readonly config: unknown;
}

// llama.cpp's token types (llama_token_type in gguf-py's constants).
const NORMAL = 1;
const CONTROL = 3;
const USER_DEFINED = 4;

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function bad(what: string): never {
  throw new LlmgwError('LLMGW_GGUF_FORMAT', `tokenizer files: ${what}; give the tokenizer.json and tokenizer_config.json of a byte-level BPE model such as Qwen3's`);
}

/** The vocabulary in id order, each token's llama.cpp type, and the merges as "a b" strings, as
 * gguf-py's gpt2 vocabulary writer lays them out. */
function vocabulary(files: HfTokenizerFiles): { tokens: string[]; types: Int32Array; merges: string[]; idOf: (t: string) => number } {
  const tj = files.tokenizer;
  if (!isRecord(tj) || !isRecord(tj.model) || !isRecord(tj.model.vocab) || !Array.isArray(tj.model.merges) || !Array.isArray(tj.added_tokens)) {
    bad('tokenizer.json has no model.vocab, model.merges and added_tokens');
  }
  const byId = new Map<number, { text: string; type: number }>();
  for (const [text, id] of Object.entries(tj.model.vocab)) {
    if (typeof id !== 'number') bad(`vocab entry ${JSON.stringify(text)} has id ${JSON.stringify(id)}`);
    byId.set(id, { text, type: NORMAL });
  }
  for (const a of tj.added_tokens) {
    if (!isRecord(a) || typeof a.id !== 'number' || typeof a.content !== 'string') bad('an added_tokens entry has no id and content');
    byId.set(a.id, { text: a.content, type: a.special === true ? CONTROL : USER_DEFINED });
  }
  const tokens: string[] = [];
  const types = new Int32Array(byId.size);
  for (let id = 0; id < byId.size; id++) {
    const t = byId.get(id);
    if (t === undefined) bad(`token ids are not contiguous: ${id} is missing below ${byId.size}`);
    tokens.push(t.text);
    types[id] = t.type;
  }
  const merges = tj.model.merges.map((m) => (Array.isArray(m) ? m.join(' ') : typeof m === 'string' ? m : bad('a merge is neither "a b" nor ["a", "b"]')));
  const ids = new Map(tokens.map((t, i) => [t, i]));
  return {
    tokens,
    types,
    merges,
    idOf: (t) => ids.get(t) ?? bad(`the special token ${JSON.stringify(t)} is not in the vocabulary`),
  };
}

// Numbers from a seed (xorshift32): the same inputs always make the same file, and twenty million
// weights take a fraction of a second. Their quality hardly matters: the weights mean nothing.
function xorshift32(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 4294967296;
  };
}

function seedOf(seed: number, name: string): number {
  let h = 0x811c9dc5 ^ seed;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

const f32Scratch = new Float32Array(1);
const u32Scratch = new Uint32Array(f32Scratch.buffer);

/** IEEE half precision of `x`, rounded to nearest even; the weights here stay well inside its range. */
export function toHalf(x: number): number {
  f32Scratch[0] = x;
  const bits = u32Scratch[0] ?? 0;
  const sign = (bits >>> 16) & 0x8000;
  const exp = ((bits >>> 23) & 0xff) - 127 + 15;
  const mant = bits & 0x7fffff;
  if (exp <= 0) {
    if (exp < -10) return sign;
    const m = (mant | 0x800000) >>> (1 - exp);
    return sign | ((m + 0x1000 + ((m >>> 13) & 1) - 1) >>> 13);
  }
  if (exp >= 31) return sign | 0x7c00;
  const rounded = (exp << 10) + ((mant + 0xfff + ((mant >>> 13) & 1)) >>> 13);
  return sign | rounded;
}

function randomTensor(seed: number, name: string, dims: readonly number[], scale: number): GgufTensor {
  const n = dims.reduce((a, d) => a * d, 1);
  const out = new Uint16Array(n);
  const next = xorshift32(seedOf(seed, name));
  for (let i = 0; i < n; i++) out[i] = toHalf((next() * 2 - 1) * scale);
  return { name, dims, type: 'f16', data: new Uint8Array(out.buffer) };
}

// RMS-norm weights of one: a random norm only adds noise the model cannot use.
function ones(name: string, n: number): GgufTensor {
  return { name, dims: [n], type: 'f32', data: new Uint8Array(new Float32Array(n).fill(1).buffer) };
}

/** The GGUF of a random-weight qwen3 model with these tokenizer files, as chunks to write in order. */
export function tinyQwen3Gguf(files: HfTokenizerFiles, shape: TinyQwen3Shape = tinyQwen3Shape): Uint8Array[] {
  const v = vocabulary(files);
  const cfg = isRecord(files.config) ? files.config : bad('tokenizer_config.json is not an object');
  const template = typeof cfg.chat_template === 'string' ? cfg.chat_template : bad('tokenizer_config.json has no chat_template');
  const eos = typeof cfg.eos_token === 'string' ? cfg.eos_token : bad('tokenizer_config.json has no eos_token');
  const pad = typeof cfg.pad_token === 'string' ? cfg.pad_token : eos;
  const { layers, embedding, heads, kvHeads, feedForward, seed } = shape;
  const headDim = embedding / heads;
  const u32 = (value: number): GgufValue => ({ type: 'u32', value });
  const metadata = new Map<string, GgufValue>([
    ['general.architecture', { type: 'string', value: 'qwen3' }],
    ['general.name', { type: 'string', value: 'llmgw tiny qwen3 (random weights)' }],
    ['general.file_type', u32(1)],
    ['qwen3.context_length', u32(shape.contextTokens)],
    ['qwen3.embedding_length', u32(embedding)],
    ['qwen3.block_count', u32(layers)],
    ['qwen3.feed_forward_length', u32(feedForward)],
    ['qwen3.attention.head_count', u32(heads)],
    ['qwen3.attention.head_count_kv', u32(kvHeads)],
    ['qwen3.attention.key_length', u32(headDim)],
    ['qwen3.attention.value_length', u32(headDim)],
    ['qwen3.rope.freq_base', { type: 'f32', value: 1_000_000 }],
    ['qwen3.attention.layer_norm_rms_epsilon', { type: 'f32', value: 1e-6 }],
    ['tokenizer.ggml.model', { type: 'string', value: 'gpt2' }],
    // The pre-tokenizer by name: llama.cpp picks Qwen2's split regex (the same as Qwen3's) from it.
    ['tokenizer.ggml.pre', { type: 'string', value: 'qwen2' }],
    ['tokenizer.ggml.tokens', { type: 'array', of: 'string', value: v.tokens }],
    ['tokenizer.ggml.token_type', { type: 'array', of: 'i32', value: v.types }],
    ['tokenizer.ggml.merges', { type: 'array', of: 'string', value: v.merges }],
    ['tokenizer.ggml.eos_token_id', u32(v.idOf(eos))],
    ['tokenizer.ggml.padding_token_id', u32(v.idOf(pad))],
    ['tokenizer.ggml.bos_token_id', u32(v.idOf(pad))],
    ['tokenizer.ggml.add_bos_token', { type: 'bool', value: cfg.add_bos_token === true }],
    ['tokenizer.chat_template', { type: 'string', value: template }],
  ]);
  const scaleOf = (fanIn: number): number => 1 / Math.sqrt(fanIn);
  // The output layer is the embedding's transpose (no output.weight): half the file, and llama.cpp
  // ties them itself when output.weight is absent.
  const tensors: GgufTensor[] = [randomTensor(seed, 'token_embd.weight', [embedding, v.tokens.length], 0.5), ones('output_norm.weight', embedding)];
  for (let i = 0; i < layers; i++) {
    const b = `blk.${i}`;
    tensors.push(
      ones(`${b}.attn_norm.weight`, embedding),
      randomTensor(seed, `${b}.attn_q.weight`, [embedding, heads * headDim], scaleOf(embedding)),
      randomTensor(seed, `${b}.attn_k.weight`, [embedding, kvHeads * headDim], scaleOf(embedding)),
      randomTensor(seed, `${b}.attn_v.weight`, [embedding, kvHeads * headDim], scaleOf(embedding)),
      randomTensor(seed, `${b}.attn_output.weight`, [heads * headDim, embedding], scaleOf(heads * headDim)),
      ones(`${b}.attn_q_norm.weight`, headDim),
      ones(`${b}.attn_k_norm.weight`, headDim),
      ones(`${b}.ffn_norm.weight`, embedding),
      randomTensor(seed, `${b}.ffn_gate.weight`, [embedding, feedForward], scaleOf(embedding)),
      randomTensor(seed, `${b}.ffn_up.weight`, [embedding, feedForward], scaleOf(embedding)),
      randomTensor(seed, `${b}.ffn_down.weight`, [feedForward, embedding], scaleOf(feedForward)),
    );
  }
  return encodeGguf(metadata, tensors);
}
