// The sim's HTTP plumbing beside its routes: bounded JSON bodies in, JSON out, and a chat rendered
// with vLLM's refusals (an untrusted request template, a template error as a 400).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { parseBoundedJson } from '../limits/index.js';
import { ChatError } from '../tokenize/index.js';
import { SimRequestError } from './openai.js';
import type { ChatRender } from './openai.js';
import type { SimTokenizer } from './tokenizer.js';

const maxBodyBytes = 64 * 1024 * 1024;
// Python's json stops near 1000 levels; a sim that overflowed its stack would answer 500, not 400.
const MAX_JSON_DEPTH = 256;

// How long a trusted request template may render before the request is refused.
const REQUEST_TEMPLATE_TIMEOUT_MS = 2_000;

/** A chat rendered as vLLM renders it, its refusals as 400s. */
export async function renderChecked(tk: SimTokenizer, r: ChatRender, trusted: boolean): Promise<string> {
  if (r.chatTemplate !== undefined && !trusted) {
    // vLLM's refusal without --trust-request-chat-template, word for word.
    throw new SimRequestError(
      'Chat template is passed with request, but --trust-request-chat-template is not set. Refused request with untrusted chat template.',
      { param: 'chat_template' },
    );
  }
  // The model's template renders tool numbers as vLLM does (1.0 as 1.0) where it can. A chat it
  // cannot (NotExactHere: only the interpreter renders it), or that fails, and a request's
  // template, which runs on another thread where the numbers would lose their class, render them
  // as JS holds them, and that render reports the chat's errors as ever.
  if (r.chatTemplate === undefined && r.exact !== undefined) {
    try {
      return tk.renderChat(r.exact.messages, r.exact);
    } catch (e) {
      if (!(e instanceof ChatError)) throw e;
    }
  }
  try {
    return r.chatTemplate === undefined ? tk.renderChat(r.messages, r) : await tk.renderRequestTemplate(r.messages, r, REQUEST_TEMPLATE_TIMEOUT_MS);
  } catch (e) {
    // A template error is the client's input meeting the model's template: a 400, as in vLLM.
    if (e instanceof ChatError) throw new SimRequestError(e.message, { param: r.chatTemplate === undefined ? e.param : 'chat_template' });
    throw new SimRequestError(`chat template: ${e instanceof Error ? e.message : String(e)}`, { param: r.chatTemplate === undefined ? 'messages' : 'chat_template' });
  }
}

/** Answers `body` as JSON. */
export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }).end(text);
}

/** Reads a bounded JSON body; too big or not JSON is a 4xx. */
export async function readJson(req: IncomingMessage): Promise<{ value: unknown; bytes: Buffer }> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    const b = c as Buffer;
    size += b.length;
    if (size > maxBodyBytes) throw new SimRequestError(`the request body is over ${maxBodyBytes} bytes`, { status: 413 });
    chunks.push(b);
  }
  const bytes = Buffer.concat(chunks, size);
  try {
    return { value: parseBoundedJson(bytes, { maxDepth: MAX_JSON_DEPTH, maxBytes: maxBodyBytes }, 'the request body'), bytes };
  } catch (e) {
    throw new SimRequestError(e instanceof Error ? e.message : String(e));
  }
}
