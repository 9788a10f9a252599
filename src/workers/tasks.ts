// Piscina task module: pure functions over plain data, picked by name (`run(task, { name })`).
// Hashing a long prompt takes milliseconds of CPU; here it runs off the event loop that proxies
// everybody else's streams. The cluster index arrives once, in workerData, as a SharedArrayBuffer.
import { workerData } from 'node:worker_threads';
import { LlmgwError } from '../errors/index.js';
import { digestRun, hashBlockKeys, IndexReader, PrefixMemo, type DigestTask, type HashOptions } from '../kv/index.js';

/** What a worker is given once at start. */
export interface TaskWorkerData {
  readonly indexBuffer: SharedArrayBuffer | null;
  /** Chunks of 32 blocks each worker remembers (0: no memo). */
  readonly memoChunks: number;
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

/** A task's answer; expected failures (bad parameters) come back as a reason, not a thrown Error, which would lose its class crossing threads. */
export type TaskResult<T> = ({ ok: true } & T) | { ok: false; reason: string };

function readerOf(data: unknown): IndexReader | null {
  if (typeof data !== 'object' || data === null || !('indexBuffer' in data)) return null;
  const b = (data as TaskWorkerData).indexBuffer;
  return b instanceof SharedArrayBuffer ? new IndexReader(b) : null;
}

const reader = readerOf(workerData);

function memoOf(data: unknown): PrefixMemo | undefined {
  if (typeof data !== 'object' || data === null || !('memoChunks' in data)) return undefined;
  const n = (data as TaskWorkerData).memoChunks;
  return typeof n === 'number' && n > 0 ? new PrefixMemo({ maxChunks: n }) : undefined;
}

// Each worker keeps its own memo of prefixes it hashed: a conversation's next turn, or a shared
// system prompt, then costs a fingerprint pass instead of one SHA-256 call per block.
const memo = memoOf(workerData);

function expected<T>(fn: () => TaskResult<T>): TaskResult<T> {
  try {
    return fn();
  } catch (e) {
    // Our own errors describe bad input (an algorithm we cannot hash, a bad slot); anything else is a bug.
    if (e instanceof LlmgwError) return { ok: false, reason: `${e.code}: ${e.message}` };
    throw e;
  }
}

// Results are copied back, not moved: Piscina moves only a top-level return value, and 8 bytes per
// block (64 KB for a 128k-token prompt) cost microseconds to copy.

/** The 64-bit block keys of a prompt, as a BigUint64Array. */
export function hash(t: HashTask): TaskResult<{ keys: BigUint64Array }> {
  return expected<{ keys: BigUint64Array }>(() => ({ ok: true, keys: hashBlockKeys(t.tokens, t.hash, undefined, memo) }));
}

/** The prompt's keys and, per slot, how many of its leading blocks that slot holds. */
export function score(t: ScoreTask): TaskResult<{ keys: BigUint64Array; leading: number[] }> {
  return expected<{ keys: BigUint64Array; leading: number[] }>(() => {
    if (reader === null) return { ok: false, reason: 'this worker was started without a cluster index' };
    const keys = hashBlockKeys(t.tokens, t.hash, undefined, memo);
    const leading = reader.leadingBlocks(keys, t.slots);
    return { ok: true, keys, leading };
  });
}

/** Our digests of one stored run of an engine's blocks, for kv's hash verifier. */
export function digests(t: DigestTask): TaskResult<{ digests: Uint8Array[] }> {
  return expected<{ digests: Uint8Array[] }>(() => ({ ok: true, digests: digestRun(t) }));
}
