// Where a prompt's token ids come from, the first fact of routing. Three sources behind the
// router's TokenSource: the client's own ids; the model's tokenizer run in the worker pool
// (rendered and encoded as vLLM does, incrementally); and a ready replica's /tokenize. The local
// tokenizer is verified, never trusted: the first requests of each model, and a sample after, are
// also asked of /tokenize; one difference turns local tokenization off for that model and routing
// goes back to /tokenize. Nothing here fails a request: no ids means the approximate tier decides.
// The router owns every wait here: each call takes its signal, no timer of its own.
import { createHash } from 'node:crypto';
import type { Dispatcher } from 'undici';
import { request } from 'undici';
import { firstDifference } from '../tokenize/index.js';
import type { GenerationRequest } from '../limits/index.js';
import type { Answer, GroupScore, ScoreHashOptions, ScoreRequest, TokenAsk, TokenFact, TokenizeApi, TokenizerLoads, TokenSource, TokenTarget, TurnPreparer } from './facts.js';

/** The replica fields tokenizing needs. */
export interface TokenizeTarget {
  readonly url: URL;
  readonly apiKey?: string | undefined;
  /** Whose /tokenize it serves; absent: vLLM's (the sim and SGLang speak it too). */
  readonly tokenizeApi?: TokenizeApi | undefined;
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

// The "prompt" of an /apply-template answer, or undefined.
function promptOf(b: Buffer): string | undefined {
  try {
    const parsed: unknown = JSON.parse(b.toString('utf8'));
    return typeof parsed === 'object' && parsed !== null && 'prompt' in parsed && typeof parsed.prompt === 'string' ? parsed.prompt : undefined;
  } catch {
    return undefined;
  }
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

// The chat keys that change what llama-server's template renders; the rest of a chat body (sampling,
// streaming) does not change the prompt, and some of it (n > 1) would make /apply-template refuse.
const llamaCppTemplateKeys = ['tools', 'tool_choice', 'parallel_tool_calls', 'chat_template_kwargs', 'add_generation_prompt', 'reasoning_format'];

/**
 * What llama-server is asked for a generation request's ids, or undefined when its prompt cannot be
 * routed by content: a chat's /apply-template body, or the text to tokenize. Both are tokenized as
 * its completions do, with special tokens added (BOS where the model wants one) and parsed.
 */
type LlamaCppAsk = { readonly applyTemplate: Record<string, unknown> } | { readonly content: string };
function llamaCppAsk(r: GenerationRequest): LlamaCppAsk | undefined {
  if (r.messages !== undefined) {
    const b: Record<string, unknown> = { messages: r.messages };
    for (const k of llamaCppTemplateKeys) if (r.body[k] !== undefined) b[k] = r.body[k];
    return { applyTemplate: b };
  }
  return r.prompt !== undefined ? { content: r.prompt } : undefined;
}

const llamaCppTokenize = (content: string): string => JSON.stringify({ content, add_special: true, parse_special: true });

/** A fact that carries the ids themselves (what /tokenize always answers). */
export type IdsFact = { ok: true; tokens: Uint32Array; via: 'engine' | 'cached'; owned: boolean } | { ok: false; reason: string };

/** Asks a replica's /tokenize, through an LRU cache of recent answers keyed by the body's digest. */
export class EngineTokenizer implements TokenSource {
  readonly #dispatcher: Dispatcher;
  readonly #maxEntries: number;
  readonly #cache = new Map<string, Uint32Array>();
  #cachedTokens = 0;

  constructor(o: { dispatcher: Dispatcher; maxEntries: number }) {
    this.#dispatcher = o.dispatcher;
    this.#maxEntries = o.maxEntries;
  }

  /**
   * Token ids of the request's prompt, or a reason it has none. A cached answer is shared: copy before
   * moving it. `cached: false` neither looks in the cache nor fills it.
   */
  async tokens(r: GenerationRequest, target: TokenizeTarget, o: Pick<TokenAsk, 'signal'> & { readonly cached?: boolean }): Promise<IdsFact> {
    const llamaCpp = target.tokenizeApi === 'llamacpp';
    const llama = llamaCpp ? llamaCppAsk(r) : undefined;
    const ask = llamaCpp ? llama : tokenizeBody(r);
    if (ask === undefined) return { ok: false, reason: 'no-text-prompt' };
    const json = JSON.stringify(ask);
    // The format is part of the key: the same request asked of another engine's API is another answer.
    const key = o.cached === false ? undefined : createHash('sha256').update(llamaCpp ? 'llamacpp:' : 'vllm:').update(json).digest('base64');
    const hit = key === undefined ? undefined : this.#cache.get(key);
    if (key !== undefined && hit !== undefined) {
      this.#cache.delete(key);
      this.#cache.set(key, hit);
      return { ok: true, tokens: hit, via: 'cached', owned: false };
    }
    try {
      let body = json;
      if (llama !== undefined) {
        const content = await this.#llamaCppText(llama, target, o.signal);
        if (typeof content !== 'string') return content;
        body = llamaCppTokenize(content);
      }
      const res = await this.#post('/tokenize', body, target, o.signal);
      if (!res.ok) return res;
      const tokens = tokensOf(res.body);
      if (tokens === undefined) return { ok: false, reason: 'bad-response' };
      if (key !== undefined) this.#remember(key, tokens);
      return { ok: true, tokens, via: 'engine', owned: false };
    } catch (e) {
      // Timeouts and refused connections are expected here and cost only the precise tier.
      return { ok: false, reason: o.signal.aborted ? 'timeout' : e instanceof Error ? e.name : 'error' };
    }
  }

  // The text llama-server tokenizes for a request: a chat rendered by its /apply-template, or the prompt.
  async #llamaCppText(ask: LlamaCppAsk, target: TokenizeTarget, signal: AbortSignal): Promise<string | { ok: false; reason: string }> {
    if ('content' in ask) return ask.content;
    const rendered = await this.#post('/apply-template', JSON.stringify(ask.applyTemplate), target, signal);
    if (!rendered.ok) return rendered;
    return promptOf(rendered.body) ?? { ok: false, reason: 'bad-response' };
  }

  async #post(path: string, body: string, target: TokenizeTarget, signal: AbortSignal): Promise<{ ok: true; body: Buffer } | { ok: false; reason: string }> {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (target.apiKey !== undefined) headers.authorization = `Bearer ${target.apiKey}`;
    const res = await request(new URL(path, target.url), { method: 'POST', dispatcher: this.#dispatcher, headers, body, signal });
    if (res.statusCode !== 200) {
      await res.body.dump();
      return { ok: false, reason: `status-${res.statusCode}` };
    }
    return { ok: true, body: Buffer.from(await res.body.arrayBuffer()) };
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

/** What local tokenizing needs of the worker pool (workers' HashPool satisfies it). */
export interface TokenizePool {
  tokenize(task: {
    source: string;
    endpoint: 'chat' | 'completions';
    body: Uint8Array;
    score?: readonly ScoreRequest[] | undefined;
    /** false: answer the count of the ids, not the ids, once the groups are scored. */
    ids: boolean;
    /** The model the body names: a pool may tokenize the model's next bodies this way as it parses them. */
    model?: string;
  }): Promise<{ ok: true; tokens: Uint32Array | undefined; count: number; scored: readonly GroupScore[]; pieces?: string | undefined } | { ok: false; reason: string }>;
  /** Loads a tokenizer in the pool: whether its pieces encode apart, and what encodes them. */
  load(source: string): Promise<{ ok: true; incremental: boolean; pieces: string } | { ok: false; reason: string }>;
  prepare(task: { source: string; body: Uint8Array; answer: Answer; hashes: readonly ScoreHashOptions[] }): Promise<{ ok: true; encodedChars: number } | { ok: false; reason: string }>;
  /** Whether a chat's continuation renders as its original prompt plus the answer so far; absent: never known. */
  seam?(task: { source: string; original: Uint8Array; continuation: Uint8Array; text: string }): Promise<{ ok: true; exact: boolean } | { ok: false; reason: string }>;
  /** A chat's prompt text, rendered with the model's template; absent: never known. */
  render?(task: { source: string; body: Uint8Array }): Promise<{ ok: true; text: string } | { ok: false; reason: string }>;
  /** Where its tokenize tasks ran, for the metrics. */
  readonly stats?: TokenizeThreads | undefined;
}

/** Where a pool ran its tokenize tasks: on the event loop (short bodies) or in a worker. */
export interface TokenizeThreads {
  readonly inlineTokenizes: number;
  readonly pooledTokenizes: number;
}

// The body as the pool gets it. Bytes in shared memory (readBody puts a large body there) reach the
// worker as they are, no copy on either side; others are copied into a buffer of our own, so the
// pool moves it to the worker instead of cloning it there, while the server keeps its own bytes
// for the retry and the log.
function forPool(b: Uint8Array): Uint8Array {
  if (b.buffer instanceof SharedArrayBuffer) return b;
  const out = new Uint8Array(b.byteLength);
  out.set(b);
  return out;
}

/**
 * Tokenizes in the worker pool with the model's own tokenizer. It does not read the signal: the
 * router's deadline (within) is the one owner of the wait, and a pool task, once posted, runs on.
 */
export class PoolTokenizer implements TokenSource {
  readonly #pool: TokenizePool;
  readonly #onPieces: ((tokenizer: string, pieces: string) => void) | undefined;

  /** `onPieces` hears when a worker's tokenizer changes what encodes its pieces (our BPE turned to tokenizers by its self-check). */
  constructor(pool: TokenizePool, o: { onPieces?: (tokenizer: string, pieces: string) => void } = {}) {
    this.#pool = pool;
    this.#onPieces = o.onPieces;
  }

  /** Encodes an answered chat's likely next turn ahead of it (the pool's prepare task). */
  prepare(target: TokenTarget, o: { body: Uint8Array; answer: Answer; hashes: readonly ScoreHashOptions[] }): Promise<Prepared> {
    if (target.tokenizer === undefined) return Promise.resolve({ ok: false, reason: 'no-tokenizer' });
    return this.#pool.prepare({ source: target.tokenizer, body: forPool(o.body), answer: o.answer, hashes: o.hashes });
  }

  /** Whether a chat's continuation extends its original prompt by exactly its answer so far (the pool's seam task). */
  async seam(target: TokenTarget, o: { original: Uint8Array; continuation: Uint8Array; text: string }): Promise<Seam> {
    if (target.tokenizer === undefined || this.#pool.seam === undefined) return 'unknown';
    const r = await this.#pool.seam({ source: target.tokenizer, original: forPool(o.original), continuation: forPool(o.continuation), text: o.text });
    return !r.ok ? 'unknown' : r.exact ? 'exact' : 'inexact';
  }

  /** A chat's prompt text as the engine's template renders it (the pool's render task); undefined when it cannot be. */
  async render(target: TokenTarget, body: Uint8Array): Promise<string | undefined> {
    if (target.tokenizer === undefined || this.#pool.render === undefined) return undefined;
    const r = await this.#pool.render({ source: target.tokenizer, body: forPool(body) });
    return r.ok ? r.text : undefined;
  }

  async tokens(r: GenerationRequest, target: TokenTarget, o: TokenAsk): Promise<TokenFact> {
    if (target.tokenizer === undefined) return { ok: false, reason: 'no-tokenizer' };
    if (o.body === undefined) return { ok: false, reason: 'no-body' };
    // The ids stay in the pool only when the caller said it needs none and every group is scored there.
    const idsStay = o.ids === false && o.score !== undefined && o.score.length > 0;
    const res = await this.#pool.tokenize({ source: target.tokenizer, endpoint: r.endpoint, body: forPool(o.body), score: o.score, ids: !idsStay, model: r.model });
    if (!res.ok) return res;
    if (res.pieces !== undefined) this.#onPieces?.(target.tokenizer, res.pieces);
    if (res.tokens !== undefined) return { ok: true, tokens: res.tokens, via: 'local', owned: true, scored: res.scored };
    return idsStay ? { ok: true, tokens: undefined, count: res.count, via: 'local', owned: false, scored: res.scored } : { ok: false, reason: 'no-ids' };
  }
}

/** A continuation's render against its original prompt plus the answer so far; unknown when not rendered here. */
export type Seam = 'exact' | 'inexact' | 'unknown';

/** How a chat's next turn was made ready, for the metrics: the characters encoded ahead, or why not. */
export type Prepared = { readonly ok: true; readonly encodedChars: number } | { readonly ok: false; readonly reason: string };

const busy = (reason: string): boolean => reason === 'queue full' || reason === 'pool closed' || reason === 'timeout' || reason === 'client-gone';

/** Where a model's local tokenizing stands. */
export type LocalState = 'loading' | 'verifying' | 'trusted' | 'off' | 'failed';

/** One comparison of local ids with the engine's, for the log and metrics. */
export interface TokenCheck {
  readonly model: string;
  readonly tokenizer: string;
  readonly outcome: 'match' | 'mismatch';
  /** The first position where they differ (mismatch only), and the ids there. */
  readonly position?: number;
  readonly local?: number | undefined;
  readonly engine?: number | undefined;
  readonly localCount: number;
  readonly engineCount: number;
}

/** How VerifiedTokens behaves and whom it tells. */
export interface VerifiedTokensOptions {
  readonly local: PoolTokenizer;
  readonly engine: EngineTokenizer;
  readonly pool: TokenizePool;
  /** Requests per model tokenized both ways before local ids are used alone. */
  readonly verifyFirst: number;
  /** After that, one request in this many is checked again in the background (0: never). */
  readonly verifyEvery: number;
  /** How long a background check may wait for /tokenize. */
  readonly checkTimeoutMs: number;
  readonly onCheck?: (c: TokenCheck) => void;
  /** A model's local tokenizing changed state; once loaded, `pieces` says what encodes its pieces. */
  readonly onState?: (model: string, tokenizer: string, state: LocalState, reason?: string, pieces?: string) => void;
  readonly onPrepared?: (model: string, p: Prepared) => void;
}

interface ModelState {
  state: LocalState;
  loaded: Promise<void>;
  verifiesLeft: number;
  // Checks of a verifying model still waiting for /tokenize.
  checking: number;
  seen: number;
}

/** Local ids first, verified against the engine's /tokenize; the engine's alone once they ever differ. */
export class VerifiedTokens implements TokenSource, TurnPreparer, TokenizerLoads {
  readonly #o: VerifiedTokensOptions;
  readonly #models = new Map<string, ModelState>();
  readonly #checks = new Set<Promise<void>>();
  readonly #loads = new Set<Promise<void>>();

  constructor(o: VerifiedTokensOptions) {
    this.#o = o;
  }

  /** The state of local tokenizing for a model (for tests and /debug). */
  stateOf(model: string): LocalState | undefined {
    return this.#models.get(model)?.state;
  }

  /** Resolves when no background check is running (tests wait on it instead of sleeping). */
  async whenIdle(): Promise<void> {
    while (this.#checks.size > 0) await Promise.all([...this.#checks]);
  }

  /** Settles when the model's tokenizer has loaded or failed to (never rejects); undefined when it is not loading. */
  loading(model: string): Promise<void> | undefined {
    const m = this.#models.get(model);
    return m?.state === 'loading' ? m.loaded : undefined;
  }

  /** Resolves when no tokenizer is loading, loaded or failed alike (never rejects). */
  async whenLoaded(): Promise<void> {
    while (this.#loads.size > 0) await Promise.all([...this.#loads]);
  }

  /**
   * Starts loading a model's tokenizer before its first request, which would otherwise wait through
   * the load on /tokenize and, while the pool is busy loading, be routed by load alone.
   */
  load(model: string, tokenizer: string): void {
    this.#modelState(model, tokenizer);
  }

  #modelState(model: string, tokenizer: string): ModelState {
    let m = this.#models.get(model);
    if (m === undefined) {
      const st: ModelState = { state: 'loading', loaded: Promise.resolve(), verifiesLeft: this.#o.verifyFirst, checking: 0, seen: 0 };
      m = st;
      this.#models.set(model, m);
      this.#o.onState?.(model, tokenizer, 'loading');
      // Loading takes seconds for a big vocabulary; /tokenize serves meanwhile. Its outcome is
      // kept in the state, so this background task cannot fail unseen.
      const loading = this.#o.pool.load(tokenizer).then(
        (r) => (r.ok ? this.#loaded(model, tokenizer, st, undefined, r.pieces) : this.#loaded(model, tokenizer, st, r.reason)),
        (e: unknown) => this.#loaded(model, tokenizer, st, e instanceof Error ? e.message : String(e)),
      );
      st.loaded = loading;
      this.#loads.add(loading);
      void loading.finally(() => this.#loads.delete(loading));
    }
    return m;
  }

  #loaded(model: string, tokenizer: string, m: ModelState, failure: string | undefined, pieces?: string): void {
    if (m.state !== 'loading') return;
    m.state = failure !== undefined ? 'failed' : this.#o.verifyFirst > 0 ? 'verifying' : 'trusted';
    this.#o.onState?.(model, tokenizer, m.state, failure, pieces);
  }

  #compare(model: string, tokenizer: string, m: ModelState, local: Uint32Array, engine: Uint32Array): boolean {
    const at = firstDifference(local, engine);
    const base = { model, tokenizer, localCount: local.length, engineCount: engine.length };
    if (at === undefined) {
      this.#o.onCheck?.({ ...base, outcome: 'match' });
      return true;
    }
    this.#o.onCheck?.({ ...base, outcome: 'mismatch', position: at, local: local[at], engine: engine[at] });
    if (m.state !== 'off') {
      m.state = 'off';
      this.#o.onState?.(model, tokenizer, 'off', `differs from /tokenize at token ${at}`);
    }
    return false;
  }

  async tokens(r: GenerationRequest, target: TokenTarget, o: TokenAsk): Promise<TokenFact> {
    const tokenizer = target.tokenizer;
    if (tokenizer === undefined || o.body === undefined) return this.#o.engine.tokens(r, target, o);
    const m = this.#modelState(r.model, tokenizer);
    // Ids that only count the prompt are not worth an engine's round trip (llama.cpp's is two):
    // while the local ones cannot be used, the prompt is estimated. Verifying still asks the engine.
    if (o.countOnly === true && (m.state === 'loading' || m.state === 'off' || m.state === 'failed')) return { ok: false, reason: `local-${m.state}` };
    if (m.state !== 'trusted' && m.state !== 'verifying') return this.#o.engine.tokens(r, target, o);
    // While verifying, the local ids route at once and /tokenize checks them in the background.
    // Waiting for it held each of a model's first requests for the engine's whole tokenizing (about
    // 50 ms a turn of a 28k-token chat from the sim, in bench/conversation); ids that differ cost
    // only those requests' cache scores, never an answer (the engine tokenizes its prompt itself),
    // and the first difference turns local ids off. No more checks run than are still wanted, so a
    // burst of first requests does not ask /tokenize for each.
    const verifying = m.state === 'verifying' && m.checking < m.verifiesLeft;
    // A request sampled for a check needs its ids back whatever the caller asked.
    const sampled = verifying || (m.state === 'trusted' && this.#o.verifyEvery > 0 && (m.seen + 1) % this.#o.verifyEvery === 0);
    const local = await this.#o.local.tokens(r, target, sampled ? { ...o, ids: true } : o);
    // A busy pool or a passed deadline is load: asking the engine too would add an HTTP round trip
    // and engine work exactly when both are scarce, so the next tier decides. A prompt the pool
    // cannot render (an image part, a template error) is the engine's to tokenize.
    if (!local.ok) return busy(local.reason) || o.countOnly === true ? local : this.#o.engine.tokens(r, target, o);
    m.seen++;
    if (sampled && local.tokens !== undefined) this.#check(r, target, tokenizer, m, local.tokens.slice(), verifying);
    return local;
  }

  /** Gets an answered chat's next turn ready, for a model whose local ids route (others would not use it). */
  async prepare(r: GenerationRequest, target: TokenTarget, o: { body: Uint8Array; answer: Answer; hashes: readonly ScoreHashOptions[] }): Promise<void> {
    const state = this.#models.get(r.model)?.state;
    if (state !== 'trusted' && state !== 'verifying') return;
    const p = await this.#o.local.prepare(target, o);
    this.#o.onPrepared?.(r.model, p);
  }

  /**
   * Whether a chat's continuation extends its original prompt by exactly its answer so far, rendered
   * with the model's own template; unknown while the local render is not loaded, or after it was found
   * to differ from the engine's.
   */
  async seam(model: string, target: TokenTarget, o: { original: Uint8Array; continuation: Uint8Array; text: string }): Promise<Seam> {
    const state = this.#models.get(model)?.state;
    if (state !== 'trusted' && state !== 'verifying') return 'unknown';
    return this.#o.local.seam(target, o);
  }

  /**
   * A chat's prompt text rendered with the model's own template; undefined while the local render is
   * not loaded, or after it was found to differ from the engine's (a raw continuation built on a
   * render that differs would not be exact). As with seam, a render still being verified is used.
   */
  async render(model: string, target: TokenTarget, body: Uint8Array): Promise<string | undefined> {
    const state = this.#models.get(model)?.state;
    if (state !== 'trusted' && state !== 'verifying') return undefined;
    return this.#o.local.render(target, body);
  }

  // A background check: the request is not held for it. One that `verifies` counts toward trusting
  // the model; a check that comes back after local ids went off compares nothing more (off stays off).
  #check(r: GenerationRequest, target: TokenTarget, tokenizer: string, m: ModelState, local: Uint32Array, verifies: boolean): void {
    const stop = new AbortController();
    const timer = setTimeout(() => stop.abort(), this.#o.checkTimeoutMs);
    if (verifies) m.checking++;
    // Not through the answer cache: a check's body is a request already routed by local ids, so
    // nothing asks for it again, and digesting it took the event loop 1 ms a check of a 28k-token
    // chat, on each of a model's first requests (issue 51).
    const check = this.#o.engine
      .tokens(r, target, { signal: stop.signal, cached: false })
      .then((engine) => {
        if (!engine.ok || m.state === 'off') return;
        if (this.#compare(r.model, tokenizer, m, local, engine.tokens) && verifies && m.state === 'verifying' && --m.verifiesLeft <= 0) {
          m.state = 'trusted';
          this.#o.onState?.(r.model, tokenizer, 'trusted');
        }
      })
      .finally(() => {
        if (verifies) m.checking--;
        clearTimeout(timer);
        this.#checks.delete(check);
      });
    this.#checks.add(check);
  }
}
