// Restart backoff: exponential in the restarts still inside the window, with jitter so a node whose
// engines all died together (a driver reset, an OOM killer sweep) does not restart them in lockstep.
// The jitter is drawn from a seeded generator kept in the shard's context, so the machine stays
// free of effects and a test replays the same waits from the same seed.
import type { RestartPolicy } from './config.js';

/**
 * The wait before restart number `restarts + 1`: base x 2^restarts, capped, then "equal jitter":
 * half of it fixed and half drawn from `random` in [0, 1), so the wait is never below half the step.
 */
export function backoffMs(restarts: number, policy: RestartPolicy, random: number): number {
  const step = Math.min(policy.backoffMaxMs, policy.backoffBaseMs * 2 ** Math.max(0, restarts));
  const half = step / 2;
  return Math.round(half + half * Math.min(Math.max(random, 0), 1));
}

/** One draw of mulberry32 from `state`: a number in [0, 1) and the state for the next draw. */
export function drawJitter(state: number): { readonly random: number; readonly state: number } {
  const next = (state + 0x6d2b79f5) >>> 0;
  let t = next;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return { random: ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296, state: next };
}
