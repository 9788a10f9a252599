// The work behind the pool's tasks, with the state one thread keeps for it: its tokenizers, segment
// cache, prefix memo and the key chains of the texts it encoded. A worker thread runs one (tasks.ts,
// Piscina's task module); the pool runs one more on the calling thread for prompts so short that
// posting them to a worker costs more than the work (HashPool's inlineMaxBytes). Rendering a chat,
// encoding it and hashing its blocks take milliseconds of CPU for a long prompt, which is why the
// rest run off the event loop that proxies everybody else's streams.
import { threadId } from 'node:worker_threads';
import { LlmgwError, RequestError } from '../errors/index.js';
import { ChatBodyParser, parsedRequestOf, parseGenerationRequest, type ParseAnswer, type ParseTask } from '../limits/index.js';
import { copyBlockKeys, digestRun, extendChain, hashBlockKeys, IndexReader, PrefixMemo, type BlockKeyArray, type DigestTask, type HashOptions, type KeyChain } from '../kv/index.js';
import { IncrementalEncoder, loadTokenizerModel, PieceEncoderNews, pieceEncoderName, piecesModelOf, piecesSnapshotOf, promptTextOf, type PiecesSnapshot } from '../tokenize/index.js';
import { checkChat, maxCheckChats, warmUpBodies } from './warm-up.js';

/** What a runner is given once at start (a worker's workerData). */
export interface TaskWorkerData {
  readonly indexBuffer: SharedArrayBuffer | null;
  /** Chunks of 32 blocks each runner remembers (0: no memo). */
  readonly memoChunks: number;
  /** Bytes of segment ids each runner keeps per tokenizer (0: every text encoded whole). */
  readonly segmentCacheBytes: number;
  /** Texts per tokenizer also encoded whole to check that pieces encode apart. */
  readonly selfChecks: number;
  /** Texts shorter than this many characters are not remembered for a next turn to extend (IncrementalEncoder). */
  readonly rememberMinChars: number;
  /** How deep a request body's JSON may nest (gateway.max_json_depth): the bound of every body parsed here. */
  readonly maxJsonDepth: number;
}

/** One prompt to hash: its token ids and the engine's hash parameters. */
export interface HashTask {
  readonly tokens: Uint32Array;
  readonly hash: HashOptions;
}

/** One prompt to score: hash it, then count the leading blocks each slot holds. */
export interface ScoreTask extends HashTask {
  readonly slots: readonly number[];
}

/** Hash parameters and slots of one group of replicas, scored in the same trip as the tokenizing. */
export interface ScoreGroup {
  readonly hash: HashOptions;
  readonly slots: readonly number[];
}

/** One generation body to tokenize with a model's tokenizer ('bytes', 'qwen3' or a path). */
export interface TokenizeTask {
  readonly source: string;
  readonly endpoint: 'chat' | 'completions';
  /** The request body's JSON bytes, as the client sent them. */
  readonly body: Uint8Array;
  /** Groups to hash and score the ids for at once, saving the router a second trip through the pool. */
  readonly score?: readonly ScoreGroup[] | undefined;
  /** false: answer how many ids there are, not the ids (the caller routes on the scores); default true. */
  readonly ids?: boolean | undefined;
  /** The model the body names: the pool then tokenizes its next bodies so at parse (HashPool.parse). */
  readonly model?: string | undefined;
}

/** How the pool last tokenized a model's prompts: what a parse may tokenize ahead with (TaskRunner.parseAhead). */
export interface AheadSpec {
  readonly model: string;
  readonly source: string;
  readonly score: readonly ScoreGroup[];
  readonly ids: boolean;
}

/**
 * A model's score groups for a request of its with `cacheSalt`: the salt is the request's own, as
 * the router sets it (routing/router.ts scorePlan), whatever request taught the pool the groups.
 */
export function saltedGroups(score: readonly ScoreGroup[], cacheSalt: string | undefined): ScoreGroup[] {
  return score.map((g) => {
    const { cacheSalt: _taught, ...hash } = g.hash;
    return { ...g, hash: cacheSalt === undefined ? hash : { ...hash, cacheSalt } };
  });
}

/** A body to parse, with how to tokenize it too should its model be one of `ahead`'s. */
export interface ParseAheadTask extends ParseTask {
  readonly ahead?: readonly AheadSpec[] | undefined;
}

/** An engine's answer to a chat request: its SSE events as streamed, or its JSON body. */
export interface AnswerText {
  readonly format: 'sse' | 'json';
  readonly text: string;
}

