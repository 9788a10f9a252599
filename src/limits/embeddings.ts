// An embeddings request (POST /v1/embeddings) narrowed from its JSON, with OpenAI's bounds: one
// string, a list of strings, a list of token ids, or a list of such lists; float or base64 output;
// an optional positive `dimensions`. The gateway checks it before routing and the sim parses with
// it, so both refuse the same bodies.
import { RequestError } from '../errors/index.js';

/** OpenAI's bounds on one request: inputs per list, and tokens in all of them together. */
export const embeddingLimits = { maxInputs: 2048, maxTotalTokens: 300_000 } as const;

/** One input: text to tokenize, or the token ids themselves. */
export type EmbeddingInput = { readonly text: string } | { readonly ids: readonly number[] };

/** A checked embeddings request. */
export interface EmbeddingRequest {
  readonly model: string;
  readonly inputs: readonly EmbeddingInput[];
  readonly encodingFormat: 'float' | 'base64';
  readonly dimensions: number | undefined;
  /** The body's fields as sent, for an engine that is sent them with one more. */
  readonly body: Readonly<Record<string, unknown>>;
}

// OpenAI's own words for an input it cannot take, with the path of the bad part.
const invalid = (path: string): RequestError =>
  new RequestError('LLMGW_BAD_REQUEST', `'${path}' is invalid. Send a non-empty string, a list of up to ${embeddingLimits.maxInputs} non-empty strings, a non-empty list of token ids, or a list of such lists.`, 'input');

const isTokenId = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0;

function idsOf(v: readonly unknown[], path: string): number[] {
  if (v.length === 0 || !v.every(isTokenId)) throw invalid(path);
  return v.filter(isTokenId);
}

function inputsOf(input: unknown): EmbeddingInput[] {
  if (typeof input === 'string') {
    if (input === '') throw invalid('$.input');
    return [{ text: input }];
  }
  if (!Array.isArray(input) || input.length === 0) throw invalid('$.input');
  if (input.length > embeddingLimits.maxInputs) throw invalid('$.input');
  const first: unknown = input[0];
  if (typeof first === 'number') return [{ ids: idsOf(input, '$.input') }];
  return input.map((v: unknown, i): EmbeddingInput => {
    if (typeof v === 'string' && v !== '') return { text: v };
    if (Array.isArray(v)) return { ids: idsOf(v, `$.input[${i}]`) };
    throw invalid(`$.input[${i}]`);
  });
}

/** Narrows a parsed body to an embeddings request, or throws the OpenAI 400 naming the field. */
export function parseEmbeddingRequest(body: unknown): EmbeddingRequest {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new RequestError('LLMGW_BAD_JSON', 'the request body is not a JSON object; send {"model": ..., "input": ...}');
  const b: Readonly<Record<string, unknown>> = body as Record<string, unknown>;
  const model = b.model;
  if (typeof model !== 'string' || model === '') throw new RequestError('LLMGW_BAD_REQUEST', `model: ${JSON.stringify(model ?? null)} is not a model name; send the embedding model's name`, 'model');
  if (!('input' in b)) throw new RequestError('LLMGW_BAD_REQUEST', "you must provide an input: a string, a list of strings or a list of token ids", 'input');
  const inputs = inputsOf(b.input);
  const tokens = inputs.reduce((n, x) => n + ('ids' in x ? x.ids.length : 0), 0);
  if (tokens > embeddingLimits.maxTotalTokens) {
    throw new RequestError('LLMGW_BAD_REQUEST', `the inputs hold ${tokens} tokens, over the ${embeddingLimits.maxTotalTokens} one request may hold; send fewer in each request`, 'input');
  }
  const format = b.encoding_format ?? 'float';
  if (format !== 'float' && format !== 'base64') throw new RequestError('LLMGW_BAD_REQUEST', `encoding_format: ${JSON.stringify(format)} is not "float" or "base64"`, 'encoding_format');
  const dims = b.dimensions ?? undefined;
  if (dims === undefined) return { model, inputs, encodingFormat: format, dimensions: undefined, body: b };
  if (typeof dims !== 'number' || !Number.isInteger(dims) || dims < 1) {
    throw new RequestError('LLMGW_BAD_REQUEST', `dimensions: ${JSON.stringify(dims)} is not a whole number of 1 or more`, 'dimensions');
  }
  return { model, inputs, encodingFormat: format, dimensions: dims, body: b };
}

/** An embedding as OpenAI's base64 encoding carries it: its float32 values, little-endian. */
export function embeddingBase64(values: readonly number[]): string {
  const b = Buffer.alloc(values.length * 4);
  for (const [i, v] of values.entries()) b.writeFloatLE(v, i * 4);
  return b.toString('base64');
}
