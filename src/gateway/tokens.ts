// Tier 1 of routing: the prompt's token ids, asked of a ready replica's /tokenize in the same form
// the generation endpoint will use (chat form with the same messages, or prompt form), because only
// the engine's own tokenizer and chat template give the ids it will hash. Cached, and bounded by a
// short timeout: a slow or failed tokenize sends the request to the approximate tier, never fails it.
import { createHash } from 'node:crypto';
import type { Dispatcher } from 'undici';
import { request } from 'undici';
import type { GenerationRequest } from './request.js';

/** The replica fields tokenizing needs. */
export interface TokenizeTarget {
  readonly url: URL;
  readonly apiKey?: string | undefined;
}

// Token ids are 4 bytes each; this bounds the cache at 128 MiB whatever the entry count says.
const maxCachedTokens = 32 * 1024 * 1024;

// The "tokens" list of a /tokenize answer, read straight from the bytes into a Uint32Array: for a
// 128k-token prompt JSON.parse takes the gateway's thread 4-5 times longer, and this runs on the
// thread that proxies everybody's streams. Anything unexpected goes to JSON.parse instead.
function scanTokens(b: Buffer): Uint32Array | undefined {
  const key = b.indexOf('"tokens"');
  if (key < 0 || b.indexOf('"tokens"', key + 1) >= 0) return undefined;
  let i = key + 8;
  while (b[i] === 0x20 || b[i] === 0x3a) i++;
  if (b[i] !== 0x5b) return undefined;
  const end = b.indexOf(0x5d, i);
  if (end < 0) return undefined;
  let commas = 0;
  for (let c = b.indexOf(0x2c, i); c >= 0 && c < end; c = b.indexOf(0x2c, c + 1)) commas++;
  // A buffer of our own (byteOffset 0), so the scorer may transfer it to a worker.
  const out = new Uint32Array(commas + 1);
  let n = 0;
  let v = -1;
  for (i++; i <= end; i++) {
    const c = b[i] ?? 0;
    if (c >= 0x30 && c <= 0x39) {
      v = (v < 0 ? 0 : v * 10) + (c - 0x30);
      if (v >= 2 ** 32) return undefined;
    } else if (c === 0x2c || c === 0x5d) {
      if (v < 0) return c === 0x5d && n === 0 && commas === 0 ? new Uint32Array(0) : undefined;
      out[n++] = v;
      v = -1;
    } else if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) return undefined;
  }
  return n === out.length ? out : undefined;
}

/** Token ids of a /tokenize answer (vLLM's `{"count", "max_model_len", "tokens", "token_strs"}`), or undefined. */
export function tokensOf(b: Buffer): Uint32Array | undefined {
  const fast = scanTokens(b);
  if (fast !== undefined) return fast;
  let parsed: unknown;
  try {
    parsed = JSON.parse(b.toString('utf8'));
  } catch {
    // Not JSON at all: the tier counts it as a bad response and routing goes on without tokens.
    return undefined;
  }
  const ids = typeof parsed === 'object' && parsed !== null && 'tokens' in parsed ? parsed.tokens : undefined;
  if (!Array.isArray(ids) || !ids.every((t): t is number => Number.isInteger(t) && t >= 0 && t < 2 ** 32)) return undefined;
  // A buffer of our own (byteOffset 0), so the scorer may transfer it to a worker.
  return Uint32Array.from(ids);
}

/** The /tokenize body for a generation request, or undefined when its prompt cannot be routed by content. */
export function tokenizeBody(r: GenerationRequest): Record<string, unknown> | undefined {
  if (r.messages !== undefined) {
    const b: Record<string, unknown> = { model: r.model, messages: r.messages, add_generation_prompt: true };
    for (const k of ['tools', 'chat_template', 'chat_template_kwargs', 'add_generation_prompt', 'continue_final_message']) {
      if (r.body[k] !== undefined) b[k] = r.body[k];
    }
    // vLLM refuses both at once; the client's choice of continue_final_message wins, as in generation.
    if (b.continue_final_message === true) b.add_generation_prompt = false;
    return b;
  }
  if (r.prompt !== undefined) return { model: r.model, prompt: r.prompt, add_special_tokens: r.body.add_special_tokens ?? true };
  return undefined;
}

/** Asks /tokenize, through an LRU cache of recent answers keyed by the body's digest. */
export class Tokenizer {
  readonly #dispatcher: Dispatcher;
  readonly #timeoutMs: number;
  readonly #maxEntries: number;
  readonly #cache = new Map<string, Uint32Array>();
  #cachedTokens = 0;

  constructor(o: { dispatcher: Dispatcher; timeoutMs: number; maxEntries: number }) {
    this.#dispatcher = o.dispatcher;
    this.#timeoutMs = o.timeoutMs;
    this.#maxEntries = o.maxEntries;
  }

  /** Token ids of the request's prompt, or a reason it has none (the router then skips to the approximate tier). */
  async tokens(
    r: GenerationRequest,
    target: TokenizeTarget,
    signal?: AbortSignal,
  ): Promise<{ ok: true; tokens: Uint32Array; cached: boolean } | { ok: false; reason: string }> {
    const body = tokenizeBody(r);
    if (body === undefined) return { ok: false, reason: 'no-text-prompt' };
    const json = JSON.stringify(body);
    const key = createHash('sha256').update(json).digest('base64');
    const hit = this.#cache.get(key);
    if (hit !== undefined) {
      this.#cache.delete(key);
      this.#cache.set(key, hit);
      return { ok: true, tokens: hit, cached: true };
    }
    const deadline = AbortSignal.timeout(this.#timeoutMs);
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (target.apiKey !== undefined) headers.authorization = `Bearer ${target.apiKey}`;
    try {
      const res = await request(new URL('/tokenize', target.url), {
        method: 'POST',
        dispatcher: this.#dispatcher,
        headers,
        body: json,
        signal: signal === undefined ? deadline : AbortSignal.any([signal, deadline]),
      });
      if (res.statusCode !== 200) {
        await res.body.dump();
        return { ok: false, reason: `status-${res.statusCode}` };
      }
      const tokens = tokensOf(Buffer.from(await res.body.arrayBuffer()));
      if (tokens === undefined) return { ok: false, reason: 'bad-response' };
      this.#remember(key, tokens);
      return { ok: true, tokens, cached: false };
    } catch (e) {
      // Timeouts and refused connections are expected here and cost only the precise tier.
      return { ok: false, reason: deadline.aborted ? 'timeout' : e instanceof Error ? e.name : 'error' };
    }
  }

  #remember(key: string, tokens: Uint32Array): void {
    if (this.#maxEntries === 0 || tokens.length > maxCachedTokens / 4) return;
    this.#cache.set(key, tokens);
    this.#cachedTokens += tokens.length;
    for (const [k, v] of this.#cache) {
      if (this.#cache.size <= this.#maxEntries && this.#cachedTokens <= maxCachedTokens) break;
      this.#cache.delete(k);
      this.#cachedTokens -= v.length;
    }
  }
}
