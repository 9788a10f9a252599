// Piscina task module: pure functions over plain data, picked by name (`run(task, { name })`). Each
// worker thread keeps one TaskRunner, built from the workerData the pool hands every thread once:
// the cluster index as a SharedArrayBuffer and the sizes of the runner's caches.
import { workerData } from 'node:worker_threads';
import { move, transferableSymbol, valueSymbol } from 'piscina';
import type { DigestTask } from '../kv/index.js';
import type { ParseTask } from '../limits/index.js';
import { TaskRunner, type HashTask, type PrepareTask, type RenderTask, type ScoreTask, type SeamTask, type TokenizeTask } from './task-runner.js';

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
export const parse = (t: ParseTask): ReturnType<TaskRunner['parse']> => runner.parse(t);
export const seam = (t: SeamTask): ReturnType<TaskRunner['seam']> => runner.seam(t);
export const render = (t: RenderTask): ReturnType<TaskRunner['render']> => runner.render(t);
export const snapshot = (t: { readonly source: string }): ReturnType<TaskRunner['snapshot']> => runner.snapshot(t);

/** TaskRunner.tokenize, its ids and keys moved to the caller: Piscina moves what [transferableSymbol] lists and hands the caller [valueSymbol]. */
export async function tokenize(t: TokenizeTask): Promise<ReturnType<typeof move> | { ok: false; reason: string }> {
  const r = await runner.tokenize(t);
  if (!r.ok) return r;
  const moved = r.scored.map((g) => g.keys.buffer);
  return move({ [transferableSymbol]: r.tokens === undefined ? moved : [r.tokens.buffer, ...moved], [valueSymbol]: r });
}
