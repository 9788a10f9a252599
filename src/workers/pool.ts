// The pool the router calls to hash and score prompts in worker threads. Its waits are bounded by
// the caller (timeoutMs) and a full queue answers at once, so a burst of long prompts sends requests
// to the next routing tier instead of queueing behind each other. A running task is never aborted:
// Piscina stops a task by killing its thread, so a late answer is simply ignored.
import { availableParallelism } from 'node:os';
import { Piscina } from 'piscina';
import { LlmgwError } from '../errors/index.js';
import type { BlockKey, DigestTask, HashOptions } from '../kv/index.js';
import type { HashTask, ScoreTask, TaskResult, TaskWorkerData } from './tasks.js';

/** How the pool is sized; the index buffer is ClusterIndex.buffer, handed to each worker once. */
export interface HashPoolOptions {
  readonly indexBuffer: SharedArrayBuffer | null;
  /** Worker threads; default: available parallelism minus one (the event loop keeps a core). */
  readonly maxThreads?: number;
  /** Tasks waiting for a thread before new ones are refused; default 4 per thread. */
  readonly maxQueue?: number;
  /**
   * Prefix memo per worker, in chunks of 32 blocks (about 600 bytes each with their objects);
   * default 32768, which remembers 1M blocks (16M tokens at block size 16) in about 20 MB per
   * worker. 0 turns it off.
   */
  readonly memoChunks?: number;
}

/** What score() answers: per slot, how many LEADING blocks of the prompt it holds. */
export type ScoreResult = { ok: true; keys: BlockKey[]; leading: number[] } | { ok: false; reason: string };

// The compiled task module sits beside this file in dist/; Piscina loads it by URL.
const tasksUrl = new URL('./tasks.js', import.meta.url).href;

/**
 * The token array goes to the worker without a copy when it owns its whole buffer; a view into a
 * bigger buffer (a slice of Node's Buffer pool) is copied, since moving it would detach memory
 * that is not ours. After a transfer the caller's array is empty.
 */
function transferOf(tokens: Uint32Array): ArrayBuffer[] {
  const b = tokens.buffer;
  return b instanceof ArrayBuffer && tokens.byteOffset === 0 && tokens.byteLength === b.byteLength ? [b] : [];
}

const keysOf = (k: BigUint64Array): BlockKey[] => Array.from(k) as BlockKey[];

/** A Piscina pool running src/workers/tasks.ts. */
export class HashPool {
  readonly #pool: Piscina;
  readonly #maxQueue: number;
  #closing: Promise<void> | undefined;

  constructor(o: HashPoolOptions) {
    const threads = o.maxThreads ?? Math.max(1, availableParallelism() - 1);
    this.#maxQueue = o.maxQueue ?? threads * 4;
    const workerData: TaskWorkerData = { indexBuffer: o.indexBuffer, memoChunks: o.memoChunks ?? 32_768 };
    this.#pool = new Piscina({ filename: tasksUrl, workerData, minThreads: threads, maxThreads: threads, maxQueue: this.#maxQueue });
  }

  /** Tasks waiting for a thread. */
  get queued(): number {
    return this.#pool.queueSize;
  }

  #run<T>(name: 'hash' | 'score', task: HashTask | ScoreTask): Promise<TaskResult<T>> | null {
    if (this.#closing !== undefined) return null;
    if (this.#pool.queueSize >= this.#maxQueue) return null;
    return this.#pool.run(task, { name, transferList: transferOf(task.tokens) }) as Promise<TaskResult<T>>;
  }

  /** The prompt's block keys, computed in a worker. Rejects when the queue is full or the input is bad. */
  async hash(tokens: Uint32Array, o: HashOptions): Promise<BlockKey[]> {
    const run = this.#run<{ keys: BigUint64Array }>('hash', { tokens, hash: o });
    if (run === null) {
      throw new LlmgwError('LLMGW_POOL_BUSY', `hash pool is ${this.#closing ? 'closed' : `full (${this.#maxQueue} tasks queued)`}; retry later or raise the pool's queue size`);
    }
    const r = await run;
    if (!r.ok) throw new LlmgwError('LLMGW_HASH_TASK', r.reason);
    return keysOf(r.keys);
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
   * for load: a full queue, a closed pool or an answer later than timeoutMs is {ok:false, reason}.
   */
  async score(task: ScoreTask, o: { timeoutMs: number }): Promise<ScoreResult> {
    const run = this.#run<{ keys: BigUint64Array; leading: number[] }>('score', task);
    if (run === null) return { ok: false, reason: this.#closing ? 'pool closed' : 'queue full' };
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<{ ok: false; reason: string }>((resolve) => {
      timer = setTimeout(() => resolve({ ok: false, reason: 'timeout' }), o.timeoutMs);
    });
    // The task keeps running after a timeout; its answer, or its failure, is dropped here.
    const answer = run.then(
      (r): ScoreResult => (r.ok ? { ok: true, keys: keysOf(r.keys), leading: r.leading } : r),
      (e: unknown): ScoreResult => ({ ok: false, reason: `worker failed: ${e instanceof Error ? e.message : String(e)}` }),
    );
    try {
      return await Promise.race([answer, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Waits for running tasks, then stops the threads. Idempotent. */
  close(): Promise<void> {
    return (this.#closing ??= this.#pool.close());
  }
}
