// Forced major garbage collections for tests of timers that must survive them, without asking the
// test runner for --expose-gc: the flag is switched on at run time and `gc` taken from a fresh context.
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/** Runs a full GC every `everyMs` until the returned function is called. */
export function forceGcEvery(everyMs: number): () => void {
  setFlagsFromString('--expose-gc');
  const gc: unknown = runInNewContext('gc');
  if (typeof gc !== 'function') throw new Error('--expose-gc did not give a gc function');
  const timer = setInterval(() => gc(), everyMs);
  return () => clearInterval(timer);
}
