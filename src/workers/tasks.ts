// Piscina task module: pure functions over plain data, picked by name (`run(task, { name })`). Each
// worker thread keeps one TaskRunner, built from the workerData the pool hands every thread once:
// the cluster index as a SharedArrayBuffer and the sizes of the runner's caches.
import { workerData } from 'node:worker_threads';
import { move, transferableSymbol, valueSymbol } from 'piscina';
import type { DigestTask } from '../kv/index.js';
import { TaskRunner, type HashTask, type ParseAheadTask, type TokenizeAnswer, type PrepareTask, type RenderTask, type ScoreTask, type SeamTask, type TokenizeTask } from './task-runner.js';

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

const data: Record<string, unknown> = isRecord(workerData) ? workerData : {};
const numberOf = (k: string): number => {
  const v = data[k];
  return typeof v === 'number' && v >= 0 ? v : 0;
};
const runner = new TaskRunner({
  indexBuffer: data.indexBuffer instanceof SharedArrayBuffer ? data.indexBuffer : null,
  memoChunks: numberOf('memoChunks'),
  segmentCacheBytes: numberOf('segmentCacheBytes'),
  selfChecks: numberOf('selfChecks'),
  rememberMinChars: numberOf('rememberMinChars'),
  maxJsonDepth: numberOf('maxJsonDepth'),
});

export const hash = (t: HashTask): ReturnType<TaskRunner['hash']> => runner.hash(t);
export const score = (t: ScoreTask): ReturnType<TaskRunner['score']> => runner.score(t);
export const load = (t: { readonly source: string }): ReturnType<TaskRunner['load']> => runner.load(t);
export const digests = (t: DigestTask): ReturnType<TaskRunner['digests']> => runner.digests(t);
export const prepare = (t: PrepareTask): ReturnType<TaskRunner['prepare']> => runner.prepare(t);
export const seam = (t: SeamTask): ReturnType<TaskRunner['seam']> => runner.seam(t);
export const render = (t: RenderTask): ReturnType<TaskRunner['render']> => runner.render(t);
export const snapshot = (t: { readonly source: string }): ReturnType<TaskRunner['snapshot']> => runner.snapshot(t);

// A tokenize answer's ids and keys, moved to the caller: Piscina moves what [transferableSymbol]
// lists and hands the caller [valueSymbol].
function moving<T extends object>(r: T, a: TokenizeAnswer): ReturnType<typeof move> {
  const keys = a.scored.map((g) => g.keys.buffer);
  return move({ [transferableSymbol]: a.tokens === undefined ? keys : [a.tokens.buffer, ...keys], [valueSymbol]: r });
}

/** TaskRunner.tokenize, its ids and keys moved to the caller. */
export async function tokenize(t: TokenizeTask): Promise<ReturnType<typeof move> | { ok: false; reason: string }> {
  const r = await runner.tokenize(t);
  return r.ok ? moving(r, r) : r;
}

/** TaskRunner.parseAhead, the ids and keys of the tokenize it did ahead moved to the caller. */
export async function parse(t: ParseAheadTask): Promise<ReturnType<typeof move> | Awaited<ReturnType<TaskRunner['parseAhead']>>> {
  const r = await runner.parseAhead(t);
  return r.ahead === undefined ? r : moving(r, r.ahead);
}
