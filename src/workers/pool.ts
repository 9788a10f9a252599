// The pool the router calls to tokenize, hash and score prompts in worker threads. A full queue
// answers at once, so a burst of long prompts sends requests to the next routing tier instead of
// queueing behind each other. The pool keeps no timers: how long a routing step may wait is the
// router's to decide, and it does. A running task is never aborted (Piscina stops a task by
// killing its thread), so a late answer is simply dropped by whoever stopped waiting.
import { availableParallelism } from 'node:os';
import { Piscina } from 'piscina';
import { LlmgwError } from '../errors/index.js';
import { isParsedRequest, type ParseAnswer, type ParseTask } from '../limits/index.js';
import { IndexReader, isBlockKeyArray, type BlockKeyArray, type DigestTask, type HashOptions } from '../kv/index.js';
import { defaultRememberMinChars, type PiecesSnapshot } from '../tokenize/index.js';
import { saltedGroups, TaskRunner, type AheadSpec, type HashTask, type ParseAheadTask, type PrepareTask, type RenderTask, type ScoreTask, type SeamTask, type TaskResult, type TaskWorkerData, type TokenizeTask } from './task-runner.js';

/** How the pool is sized; the index buffer is ClusterIndex.buffer, handed to each worker once. */
export interface HashPoolOptions {
  readonly indexBuffer: SharedArrayBuffer | null;
  /** Worker threads; default: available parallelism minus one (the event loop keeps a core). */
  readonly maxThreads?: number;
  /** Tasks waiting for a thread before new ones are refused; default 16 per thread (a short chat's tasks take a fraction of a millisecond). */
  readonly maxQueue?: number;
  /**
   * Tasks handed to one thread before it answers; default 8. With 1 the pool waits for each answer
   * to reach the event loop before the thread gets its next task, so a burst of short prompts paid
   * a full hop between threads per task while the worker sat idle (measured: 0.8 ms a tokenize of a
   * 40-byte chat, 92% of the worker's time waiting).
   */
  readonly tasksPerThread?: number;
  /**
   * Prefix memo per worker, in chunks of 32 blocks (about 600 bytes each with their objects);
   * default 32768, which remembers 1M blocks (16M tokens at block size 16) in about 20 MB per
   * worker. 0 turns it off.
   */
  readonly memoChunks?: number;
  /** Segment cache per worker and tokenizer, in bytes; default 64 MiB (0: every text encoded whole). */
  readonly segmentCacheBytes?: number;
  /** Texts per tokenizer and worker also encoded whole, to check that pieces encode apart; default 8. */
  readonly selfChecks?: number;
  /** Texts shorter than this many characters are encoded from the segment cache alone, not remembered for a next turn; default tokenize's defaultRememberMinChars (2048). */
  readonly rememberMinChars?: number;
  /**
   * Bodies of at most this many bytes are tokenized, hashed and scored on the calling thread, once
   * a worker has loaded the tokenizer and handed its tables over (load); default 0 (never). Posting
   * a task to a worker and taking its answer back costs the event loop more than the work on a short
   * chat, and the wake-ups of both threads cost the machine more again (measured under wrk with
   * distinct short chats: bench/overhead). The calling thread never reads a tokenizer's file: for
   * Qwen3's that blocked it for 0.7 s and held 170 MB more. A model our BPE cannot encode alone is
   * tokenized in the workers whatever the body's size.
   */
  readonly inlineMaxBytes?: number;
  /** How deep a request body's JSON may nest, as the gateway bounds it (gateway.max_json_depth); default 64. */
  readonly maxJsonDepth?: number;
}

/** One score group's answer: the prompt's block keys, each slot's LEADING blocks, and the keys looked up in the index to count them. */
export interface GroupScore {
  readonly keys: BlockKeyArray;
  readonly leading: readonly number[];
  readonly lookups: number;
}

/** What score() answers. */
export type ScoreResult = ({ ok: true } & GroupScore) | { ok: false; reason: string };

/**
 * What tokenize() answers: the prompt's token ids (a buffer of our own; undefined when the task
 * said `ids: false`, the worker keeping them), how many there are, and the groups' scores; or why
 * there are none.
 */
export type TokenizeResult =
  | { ok: true; tokens: Uint32Array | undefined; count: number; scored: readonly GroupScore[]; pieces?: string | undefined }
  | { ok: false; reason: string };

