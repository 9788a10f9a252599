// Reads each ready engine's own Prometheus /metrics: its queue length, for the load tier's second
// criterion (requests this gateway did not send, from another gateway or a direct client, still
// wait in that queue), and its prefill and queue histograms, which teach the cost model.
import { setTimeout as sleep } from 'node:timers/promises';
import type { Dispatcher } from 'undici';
import { request } from 'undici';
import { withDeadline } from '../limits/index.js';
import type { CostModel, EngineScrape } from './cost-model.js';
import type { ReplicaDirectory } from './facts.js';
import type { LoadBook } from './router.js';

// The sum of a gauge's samples (one per engine or DP rank) in a scrape; undefined when absent.
function gaugeSum(text: string, names: readonly string[]): number | undefined {
  let sum: number | undefined;
  for (const line of text.split('\n')) {
    if (!names.some((n) => line.startsWith(n))) continue;
    const v = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (Number.isFinite(v)) sum = (sum ?? 0) + v;
  }
  return sum;
}

/** Sum of vLLM's `vllm:num_requests_waiting` samples (one per engine or DP rank) in a scrape, or
 * llama.cpp's `llamacpp:requests_deferred` (requests waiting for a free slot). */
export const waitingOf = (text: string): number | undefined => gaugeSum(text, ['vllm:num_requests_waiting', 'llamacpp:requests_deferred ']);

/** Sum of vLLM's `vllm:num_requests_running` samples, or llama.cpp's `llamacpp:requests_processing` (busy slots). */
export const runningOf = (text: string): number | undefined => gaugeSum(text, ['vllm:num_requests_running', 'llamacpp:requests_processing ']);

// vLLM's names for what the cost model reads; a sample per engine or DP rank, summed.
const scraped: Readonly<Record<string, keyof EngineScrape>> = {
  'vllm:num_requests_waiting': 'waiting',
  'vllm:prompt_tokens_total': 'promptTokens',
  'vllm:prefix_cache_hits_total': 'cachedTokens',
  'vllm:request_prefill_time_seconds_sum': 'prefillSeconds',
  'vllm:request_prefill_time_seconds_count': 'prefillRequests',
  'vllm:request_queue_time_seconds_sum': 'queueSeconds',
  'vllm:request_queue_time_seconds_count': 'queueRequests',
  // llama.cpp's (with --metrics, which the agent always passes). Its prompt counter counts only the
  // tokens it computed, since a slot's cached prefix never reaches the counter: read with no cached
  // tokens, the difference of two scrapes is exactly the prefill those seconds paid for.
  'llamacpp:requests_deferred': 'waiting',
  'llamacpp:prompt_tokens_total': 'promptTokens',
  'llamacpp:prompt_seconds_total': 'prefillSeconds',
};

/** The figures the cost model reads from one scrape, each summed over its samples; absent when not exported. */
export function scrapeOf(text: string): EngineScrape {
  const out: { -readonly [K in keyof EngineScrape]: number } = {};
  let llamaCpp = false;
  for (const line of text.split('\n')) {
    if (line.startsWith('llamacpp:')) llamaCpp = true;
    else if (!line.startsWith('vllm:')) continue;
    const brace = line.indexOf('{');
    const space = line.lastIndexOf(' ');
    const key = scraped[line.slice(0, brace >= 0 ? brace : line.indexOf(' '))];
    const v = Number(line.slice(space + 1));
    if (key !== undefined && Number.isFinite(v)) out[key] = (out[key] ?? 0) + v;
  }
  if (llamaCpp) out.cachedTokens ??= 0;
  return out;
}

/** What the poller reads from and writes to. */
export interface PollerOptions {
  readonly directory: ReplicaDirectory;
  readonly load: LoadBook;
  readonly costs?: CostModel | undefined;
  readonly dispatcher: Dispatcher;
  readonly intervalMs: number;
  readonly timeoutMs: number;
}

/** Polls every ready replica's /metrics every `intervalMs` until `close()`. */
export class QueuePoller {
  readonly #stop = new AbortController();
  readonly #done: Promise<void>;

  constructor(o: PollerOptions) {
    // A background loop owned by this object: close() stops it and awaits it; it never throws.
    this.#done = o.intervalMs > 0 ? this.#run(o) : Promise.resolve();
  }

  async #run(o: PollerOptions): Promise<void> {
    const signal = this.#stop.signal;
    while (!signal.aborted) {
      const seen = new Map<string, { url: URL; prior: number | undefined }>();
      for (const m of o.directory.models()) for (const r of o.directory.ready(m)) seen.set(r.id, { url: r.url, prior: r.prefillTokensPerS });
      await Promise.all(
        [...seen].map(async ([id, { url, prior }]) => {
          try {
            // One explicit timer per poll: AbortSignal.timeout inside AbortSignal.any can be lost
            // to a full GC on Node 20 (nodejs/node#57736), and one hung engine then stalled the loop.
            const { status, text } = await withDeadline(signal, o.timeoutMs, `queue poll of ${id}`, async (s) => {
              const res = await request(new URL('/metrics', url), { dispatcher: o.dispatcher, signal: s });
              return { status: res.statusCode, text: await res.body.text() };
            });
            if (status !== 200) return;
            const waiting = waitingOf(text);
            if (waiting !== undefined) o.load.setEngineQueue(id, waiting, runningOf(text));
            o.costs?.observeScrape(id, scrapeOf(text), prior);
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
