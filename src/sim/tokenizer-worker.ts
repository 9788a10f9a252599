// The Hugging Face tokenizer lives on this thread because Tokenizer.fromFile parses an 11 MB
// tokenizer.json synchronously for about two seconds: on the main thread that would freeze /health,
// which must answer 503 while the model "loads", and every stream already being served.
import { parentPort, workerData } from 'node:worker_threads';
import { Tokenizer } from 'tokenizers';

/** A request from the main thread; `id` pairs it with its answer. */
export type TokenizerRequest =
  | { readonly id: number; readonly op: 'encode'; readonly text: string; readonly addSpecialTokens: boolean }
  | { readonly id: number; readonly op: 'decode'; readonly ids: readonly number[]; readonly skipSpecialTokens: boolean }
  | { readonly id: number; readonly op: 'tokenStrs'; readonly ids: readonly number[] };

/** The answer to one request, or the load result (id -1). */
export type TokenizerReply =
  | { readonly id: number; readonly ok: true; readonly ids?: number[]; readonly text?: string; readonly strs?: string[]; readonly vocabSize?: number }
  | { readonly id: number; readonly ok: false; readonly reason: string };

const port = parentPort;
const file = (workerData as { file?: unknown } | null)?.file;
if (port !== null && typeof file === 'string') {
  let tk: Tokenizer | undefined;
  try {
    tk = Tokenizer.fromFile(file);
    port.postMessage({ id: -1, ok: true, vocabSize: tk.getVocabSize(true) } satisfies TokenizerReply);
  } catch (e) {
    port.postMessage({ id: -1, ok: false, reason: e instanceof Error ? e.message : String(e) } satisfies TokenizerReply);
  }
  const loaded = tk;
  port.on('message', (m: TokenizerRequest) => {
    if (loaded === undefined) return;
    answer(loaded, m).then(
      (r) => port.postMessage(r),
      (e: unknown) => port.postMessage({ id: m.id, ok: false, reason: e instanceof Error ? e.message : String(e) } satisfies TokenizerReply),
    );
  });
}

async function answer(tk: Tokenizer, m: TokenizerRequest): Promise<TokenizerReply> {
  switch (m.op) {
    case 'encode': {
      const enc = await tk.encode(m.text, null, { addSpecialTokens: m.addSpecialTokens });
      return { id: m.id, ok: true, ids: enc.getIds() };
    }
    case 'decode':
      return { id: m.id, ok: true, text: await tk.decode([...m.ids], m.skipSpecialTokens) };
    case 'tokenStrs':
      return { id: m.id, ok: true, strs: m.ids.map((i) => tk.idToToken(i) ?? '') };
  }
}