function isGroupScore(v: unknown): v is GroupScore {
  return isRecord(v) && isBlockKeyArray(v.keys) && Array.isArray(v.leading) && v.leading.every((n) => typeof n === 'number') && typeof v.lookups === 'number';
}

const isNumbers = (v: unknown): v is number[] => Array.isArray(v) && v.every((n) => typeof n === 'number');

// A tokenize answer as it crossed from a worker, its ids checked; undefined for any other shape.
function tokenizeAnswerOf(r: unknown): { tokens: Uint32Array | undefined; count: number; scored: readonly (GroupScore & { readonly removals?: unknown })[]; pieces: string | undefined } | undefined {
  if (!isRecord(r) || !(r.tokens instanceof Uint32Array || r.tokens === undefined) || typeof r.count !== 'number' || !Array.isArray(r.scored) || !r.scored.every(isGroupScore)) return undefined;
  const scored: readonly GroupScore[] = r.scored;
  return { tokens: r.tokens, count: r.count, scored, pieces: typeof r.pieces === 'string' ? r.pieces : undefined };
}

// What a tokenize task asks, as one string: an answer tokenized ahead (at parse) is the router's
// only when it was asked the same.
const askOf = (t: { readonly source: string; readonly endpoint: string; readonly score?: readonly unknown[] | undefined; readonly ids?: boolean | undefined }): string =>
  JSON.stringify([t.source, t.endpoint, t.score ?? [], t.ids !== false]);

// A body's tokenize answer from its parse trip, until the router asks for it (or the body goes).
interface Ahead {
  readonly model: string;
  readonly byteOffset: number;
  readonly byteLength: number;
  readonly ask: string;
  readonly answer: NonNullable<ReturnType<typeof tokenizeAnswerOf>>;
}

// Models whose last tokenize a parse may repeat ahead: the models routed, few; bounded all the same.
const maxAheadModels = 64;

// Answers ahead for a model left untaken before its parses stop tokenizing ahead, until a tokenize
// of it says again how: a model the router no longer tokenizes locally (its ids found to differ
// from the engine's) would otherwise have every long body encoded for nobody.
const maxUntaken = 4;

// How a model's prompts were last tokenized, and the answers ahead since that nobody took.
type Spec = AheadSpec & { readonly endpoint: string; untaken: number };

// The segment cache of the runner on the calling thread: short prompts share only their template's
// pieces and system prompts, so a little holds what is worth holding.
const inlineCacheBytes = 4 * 1024 * 1024;

// A snapshot as it comes back from a worker (tokenize's PiecesSnapshot), checked before the calling
// thread encodes with it.
function isPiecesSnapshot(v: unknown): v is PiecesSnapshot {
  if (!isRecord(v) || typeof v.source !== 'string') return false;
  if (v.pieces === 'bytes') return true;
  const { template, added, around, bpe } = v;
  return (
    v.pieces === 'bpe' &&
    isRecord(template) &&
    typeof template.template === 'string' &&
    isRecord(template.specialTokens) &&
    Array.isArray(added) &&
    added.every((t) => isRecord(t) && typeof t.id === 'number' && typeof t.content === 'string') &&
    isRecord(around) &&
    around.before instanceof Uint32Array &&
    around.after instanceof Uint32Array &&
    isRecord(bpe) &&
    typeof bpe.regex === 'string' &&
    typeof bpe.nfc === 'boolean' &&
    bpe.byteIds instanceof Int32Array &&
    bpe.merges instanceof Int32Array &&
    typeof bpe.mask === 'number'
  );
}

// Load rounds before a pool gives up reaching every thread: threads start in well under a
// tokenizer's loading time, so a second round finds them all.
const maxLoadRounds = 4;

// The compiled task module sits beside this file in dist/; Piscina loads it by URL.
const tasksUrl = new URL('./tasks.js', import.meta.url).href;

/**
 * An array goes to the worker without a copy when it owns its whole buffer (moved: the caller's
 * array is empty after) or lives in shared memory (shared: both read the same bytes); a view into
 * a bigger buffer (a slice of Node's Buffer pool) is copied, since moving it would detach memory
 * that is not ours.
 */
