// The sim as an embedding model (vLLM's --runner pooling): POST /v1/embeddings answered as vLLM
// answers it, each vector a function of the input's token ids alone (sha256 of the ids, stretched
// to the model's size and normalized), so the same input gives the same vector on every replica and
// every run. The sim's generating routes answer as vLLM's do under the pooling runner, and the
// embeddings route as under the generating one.
import { createHash, randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { RequestError } from '../errors/index.js';
import { embeddingBase64, parseEmbeddingRequest, type EmbeddingRequest } from '../limits/index.js';
import { sendJson } from './http-io.js';
import { SimRequestError } from './openai.js';
import type { SimTokenizer } from './tokenizer.js';

type Route = (req: IncomingMessage, res: ServerResponse, body: () => Promise<unknown>) => Promise<void>;

/** What the embedding routes need of the sim around them. */
export interface EmbeddingParts {
  readonly runner: 'generate' | 'pooling';
  /** The length of every vector (--embedding-dimensions). */
  readonly dimensions: number;
  /** Whether a request may ask for fewer dimensions (a Matryoshka model: vLLM's is_matryoshka). */
  readonly matryoshka: boolean;
  readonly maxModelLen: number;
  readonly prefillTokensPerS: number;
  readonly tokenizer: () => SimTokenizer;
  /** The served name the request's model resolves to; throws vLLM's 404 for another. */
  readonly model: (name: string) => string;
  readonly signal: AbortSignal;
}

/** A unit vector of `size` from the token ids alone. */
export function simEmbedding(ids: readonly number[], size: number): number[] {
  const seed = Buffer.alloc(ids.length * 4);
  for (const [i, id] of ids.entries()) seed.writeUInt32LE(id, i * 4);
  const out: number[] = [];
  for (let block = 0; out.length < size; block++) {
    const h = createHash('sha256').update(seed).update(String(block)).digest();
    for (let i = 0; i + 2 <= h.length && out.length < size; i += 2) out.push(h.readUInt16LE(i) / 32_767.5 - 1);
  }
  return normalized(out);
}

function normalized(v: readonly number[]): number[] {
  const norm = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  return norm === 0 ? [...v] : v.map((x) => x / norm);
}

// vLLM's refusal of an API its runner does not serve, word for word.
const notServed = (api: string): SimRequestError => new SimRequestError(`The model does not support ${api} API`);

// vLLM's dimension checks: only a Matryoshka model may shorten its vectors, and never to zero.
function checkDimensions(p: EmbeddingParts, model: string, dims: number | undefined): void {
  if (dims === undefined) return;
  if (!p.matryoshka) throw new SimRequestError(`Model "${model}" does not support matryoshka representation, changing output dimensions will lead to poor results.`, { param: 'dimensions' });
  if (dims > p.dimensions) throw new SimRequestError(`Dimensions must be less than or equal to ${p.dimensions}, the model's hidden size`, { param: 'dimensions' });
}

// The request as vLLM's validation takes it, its refusals as the sim's 400s.
function parsed(body: unknown): EmbeddingRequest {
  try {
    return parseEmbeddingRequest(body);
  } catch (e) {
    if (e instanceof RequestError) throw new SimRequestError(e.message, { param: e.param });
    throw e;
  }
}

/** The routes of an embedding sim (or, for a generating one, its refusal of embeddings). */
export function embeddingRoutes(p: EmbeddingParts): Record<string, Record<string, Route>> {
  if (p.runner === 'generate') return { '/v1/embeddings': { POST: () => Promise.reject(notServed('Embeddings')) } };
  const embed: Route = async (_req, res, body) => {
    const tk = p.tokenizer();
    const r = parsed(await body());
    const model = p.model(r.model);
    checkDimensions(p, model, r.dimensions);
    const ids = await Promise.all(r.inputs.map((x) => ('ids' in x ? x.ids : tk.encode(x.text, true))));
    for (const one of ids) {
      if (one.length > p.maxModelLen) {
        throw new SimRequestError(
          `This model's maximum context length is ${p.maxModelLen} tokens. However, you requested ${one.length} tokens in the input for embedding generation. Please reduce the length of the input.`,
          { param: 'input' },
        );
      }
    }
    const promptTokens = ids.reduce((n, x) => n + x.length, 0);
    // The prefill an embedding costs, so a bench sees load; there is no decode.
    await sleep((promptTokens / p.prefillTokensPerS) * 1000, undefined, { signal: p.signal });
    const size = r.dimensions ?? p.dimensions;
    const data = ids.map((one, index) => {
      // As vLLM: a shortened Matryoshka vector is cut, then normalized again.
      const v = normalized(simEmbedding(one, p.dimensions).slice(0, size));
      return { index, object: 'embedding', embedding: r.encodingFormat === 'base64' ? embeddingBase64(v) : v };
    });
    sendJson(res, 200, {
      id: `embd-${randomBytes(16).toString('hex')}`,
      object: 'list',
      created: Math.floor(Date.now() / 1000),
      model,
      data,
      usage: { prompt_tokens: promptTokens, total_tokens: promptTokens, completion_tokens: 0, prompt_tokens_details: null },
    });
  };
  const refuse = (api: string): Record<string, Route> => ({ POST: () => Promise.reject(notServed(api)) });
  return { '/v1/embeddings': { POST: embed }, '/v1/chat/completions': refuse('Chat Completions'), '/v1/completions': refuse('Completions') };
}
