// Reads each ready engine's own queue length from its Prometheus /metrics, for the load tier's
// second criterion: requests this gateway did not send (another gateway, a direct client) still
// wait in that queue.
import { setTimeout as sleep } from 'node:timers/promises';
import type { Dispatcher } from 'undici';
import { request } from 'undici';
import { withDeadline } from '../limits/index.js';
import type { LoadBook, ReplicaDirectory } from './router.js';

/** Sum of vLLM's `vllm:num_requests_waiting` samples (one per engine or DP rank) in a scrape. */
export function waitingOf(text: string): number | undefined {
  let sum: number | undefined;
  for (const line of text.split('\n')) {
    if (!line.startsWith('vllm:num_requests_waiting')) continue;
    const v = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (Number.isFinite(v)) sum = (sum ?? 0) + v;
  }
  return sum;
}

/** Polls every ready replica's /metrics every `intervalMs` until `close()`. */
export class QueuePoller {
  readonly #stop = new AbortController();
  readonly #done: Promise<void>;

  constructor(o: { directory: ReplicaDirectory; load: LoadBook; dispatcher: Dispatcher; intervalMs: number; timeoutMs: number }) {
    // A background loop owned by this object: close() stops it and awaits it; it never throws.
    this.#done = o.intervalMs > 0 ? this.#run(o) : Promise.resolve();
  }

  async #run(o: { directory: ReplicaDirectory; load: LoadBook; dispatcher: Dispatcher; intervalMs: number; timeoutMs: number }): Promise<void> {
    const signal = this.#stop.signal;
    while (!signal.aborted) {
      const seen = new Map<string, URL>();
      for (const m of o.directory.models()) for (const r of o.directory.ready(m)) seen.set(r.id, r.url);
      await Promise.all(
        [...seen].map(async ([id, url]) => {
          try {
            // One explicit timer per poll: AbortSignal.timeout inside AbortSignal.any can be lost
            // to a full GC on Node 20 (nodejs/node#57736), and one hung engine then stalled the loop.
            const { status, text } = await withDeadline(signal, o.timeoutMs, `queue poll of ${id}`, async (s) => {
              const res = await request(new URL('/metrics', url), { dispatcher: o.dispatcher, signal: s });
              return { status: res.statusCode, text: await res.body.text() };
            });
            const waiting = status === 200 ? waitingOf(text) : undefined;
            if (waiting !== undefined) o.load.setEngineWaiting(id, waiting);
          } catch {
            // An engine that does not answer in time keeps its last known queue; health is the agent's job.
          }
        }),
      );
      try {
        await sleep(o.intervalMs, undefined, { signal });
      } catch {
        // close() aborted the sleep: the loop condition ends it.
      }
    }
  }

  /** Stops polling; resolves when the last poll has finished. */
  close(): Promise<void> {
    this.#stop.abort();
    return this.#done;
  }
}