/** A chat that was answered: get its next turn ready, encoded and hashed with each of `hashes`. */
export interface PrepareTask {
  readonly source: string;
  /** The request body's JSON bytes, as routed. */
  readonly body: Uint8Array;
  readonly answer: AnswerText;
  readonly hashes: readonly HashOptions[];
}

/** A chat continued on another engine: the body as first sent, the continuation's, and the answer so far. */
export interface SeamTask {
  readonly source: string;
  readonly original: Uint8Array;
  readonly continuation: Uint8Array;
  readonly text: string;
}

/** A chat to render with the model's own template: the request body. */
export interface RenderTask {
  readonly source: string;
  readonly body: Uint8Array;
}

/**
 * What tokenize answers: the ids (unless asked not to), their count, and per score group its block
 * keys, each slot's leading blocks and its removal count read before they were counted (so a later
 * probe from those runs knows whether they still stand).
 */
export interface TokenizeAnswer {
  readonly tokens: Uint32Array | undefined;
  readonly count: number;
  readonly scored: readonly { readonly keys: BlockKeyArray; readonly leading: readonly number[]; readonly lookups: number; readonly removals: readonly number[] }[];
  /** What encodes this tokenizer's pieces, when it changed since this runner last said (pieceEncoderName). */
  readonly pieces?: string | undefined;
}

/** A task's answer; expected failures (bad parameters) come back as a reason, not a thrown Error, which would lose its class crossing threads. */
export type TaskResult<T> = ({ ok: true } & T) | { ok: false; reason: string };

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function reasonOf(e: unknown): string {
  if (e instanceof LlmgwError) return `${e.code}: ${e.message}`;
  throw e;
}

function expected<T>(fn: () => TaskResult<T>): TaskResult<T> {
  try {
    return fn();
  } catch (e) {
    // Our own errors describe bad input (an algorithm we cannot hash, a bad slot); anything else is a bug.
    return { ok: false, reason: reasonOf(e) };
  }
}

// A prompt's chain as scored: its keys, and per slot the leading blocks found with the slot's
// removal count read before the probe. While that count stands, the slot still holds those blocks.
interface ScoredChain {
  readonly chain: KeyChain;
  readonly runs: Map<number, { readonly blocks: number; readonly removals: number }>;
}

const chainTag = (h: HashOptions): string => `${h.algo ?? 'sha256_cbor'}\0${h.seed}\0${h.blockSizeTokens}\0${h.loraName ?? '\u0001'}\0${h.cacheSalt ?? ''}`;

// Each slot's leading blocks of `keys` (probing from `from`), the keys looked up to count them, and
// each slot's removal count read before the probe (what a later probe checks the runs against).
function counted(index: IndexReader, keys: BlockKeyArray, slots: readonly number[], from?: readonly number[]): { leading: number[]; lookups: number; removals: number[] } {
  const removals = slots.map((s) => index.removals(s));
  const before = index.lookups;
  const leading = index.leadingBlocks(keys, slots, from);
  return { leading, lookups: index.lookups - before, removals };
}

// Each slot's leading blocks of `chain`, probed only past the run the earlier chain found in that
// slot (over the blocks the two share), or past what is left of it when the slot lost blocks since;
// with the runs to keep beside the chain.
function probed(index: IndexReader, chain: KeyChain, slots: readonly number[], prev: ScoredChain | undefined, sameBlocks: number): { scored: ScoredChain; leading: number[]; lookups: number; removals: number[] } {
  const removals = slots.map((s) => index.removals(s));
  const from = slots.map((s, j) => {
    const run = prev?.runs.get(s);
    if (run === undefined) return 0;
    const blocks = Math.min(run.blocks, sameBlocks);
    return run.removals === removals[j] ? blocks : index.keptRun(s, chain.keys, blocks, run.removals);
  });
  const { leading, lookups } = counted(index, chain.keys, slots, from);
  return { scored: { chain, runs: new Map(slots.map((s, j) => [s, { blocks: leading[j] ?? 0, removals: removals[j] ?? 0 }])) }, leading, lookups, removals };
}

// Self-checks against tokenizers still ahead of a tokenizer here: piece batches and whole texts.
const checksLeftOf = (e: IncrementalEncoder): number => (e.model.pieceChecksLeft ?? 0) + e.selfChecksLeft;

