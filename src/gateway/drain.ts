// A gateway leaving a cluster without losing a stream: once told to drain, /ready answers 503 so the
// load balancer in front stops choosing it, the requests that still arrive in the grace (sent before
// the balancer's health checks noticed) are served, later ones are refused with a 503 and Retry-After
// for the client or balancer to send elsewhere, and the streams already running finish.
import type { ServerResponse } from 'node:http';

/** Where a drain stands: the work in flight and whether new work is still taken. */
export class Drain {
  readonly #graceMs: number;
  readonly #now: () => number;
  readonly #work = new Set<ServerResponse>();
  #since: number | undefined;
  #onIdle: (() => void) | undefined;

  constructor(o: { graceMs: number; now?: () => number }) {
    this.#graceMs = o.graceMs;
    this.#now = o.now ?? Date.now;
  }

  /** Whether the gateway was told to drain (and /ready says so). */
  get draining(): boolean {
    return this.#since !== undefined;
  }

  /** Requests of the API (not probes, metrics or debug pages) whose answer is not finished. */
  get inFlight(): number {
    return this.#work.size;
  }

  /** Whether a new request of the API is refused: draining, and the grace is over. */
  refuses(): boolean {
    return this.#since !== undefined && this.#now() - this.#since >= this.#graceMs;
  }

  /** Counts `res` as work in flight until its connection is done with it. */
  track(res: ServerResponse): void {
    this.#work.add(res);
    // 'close' fires both after the last byte and when the client left: either way it is no longer ours.
    res.once('close', () => {
      this.#work.delete(res);
      if (this.#work.size === 0) this.#onIdle?.();
    });
  }

  /** Starts the drain; a second call keeps the first one's start. */
  begin(): void {
    this.#since ??= this.#now();
  }

  /** Resolves once no work is in flight. */
  whenIdle(): Promise<void> {
    if (this.#work.size === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const prev = this.#onIdle;
      this.#onIdle = () => {
        prev?.();
        resolve();
      };
    });
  }
}
