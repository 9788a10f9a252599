// The sim's Prometheus metrics under vLLM's names, so dashboards and the gateway's scrapers read a
// sim exactly like a vLLM replica. Gauges and prefix-cache counters are read from the schedulers
// at scrape time; per-request figures are observed when a request ends.
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { RankScheduler, RequestAccount } from './scheduler.js';

// vLLM's own bucket edges (vllm/v1/metrics/loggers.py), so histogram_quantile reads the same.
const ttftBuckets = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0];
const e2eBuckets = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0];

/** The sim's metric set on its own registry. */
export interface SimMetrics {
  readonly registry: Registry;
  observe(account: RequestAccount, modelName: string): void;
}

/** Builds the metrics over these ranks; `modelName` is the first served name, as vLLM labels it. */
export function createSimMetrics(ranks: readonly RankScheduler[], modelName: string): SimMetrics {
  const registry = new Registry();
  const labels = ['model_name', 'engine'] as const;
  const each = (f: (r: RankScheduler, l: { model_name: string; engine: string }) => void): void => {
    for (const r of ranks) f(r, { model_name: modelName, engine: String(r.rank) });
  };
  new Gauge({
    name: 'vllm:num_requests_running',
    help: 'Number of requests in model execution batches.',
    labelNames: labels,
    registers: [registry],
    collect() {
      each((r, l) => this.set(l, r.numRunning));
    },
  });
  new Gauge({
    name: 'vllm:num_requests_waiting',
    help: 'Number of requests waiting to be processed.',
    labelNames: labels,
    registers: [registry],
    collect() {
      each((r, l) => this.set(l, r.numWaiting));
    },
  });
  for (const name of ['vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc']) {
    new Gauge({
      name,
      help: 'KV-cache usage. 1 means 100 percent usage.',
      labelNames: labels,
      registers: [registry],
      collect() {
        each((r, l) => this.set(l, r.pool.usage));
      },
    });
  }
  // Counters only go up: each scrape adds what the scheduler counted since the last one.
  const fromStats = (name: string, help: string, read: (r: RankScheduler) => number): void => {
    const seen = new Map<number, number>();
    new Counter({
      name,
      help,
      labelNames: labels,
      registers: [registry],
      collect() {
        each((r, l) => {
          const now = read(r);
          this.inc(l, now - (seen.get(r.rank) ?? 0));
          seen.set(r.rank, now);
        });
      },
    });
  };
  fromStats('vllm:prefix_cache_queries_total', 'Prefix cache queries, in terms of number of queried tokens.', (r) => r.stats.prefixQueries);
  fromStats('vllm:prefix_cache_hits_total', 'Prefix cache hits, in terms of number of cached tokens.', (r) => r.stats.prefixHits);
  fromStats('vllm:num_preemptions_total', 'Cumulative number of preemption from the engine.', (r) => r.stats.preemptions);
  fromStats('llmgw_sim_prefill_computed_tokens_total', 'Prompt tokens the sim computed (not served from its prefix cache).', (r) => r.stats.prefillComputedTokens);

  const promptTokens = new Counter({ name: 'vllm:prompt_tokens_total', help: 'Number of prefill tokens processed.', labelNames: labels, registers: [registry] });
  const generationTokens = new Counter({ name: 'vllm:generation_tokens_total', help: 'Number of generation tokens processed.', labelNames: labels, registers: [registry] });
  const success = new Counter({
    name: 'vllm:request_success_total',
    help: 'Count of successfully processed requests.',
    labelNames: [...labels, 'finished_reason'],
    registers: [registry],
  });
  const ttft = new Histogram({ name: 'vllm:time_to_first_token_seconds', help: 'Histogram of time to first token in seconds.', labelNames: labels, buckets: ttftBuckets, registers: [registry] });
  const e2e = new Histogram({ name: 'vllm:e2e_request_latency_seconds', help: 'Histogram of e2e request latency in seconds.', labelNames: labels, buckets: e2eBuckets, registers: [registry] });
  const prefill = new Histogram({
    name: 'llmgw_sim_prefill_seconds',
    help: 'Simulated prefill time per request: uncached prompt tokens over the prefill rate.',
    labelNames: labels,
    buckets: ttftBuckets,
    registers: [registry],
  });
  // vLLM v1's per-request phases: waiting in the queue, then from first scheduled to first token
  // (which covers whatever else shared those steps). Gateways learn a replica's speed from these.
  const queueTime = new Histogram({ name: 'vllm:request_queue_time_seconds', help: 'Histogram of time spent in WAITING phase for request.', labelNames: labels, buckets: e2eBuckets, registers: [registry] });
  const prefillTime = new Histogram({ name: 'vllm:request_prefill_time_seconds', help: 'Histogram of time spent in PREFILL phase for request.', labelNames: labels, buckets: e2eBuckets, registers: [registry] });
  return {
    registry,
    observe(a, model) {
      const l = { model_name: model, engine: String(a.rank) };
      promptTokens.inc(l, a.promptTokens);
      generationTokens.inc(l, a.completionTokens);
      if (a.finishReason !== undefined && a.finishReason !== 'abort') success.inc({ ...l, finished_reason: a.finishReason }, 1);
      if (a.ttftMs !== undefined) {
        ttft.observe(l, a.ttftMs / 1000);
        queueTime.observe(l, a.queuedMs / 1000);
        prefillTime.observe(l, Math.max(0, a.ttftMs - a.queuedMs) / 1000);
      }
      if (a.e2eMs !== undefined) e2e.observe(l, a.e2eMs / 1000);
      prefill.observe(l, a.prefillMs / 1000);
    },
  };
}