// Tool calls made: vLLM's messages and deltas carry `tool_calls: []` when none was.
const callsTools = (v: unknown): boolean => Array.isArray(v) && v.length > 0;

// The assistant's text in an answer, as a client appends it to the conversation; undefined for an
// answer a client resends in another shape (tool calls) or that has no text.
function answerContent(a: AnswerText): string | undefined {
  const first = (v: unknown): Record<string, unknown> | undefined => {
    const choices = isRecord(v) ? v.choices : undefined;
    const c: unknown = Array.isArray(choices) ? choices.find((x: unknown) => isRecord(x) && (x.index ?? 0) === 0) : undefined;
    return isRecord(c) ? c : undefined;
  };
  if (a.format === 'json') {
    const m = first(JSON.parse(a.text))?.message;
    return isRecord(m) && typeof m.content === 'string' && !callsTools(m.tool_calls) ? m.content : undefined;
  }
  let text = '';
  for (const line of a.text.split('\n')) {
    if (!line.startsWith('data:')) continue;
    const data = line.slice(5).trim();
    if (data === '' || data === '[DONE]') continue;
    const delta = first(JSON.parse(data))?.delta;
    if (!isRecord(delta)) continue;
    if (callsTools(delta.tool_calls)) return undefined;
    if (typeof delta.content === 'string') text += delta.content;
  }
  return text === '' ? undefined : text;
}

// Stands in for the user's next message, so the answer renders as it will once it is no longer
// the last message (Qwen3's template renders the final assistant turn differently).
const nextUser = { role: 'user', content: '.' };

/** The pool's tasks with one thread's state behind them. */
export class TaskRunner {
  readonly #reader: IndexReader | null;
  // Its own memo of prefixes it hashed: a conversation's next turn, or a shared system prompt, then
  // costs a fingerprint pass instead of one SHA-256 call per block.
  readonly #memo: PrefixMemo | undefined;
  // How every tokenizer's encoder here is built, from the runner's data.
  readonly #encoderOptions: { readonly cacheBytes: number; readonly selfChecks: number; readonly rememberMinChars: number };
  // A failed load stays failed: a missing tokenizer.json must not be read again on every request.
  readonly #encoders = new Map<string, Promise<IncrementalEncoder>>();
  readonly #loaded = new Set<string>();
  readonly #warmed = new Set<string>();
  // What encodes each tokenizer's pieces, as this runner last told the gateway (at load, then in the
  // tokenize answer after a change).
  readonly #piecesNews = new PieceEncoderNews();
  // Request bodies, parsed under the gateway's depth bound (the gateway bounded their size): a
  // body checked here (parse) is found again when its prompt is tokenized, and a conversation's
  // next turn parses only what follows its shared messages.
  readonly #bodies: ChatBodyParser;
  readonly #maxJsonDepth: number;
  // The block chains of texts the encoder remembers, by the ids it keeps for each and the hash
  // parameters: a next turn copies the keys of the blocks it shares and hashes only the rest, and
  // probes the index only past the runs its slots were found holding. Held weakly, so a text the
  // encoder forgets takes its chains with it.
  readonly #chains = new WeakMap<Uint32Array, Map<string, ScoredChain>>();

  constructor(d: TaskWorkerData) {
    this.#reader = d.indexBuffer === null ? null : new IndexReader(d.indexBuffer);
    this.#memo = d.memoChunks > 0 ? new PrefixMemo({ maxChunks: d.memoChunks }) : undefined;
    this.#encoderOptions = { cacheBytes: d.segmentCacheBytes, selfChecks: d.selfChecks, rememberMinChars: d.rememberMinChars };
    this.#maxJsonDepth = d.maxJsonDepth;
    this.#bodies = new ChatBodyParser({ limits: { maxDepth: d.maxJsonDepth, maxBytes: 1024 * 1024 * 1024 }, maxBytes: d.segmentCacheBytes / 4 });
  }

  /** Whether `source`'s tokenizer is loaded here, so a tokenize task for it waits for no file. */
  isLoaded(source: string): boolean {
    return this.#loaded.has(source);
  }

  #encoderOf(source: string): Promise<IncrementalEncoder> {
    let e = this.#encoders.get(source);
    if (e === undefined) {
      e = loadTokenizerModel(source).then((m) => {
        this.#loaded.add(source);
        return new IncrementalEncoder(m, this.#encoderOptions);
      });
      this.#encoders.set(source, e);
    }
    return e;
  }

