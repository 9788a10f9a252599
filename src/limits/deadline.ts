// A wait with a deadline, as one explicit timer cleared when the wait settles. Never
// AbortSignal.any with AbortSignal.timeout: on Node 20 the timeout signal inside the composite is
// held only weakly, a full GC collects it, and the composite never aborts (nodejs/node#57736). A
// SIGSTOPped engine then stayed "ready" forever while the gateway was under memory pressure.
import { LlmgwError } from '../errors/index.js';

/** Thrown into the wait when its deadline passes: `code` tells it from the caller's own abort. */
export class DeadlineError extends LlmgwError {
  readonly timeoutMs: number;
  constructor(what: string, timeoutMs: number) {
    super('LLMGW_DEADLINE', `${what} did not finish within ${timeoutMs} ms`);
    this.timeoutMs = timeoutMs;
  }
}

/**
 * Runs `work` with a signal that aborts when `signal` does or `timeoutMs` passes, whichever is first.
 * The timer is a strong reference (the callback holds the controller), and both the timer and the
 * listener on `signal` are removed when `work` settles, so nothing outlives the wait.
 */
export async function withDeadline<T>(
  signal: AbortSignal,
  timeoutMs: number,
  what: string,
  work: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  signal.throwIfAborted();
  const ac = new AbortController();
  const onAbort = (): void => ac.abort(signal.reason);
  signal.addEventListener('abort', onAbort, { once: true });
  const timer = setTimeout(() => ac.abort(new DeadlineError(what, timeoutMs)), timeoutMs);
  try {
    return await work(ac.signal);
  } finally {
    clearTimeout(timer);
    signal.removeEventListener('abort', onAbort);
  }
}