function transferOf(a: ArrayBufferView): ArrayBuffer[] {
  const b = a.buffer;
  return b instanceof ArrayBuffer && a.byteOffset === 0 && a.byteLength === b.byteLength ? [b] : [];
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

// A task's failure as the worker reported it, or a description of an answer we did not expect.
function failureOf(r: unknown): { ok: false; reason: string } {
  if (isRecord(r) && r.ok === false && typeof r.reason === 'string') return { ok: false, reason: r.reason };
  return { ok: false, reason: `unexpected worker answer (${typeof r})` };
}

const failed = (e: unknown): { ok: false; reason: string } => ({ ok: false, reason: `worker failed: ${e instanceof Error ? e.message : String(e)}` });

/** A Piscina pool running src/workers/tasks.ts. */
export class HashPool {
  readonly #pool: Piscina;
  readonly #maxQueue: number;
  readonly #inlineMaxBytes: number;
  // The runner on the calling thread, for bodies of at most inlineMaxBytes; its caches are sized for
  // short prompts, which are all it sees.
  readonly #inline: TaskRunner | undefined;
  #closing: Promise<void> | undefined;
  // A reader of the cluster index on this thread: an answer tokenized ahead is probed again here
  // from the runs the worker found, for the blocks the index gained or lost since.
  readonly #reader: IndexReader | null;
  // How each model's prompts were last tokenized (tokenize tasks that name their model), which a
  // parse repeats ahead; and the answers of those, by the body's shared buffer.
  readonly #specs = new Map<string, Spec>();
  readonly #ahead = new WeakMap<SharedArrayBuffer, Ahead>();
  readonly #unsaid = new Map<string, string>();
  /** Tokenize tasks run on the calling thread, in a worker, and answered from a parse's trip (ahead), and request bodies parsed in a worker, for tests and the curious. */
  readonly stats = { inlineTokenizes: 0, pooledTokenizes: 0, aheadTokenizes: 0, pooledParses: 0, aheadParses: 0 };

  constructor(o: HashPoolOptions) {
    const threads = o.maxThreads ?? Math.max(1, availableParallelism() - 1);
    this.#maxQueue = o.maxQueue ?? threads * 16;
    const workerData: TaskWorkerData = {
      indexBuffer: o.indexBuffer,
      memoChunks: o.memoChunks ?? 32_768,
      segmentCacheBytes: o.segmentCacheBytes ?? 64 * 1024 * 1024,
      selfChecks: o.selfChecks ?? 8,
      rememberMinChars: o.rememberMinChars ?? defaultRememberMinChars,
      maxJsonDepth: o.maxJsonDepth ?? 64,
    };
    this.#inlineMaxBytes = o.inlineMaxBytes ?? 0;
    this.#reader = o.indexBuffer === null ? null : new IndexReader(o.indexBuffer);
    // No self-checks on the calling thread: its BPE is a worker's, checked there against tokenizers,
    // which this thread does not load.
    this.#inline =
      this.#inlineMaxBytes > 0
        ? new TaskRunner({ ...workerData, memoChunks: 0, selfChecks: 0, segmentCacheBytes: Math.min(workerData.segmentCacheBytes, inlineCacheBytes) })
        : undefined;
    this.#pool = new Piscina({
      filename: tasksUrl,
      workerData,
      minThreads: threads,
      maxThreads: threads,
      maxQueue: this.#maxQueue,
      concurrentTasksPerWorker: o.tasksPerThread ?? 8,
    });
  }

  /** Tasks waiting for a thread. */
  get queued(): number {
    return this.#pool.queueSize;
  }

  /** Worker threads. */
  get threads(): number {
    return this.#pool.threads.length;
  }

  // The task's answer as `unknown` (it crossed a thread: callers check its shape), or null when
  // the pool is closed or its queue is full.
  #run(name: 'hash' | 'score' | 'tokenize' | 'prepare' | 'load' | 'snapshot' | 'parse' | 'seam' | 'render', task: HashTask | ScoreTask | TokenizeTask | PrepareTask | ParseAheadTask | SeamTask | RenderTask | { source: string }, moved?: ArrayBufferView): Promise<unknown> | null {
    if (this.#closing !== undefined) return null;
    if (this.#pool.queueSize >= this.#maxQueue) return null;
    const run: Promise<unknown> = this.#pool.run(task, { name, transferList: moved === undefined ? [] : transferOf(moved) });
    return run;
  }

  #refusal(): string {
    return this.#closing !== undefined ? 'pool closed' : 'queue full';
  }

  // A task's {ok: true, ...fields} as `fields` reads them, or why not: the pool closed or full, the
  // worker failed, or an answer of another shape. Never throws.
  async #answer<T extends object>(run: Promise<unknown> | null, fields: (r: Record<string, unknown>) => T | undefined): Promise<TaskResult<T>> {
    if (run === null) return { ok: false, reason: this.#refusal() };
    try {
      const r = await run;
      const f = isRecord(r) && r.ok === true ? fields(r) : undefined;
      return f === undefined ? failureOf(r) : { ok: true, ...f };
    } catch (e) {
      return failed(e);
    }
  }

  /** The prompt's block keys, computed in a worker. Rejects when the queue is full or the input is bad. */
  async hash(tokens: Uint32Array, o: HashOptions): Promise<BlockKeyArray> {
    const run = this.#run('hash', { tokens, hash: o }, tokens);
    if (run === null) {
      throw new LlmgwError('LLMGW_POOL_BUSY', `hash pool is ${this.#closing ? 'closed' : `full (${this.#maxQueue} tasks queued)`}; retry later or raise the pool's queue size`);
    }
    const r = await run;
    if (isRecord(r) && r.ok === true && isBlockKeyArray(r.keys)) return r.keys;
    throw new LlmgwError('LLMGW_HASH_TASK', failureOf(r).reason);
  }

  /**
   * Our digests of an engine's stored run, computed in a worker: kv's hash verifier hashes through
   * this (a mismatched engine's every stored block) so the event loop does not. Rejects when the
   * queue is full or the pool closed; the verifier then leaves those blocks unverified.
   */
  async digests(task: DigestTask): Promise<Uint8Array[]> {
    if (this.#closing !== undefined || this.#pool.queueSize >= this.#maxQueue) {
      throw new LlmgwError('LLMGW_POOL_BUSY', `hash pool is ${this.#closing ? 'closed' : `full (${this.#maxQueue} tasks queued)`}; KV blocks stay unverified until it has room`);
    }
    const r = (await this.#pool.run(task, { name: 'digests' })) as TaskResult<{ digests: Uint8Array[] }>;
    if (!r.ok) throw new LlmgwError('LLMGW_HASH_TASK', r.reason);
    return r.digests;
  }

  /**
   * Hashes the prompt and counts, per slot, its leading blocks in the cluster index. Never throws
   * for load: a full queue, a closed pool or a failed worker is {ok:false, reason}.
   */
  score(task: ScoreTask): Promise<ScoreResult> {
    return this.#answer(this.#run('score', task, task.tokens), (r) => (isGroupScore(r) ? { keys: r.keys, leading: r.leading, lookups: r.lookups } : undefined));
  }

  /**
   * Renders and encodes a generation body with a model's tokenizer, and hashes and scores the ids
   * for each group of `task.score` in the same trip; the body's buffer is moved when it is ours whole.
   * A body its parse tokenized ahead, asked the same, is answered here without a trip (parse).
   */
  async tokenize(task: TokenizeTask): Promise<TokenizeResult> {
    if (task.model !== undefined) this.#learn(task.model, task);
    const ahead = this.#aheadOf(task);
    if (ahead !== undefined) return ahead;
    const inline = this.#inline;
    if (inline !== undefined && this.#closing === undefined && task.body.byteLength <= this.#inlineMaxBytes && inline.isLoaded(task.source)) {
      this.stats.inlineTokenizes++;
      return inline.tokenize(task);
    }
    const run = this.#run('tokenize', task, task.body);
    if (run === null) return { ok: false, reason: this.#refusal() };
    this.stats.pooledTokenizes++;
    try {
      const r = await run;
      const a = tokenizeAnswerOf(r);
      if (a === undefined) return failureOf(r);
      this.#heard(task.source, a.pieces);
      return { ok: true, tokens: a.tokens, count: a.count, scored: a.scored.map((g) => ({ keys: g.keys, leading: g.leading, lookups: g.lookups })), pieces: this.#news(task.source, a.pieces) };
    } catch (e) {
      return failed(e);
    }
  }

  // A worker's self-check found our BPE differs from tokenizers on this model: the calling
  // thread's copy of that BPE goes too, and the model's short bodies go to the workers.
  #heard(source: string, pieces: string | undefined): void {
    if (pieces !== undefined && pieces !== 'bpe' && pieces !== 'bytes') this.#inline?.forget(source);
  }

  // What a tokenize answer says of `source`'s pieces: the worker's news, or news an answer ahead
  // brought that no tokenize passed on yet (a worker says it once, and that answer may go untaken).
  #news(source: string, pieces: string | undefined): string | undefined {
    const held = this.#unsaid.get(source);
    this.#unsaid.delete(source);
    return pieces ?? held;
  }

  #learn(model: string, task: TokenizeTask): void {
    if (!this.#specs.has(model) && this.#specs.size >= maxAheadModels) this.#specs.clear();
    this.#specs.set(model, { model, source: task.source, endpoint: task.endpoint, score: task.score ?? [], ids: task.ids !== false, untaken: 0 });
  }

  // The answer a parse tokenized ahead for this task's body, when it asked the same; each group's
  // slots probed again from the runs found then (the blocks a slot lost cut its run, as in the
  // worker's own chains), so the scores are the index's now. Taken once.
  #aheadOf(task: TokenizeTask): TokenizeResult | undefined {
    const buf = task.body.buffer;
    if (!(buf instanceof SharedArrayBuffer)) return undefined;
    const a = this.#ahead.get(buf);
    if (a === undefined) return undefined;
    this.#ahead.delete(buf);
    if (a.byteOffset !== task.body.byteOffset || a.byteLength !== task.body.byteLength || a.ask !== askOf(task)) return undefined;
    const spec = this.#specs.get(a.model);
    if (spec !== undefined) spec.untaken = 0;
    const groups = task.score ?? [];
    const reader = this.#reader;
    const scored: GroupScore[] = [];
    for (const [i, g] of a.answer.scored.entries()) {
      const slots = groups[i]?.slots;
      const removals = g.removals;
      if (reader === null || slots === undefined || !isNumbers(removals) || removals.length !== slots.length) return undefined;
      const from = slots.map((s, j) => {
        const blocks = g.leading[j] ?? 0;
        const since = removals[j] ?? 0;
        return reader.removals(s) === since ? blocks : reader.keptRun(s, g.keys, blocks, since);
      });
      const before = reader.lookups;
      const leading = reader.leadingBlocks(g.keys, slots, from);
      scored.push({ keys: g.keys, leading, lookups: g.lookups + reader.lookups - before });
    }
    this.stats.aheadTokenizes++;
    return { ok: true, tokens: a.answer.tokens, count: a.answer.count, scored, pieces: this.#news(task.source, undefined) };
  }

  /**
   * Parses and checks a request body in a worker (gateway/request.ts readRequest). The body stays
   * where it is: the gateway keeps its bytes to send upstream, so only shared memory is read there
   * without a copy. A body in shared memory whose model was tokenized before is tokenized and scored
   * in the same trip as that model's last tokenize asked (TaskRunner.parseAhead), for tokenize to
   * answer without a trip. Never throws: a full queue or a failed worker is a reason, and the caller parses.
   */
  async parse(task: ParseTask): Promise<ParseAnswer> {
    const buf = task.body.buffer;
    const specs = buf instanceof SharedArrayBuffer ? [...this.#specs.values()].filter((s) => s.endpoint === task.endpoint) : [];
    // What each model's answer ahead was asked with, as sent: a tokenize meanwhile may teach another.
    const sent = new Map(specs.map((s) => [s.model, s]));
    if (buf instanceof SharedArrayBuffer) this.#ahead.delete(buf);
    const run = this.#run('parse', specs.length === 0 ? task : { ...task, ahead: specs.map(({ model, source, score, ids }) => ({ model, source, score, ids })) });
    if (run === null) return { ok: false, reason: this.#refusal() };
    this.stats.pooledParses++;
    try {
      const r = await run;
      if (isRecord(r) && r.ok === true && isParsedRequest(r.request)) {
        const a = tokenizeAnswerOf(r.ahead);
        const model = r.request.model;
        const spec = sent.get(model);
        if (a !== undefined && spec !== undefined && buf instanceof SharedArrayBuffer) {
          const ask = askOf({ ...spec, score: saltedGroups(spec.score, r.request.cacheSalt) });
          this.stats.aheadParses++;
          this.#heard(spec.source, a.pieces);
          if (a.pieces !== undefined) this.#unsaid.set(spec.source, a.pieces);
          this.#ahead.set(buf, { model, byteOffset: task.body.byteOffset, byteLength: task.body.byteLength, ask, answer: a });
          const now = this.#specs.get(model);
          if (now !== undefined && ++now.untaken >= maxUntaken) this.#specs.delete(model);
        }
        return { ok: true, request: r.request };
      }
      if (isRecord(r) && r.ok === false && isRecord(r.error) && typeof r.error.code === 'string' && typeof r.error.message === 'string') {
        return { ok: false, error: { code: r.error.code, message: r.error.message, param: typeof r.error.param === 'string' ? r.error.param : null } };
      }
      return failureOf(r);
    } catch (e) {
      return failed(e);
    }
  }

  /**
   * Whether a chat's continuation extends its original prompt by exactly the answer so far (see
   * TaskRunner.seam), rendered in a worker. Never throws; a full queue answers why not.
   */
  seam(task: SeamTask): Promise<TaskResult<{ exact: boolean }>> {
    return this.#answer(this.#run('seam', task), (r) => (typeof r.exact === 'boolean' ? { exact: r.exact } : undefined));
  }

  /** A chat's prompt text rendered with the model's template (see TaskRunner.render), in a worker. Never throws. */
  render(task: RenderTask): Promise<TaskResult<{ text: string }>> {
    return this.#answer(this.#run('render', task), (r) => (typeof r.text === 'string' ? { text: r.text } : undefined));
  }

  /**
   * Gets an answered chat's next turn ready in a worker (see tasks.ts prepare): how many of its
   * characters were encoded, or why nothing was. Never throws; a full queue skips it.
   */
  prepare(task: PrepareTask): Promise<TaskResult<{ encodedChars: number }>> {
    return this.#answer(this.#run('prepare', task, task.body), (r) => (typeof r.encodedChars === 'number' ? { encodedChars: r.encodedChars } : undefined));
  }

  /**
   * Loads and warms a tokenizer in every thread ahead of its first request: whether its pieces
   * encode apart, what encodes them, the self-checks the threads' warm-ups left (0 unless a check
   * never found a text to take) and how many threads loaded it. Piscina hands a task to the first idle thread it knows
   * ready, so a thread still starting misses a round; rounds go on until every thread answered,
   * since a thread left cold paid its loading and self-checks on a first conversation's turns.
   */
  async load(source: string): Promise<{ ok: true; incremental: boolean; pieces: string; checksLeft: number; threads: number } | { ok: false; reason: string }> {
    let incremental = true;
    let pieces = '';
    const checksLeft = new Map<number, number>();
    for (let round = 0; round < maxLoadRounds && checksLeft.size < this.threads; round++) {
      // One task a thread at once: each goes to an idle thread, a loaded one answering at once.
      const runs = Array.from({ length: this.threads }, () => this.#run('load', { source }));
      for (const run of runs) {
        if (run === null) return { ok: false, reason: this.#refusal() };
        try {
          const r = await run;
          if (!isRecord(r) || r.ok !== true || typeof r.thread !== 'number' || typeof r.checksLeft !== 'number') return failureOf(r);
          if (r.incremental === false) incremental = false;
          // Every thread loads the same file: a thread that answers differently is the one worth naming.
          if (typeof r.pieces === 'string' && (pieces === '' || r.pieces !== 'bpe')) pieces = r.pieces;
          checksLeft.set(r.thread, r.checksLeft);
        } catch (e) {
          return failed(e);
        }
      }
    }
    // The calling thread tokenizes short bodies with a worker's tables, cloned in milliseconds; a
    // model without them is tokenized in the workers alone, which is slower for a short chat but exact.
    const inline = this.#inline;
    if (inline !== undefined) {
      const s = await this.#answer(this.#run('snapshot', { source }), (r) => (isPiecesSnapshot(r.snapshot) ? { snapshot: r.snapshot } : undefined));
      if (s.ok) {
        inline.adopt(s.snapshot);
        await inline.warmUp(source, this.#inlineMaxBytes);
      }
    }
    return { ok: true, incremental, pieces, checksLeft: [...checksLeft.values()].reduce((a, b) => a + b, 0), threads: checksLeft.size };
  }

  /** Waits for running tasks, then stops the threads. Idempotent. */
  close(): Promise<void> {
    return (this.#closing ??= this.#pool.close());
  }
}