  // hash and score answers are copied back, not moved: Piscina moves only a top-level return value
  // (tokenize's), and 8 bytes per block (64 KB for a 128k-token prompt) cost microseconds to copy.

  /** The 64-bit block keys of a prompt. */
  hash(t: HashTask): TaskResult<{ keys: BlockKeyArray }> {
    return expected<{ keys: BlockKeyArray }>(() => ({ ok: true, keys: hashBlockKeys(t.tokens, t.hash, undefined, this.#memo) }));
  }

  /** The prompt's keys and, per slot, how many of its leading blocks that slot holds. */
  score(t: ScoreTask): TaskResult<{ keys: BlockKeyArray; leading: number[]; lookups: number }> {
    return expected<{ keys: BlockKeyArray; leading: number[]; lookups: number }>(() => {
      const reader = this.#reader;
      if (reader === null) return { ok: false, reason: 'this worker was started without a cluster index' };
      const keys = hashBlockKeys(t.tokens, t.hash, undefined, this.#memo);
      return { ok: true, keys, ...counted(reader, keys, t.slots) };
    });
  }

  /**
   * Loads a tokenizer ahead of its first request (seconds for a big vocabulary) and warms it up;
   * answers whether its pieces encode apart, what encodes them (our BPE, or tokenizers and why not
   * ours), the self-checks left after the warm-up, and which thread this is.
   */
  async load(t: { readonly source: string }): Promise<TaskResult<{ incremental: boolean; pieces: string; checksLeft: number; thread: number }>> {
    try {
      const e = await this.#encoderOf(t.source);
      await this.warmUp(t.source);
      this.#piecesNews.news(t.source, e.model);
      return { ok: true, incremental: e.stats.broken === undefined, pieces: pieceEncoderName(e.model.pieceEncoder), checksLeft: checksLeftOf(e), thread: threadId };
    } catch (e) {
      return { ok: false, reason: reasonOf(e) };
    }
  }

  /**
   * Tokenizes and scores the warm-up chats (warm-up.ts) of at most `maxBytes` with `source`, once
   * per source, then short chats until its self-checks are spent (at most maxCheckChats): what a
   * first request would otherwise pay for here is paid before /ready. A tokenizer without a chat
   * template stops at the first chat it cannot render; nothing here fails a load.
   */
  async warmUp(source: string, maxBytes = Infinity): Promise<void> {
    if (this.#warmed.has(source)) return;
    this.#warmed.add(source);
    const score = this.#reader === null ? [] : [{ hash: { blockSizeTokens: 16, seed: '0', algo: 'sha256_cbor' as const }, slots: [] }];
    for (const body of warmUpBodies()) {
      if (body.byteLength > maxBytes) break;
      const r = await this.tokenize({ source, endpoint: 'chat', body, score, ids: false });
      if (!r.ok) return;
    }
    const e = await this.#encoderOf(source);
    for (let n = 0; n < maxCheckChats && checksLeftOf(e) > 0; n++) {
      const r = await this.tokenize({ source, endpoint: 'chat', body: checkChat(n), score, ids: false });
      if (!r.ok) return;
    }
  }

  /**
   * What another thread needs to tokenize `source` as this one does without loading its file
   * (tokenize's piecesSnapshotOf), or why it cannot.
   */
  async snapshot(t: { readonly source: string }): Promise<TaskResult<{ snapshot: PiecesSnapshot }>> {
    try {
      const e = await this.#encoderOf(t.source);
      if (e.stats.broken !== undefined) return { ok: false, reason: `pieces do not encode apart (${e.stats.broken})` };
      const s = piecesSnapshotOf(e.model);
      return typeof s === 'string' ? { ok: false, reason: s } : { ok: true, snapshot: s };
    } catch (e) {
      return { ok: false, reason: reasonOf(e) };
    }
  }

  /** Tokenizes `s.source` from now on with the model another thread's snapshot describes, never loading its file here. */
  adopt(s: PiecesSnapshot): void {
    this.#encoders.set(s.source, Promise.resolve(new IncrementalEncoder(piecesModelOf(s), this.#encoderOptions)));
    this.#loaded.add(s.source);
  }

  /** Drops `source`'s tokenizer here: isLoaded is false until it is loaded or adopted again. */
  forget(source: string): void {
    this.#encoders.delete(source);
    this.#loaded.delete(source);
  }

  // A text prompt's chain for `h`, extended from the chain of the earlier text (`base`) whose first
  // `same` ids it shares; with that earlier chain's runs and the blocks the two share.
  #extended(tokens: Uint32Array, h: HashOptions, base: Uint32Array | undefined, same: number): { tag: string; chain: KeyChain; prev: ScoredChain | undefined; sameBlocks: number } {
    const tag = chainTag(h);
    const prev = base === undefined ? undefined : this.#chains.get(base)?.get(tag);
    const sameBlocks = Math.floor(same / h.blockSizeTokens);
    return { tag, chain: extendChain(tokens, h, prev?.chain, sameBlocks), prev, sameBlocks };
  }

  // A text prompt's keys for group `g`, each slot's leading blocks and the keys looked up to find
  // them, extended from the chain of the earlier text its ids begin with.
  #scoreChain(index: IndexReader, tokens: Uint32Array, g: ScoreGroup, base: Uint32Array | undefined, same: number, kept: Map<string, ScoredChain>): TokenizeAnswer['scored'][number] {
    const { tag, chain, prev, sameBlocks } = this.#extended(tokens, g.hash, base, same);
    const { scored, leading, lookups, removals } = probed(index, chain, g.slots, prev, sameBlocks);
    kept.set(tag, scored);
    return { keys: copyBlockKeys(chain.keys), leading, lookups, removals };
  }

  /**
   * The token ids of a generation body, rendered and encoded as the engine would, and scored for the
   * groups asked; or {ok:false, reason} for what cannot be tokenized or scored here. The ids and keys
   * answered are the caller's own (none is kept here), so a worker may move them.
   */
  async tokenize(t: TokenizeTask): Promise<TaskResult<TokenizeAnswer>> {
    try {
      const groups = t.score ?? [];
      const index = this.#reader;
      // Refused before any work: a prompt encoded for scores this runner cannot give is thrown away.
      if (groups.length > 0 && index === null) return { ok: false, reason: 'this worker was started without a cluster index' };
      const enc = await this.#encoderOf(t.source);
      const prompt = promptTextOf(t.endpoint, this.#bodies.parse(t.body, 'request body'), enc.model, t.body);
      return await enc.encodeExtending(prompt.parts, prompt.addSpecialTokens, ({ ids: tokens, base, same, kept: keptIds }) => {
        const kept = new Map<string, ScoredChain>();
        const scored =
          index === null
            ? []
            : groups.map((g) => {
                if (g.hash.mmFeatures === undefined && g.hash.promptEmbeds === undefined) return this.#scoreChain(index, tokens, g, base, same, kept);
                const keys = hashBlockKeys(tokens, g.hash, undefined, this.#memo);
                return { keys, ...counted(index, keys, g.slots) };
              });
        if (keptIds !== undefined && kept.size > 0) this.#chains.set(keptIds, kept);
        // The encoder's ids are lent for this call: only a copy of them is answered.
        const sent = t.ids === false ? undefined : tokens.slice();
        return { ok: true, tokens: sent, count: tokens.length, scored, pieces: this.#piecesNews.news(t.source, enc.model) };
      });
    } catch (e) {
      return { ok: false, reason: reasonOf(e) };
    }
  }

  /**
   * A request body parsed and checked as the gateway checks it (parseGenerationRequest), for the
   * event loop, which gets every field but the prompt's; a body the client got wrong is its 400.
   */
  parse(t: ParseTask): ParseAnswer {
    try {
      const raw = Buffer.from(t.body.buffer, t.body.byteOffset, t.body.byteLength);
      // Kept for the tokenize task that follows only when parsed under the bound the bodies are.
      const bodies = t.policy.maxJsonDepth === this.#maxJsonDepth ? this.#bodies : undefined;
      return { ok: true, request: parsedRequestOf(parseGenerationRequest(t.endpoint, raw, t.policy, bodies)) };
    } catch (e) {
      if (e instanceof RequestError) return { ok: false, error: { code: e.code, message: e.message, param: e.param } };
      return { ok: false, reason: reasonOf(e) };
    }
  }

  /**
   * parse, then, when the pool said how the parsed model's prompts are tokenized and scored
   * (`ahead`), the tokenize task the router will ask for, in the same trip: under load each trip
   * between threads waited milliseconds for a core on both sides, more than the work (1 ms for a
   * 100k-token turn). The pool answers the router from it, probing again from the runs found here.
   */
  async parseAhead(t: ParseAheadTask): Promise<ParseAnswer & { ahead?: TokenizeAnswer }> {
    const parsed = this.parse(t);
    if (!parsed.ok) return parsed;
    const spec = t.ahead?.find((a) => a.model === parsed.request.model);
    if (spec === undefined) return parsed;
    const score = saltedGroups(spec.score, parsed.request.cacheSalt);
    const r = await this.tokenize({ source: spec.source, endpoint: t.endpoint, body: t.body, score, ids: spec.ids });
    return r.ok ? { ...parsed, ahead: r } : parsed;
  }

  /** Our digests of one stored run of an engine's blocks, for kv's hash verifier. */
  digests(t: DigestTask): TaskResult<{ digests: Uint8Array[] }> {
    return expected<{ digests: Uint8Array[] }>(() => ({ ok: true, digests: digestRun(t) }));
  }

  /**
   * Whether a chat's continuation renders as the prompt its answer was generated from followed by
   * the answer so far: only then does an engine continue the answer nobody interrupted. Qwen3's
   * template, for one, writes an empty think block before a final assistant message that its
   * generation prompt (thinking on) did not have, and strips the newlines an answer starts with.
   */
  async seam(t: SeamTask): Promise<TaskResult<{ exact: boolean }>> {
    try {
      const enc = await this.#encoderOf(t.source);
      const text = (raw: Uint8Array): string => promptTextOf('chat', this.#bodies.parse(raw, 'request body'), enc.model, raw).parts.join('');
      return { ok: true, exact: text(t.continuation) === text(t.original) + t.text };
    } catch (e) {
      return { ok: false, reason: reasonOf(e) };
    }
  }

  /**
   * A chat's prompt text as the engine renders it (its template, generation prompt and all): what a
   * thinking answer continued as a raw completion is appended to.
   */
  async render(t: RenderTask): Promise<TaskResult<{ text: string }>> {
    try {
      const enc = await this.#encoderOf(t.source);
      return { ok: true, text: promptTextOf('chat', this.#bodies.parse(t.body, 'request body'), enc.model, t.body).parts.join('') };
    } catch (e) {
      return { ok: false, reason: reasonOf(e) };
    }
  }

  /**
   * Gets a chat's next turn ready while its user reads the answer: the conversation with the answer
   * appended is rendered and encoded, so its pieces are in the segment cache and its text is the one
   * the next turn extends, and its key chains are hashed and probed in the index, from the slots'
   * runs found for this turn. The next turn then encodes, hashes and probes only what the user adds.
   * The probe is here and not left to the next turn because the index changed since this turn was
   * scored: the router entered this turn's blocks as predicted for the replica it chose, and the
   * engine's events confirmed them. A first turn found none of a long document held anywhere, so
   * the next one would have probed every block of it again (4 ms of a 6 ms decision at 83k tokens).
   */
  async prepare(t: PrepareTask): Promise<TaskResult<{ encodedChars: number }>> {
    try {
      const enc = await this.#encoderOf(t.source);
      const body = this.#bodies.parse(t.body, 'request body');
      const content = answerContent(t.answer);
      if (!isRecord(body) || !Array.isArray(body.messages) || content === undefined) return { ok: false, reason: 'no answer text to prepare' };
      const messages: readonly unknown[] = body.messages;
      const next = { ...body, messages: [...messages, { role: 'assistant', content }, nextUser] };
      const prompt = promptTextOf('chat', next, enc.model, t.body);
      const chars = prompt.parts.reduce((n, p) => n + p.length, 0);
      const before = enc.stats.extendedChars;
      return await enc.encodeExtending(prompt.parts, prompt.addSpecialTokens, ({ ids, base, same, kept: keptIds }) => {
        if (keptIds === undefined) return { ok: true, encodedChars: chars };
        const kept = new Map<string, ScoredChain>();
        const index = this.#reader;
        for (const h of t.hashes) {
          const { tag, chain, prev, sameBlocks } = this.#extended(ids, h, base, same);
          // Without an index no turn is scored here, so there are no runs to carry.
          kept.set(tag, index === null ? { chain, runs: new Map() } : probed(index, chain, [...(prev?.runs.keys() ?? [])], prev, sameBlocks).scored);
        }
        this.#chains.set(keptIds, kept);
        return { ok: true, encodedChars: chars - (enc.stats.extendedChars - before) };
      });
    } catch (e) {
      if (e instanceof SyntaxError) return { ok: false, reason: `answer is not JSON: ${e.message}` };
      return { ok: false, reason: reasonOf(e) };
    }
  }
}
