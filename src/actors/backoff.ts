// Restart backoff: exponential in the restarts still inside the window, with jitter so a node whose
// engines all died together (a driver reset, an OOM killer sweep) does not restart them in lockstep.
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
