// Metrics of on-demand adapters, added by wrapping: residency reports loads and unloads to the
// observer built here and knows nothing of Prometheus; what is resident is read at scrape time.
import { Counter, Gauge, Histogram } from 'prom-client';
import type { Registry } from 'prom-client';
import type { AdapterObserver } from './adapters.js';

/** Registers the adapter metrics on `registry`; `resident` is read when /metrics is scraped. */
export function adapterMetrics(registry: Registry, resident: () => ReadonlyMap<string, readonly string[]>): AdapterObserver {
  const registers = [registry];
  const loads = new Counter({
    name: 'llmgw_gateway_adapter_loads_total',
    help: 'Run-time LoRA adapter loads the gateway asked engines for, by adapter and outcome (ok, failed).',
    labelNames: ['adapter', 'outcome'],
    registers,
  });
  const unloads = new Counter({
    name: 'llmgw_gateway_adapter_unloads_total',
    help: 'LoRA adapters unloaded to keep a replica within its bound, by adapter and outcome.',
    labelNames: ['adapter', 'outcome'],
    registers,
  });
  const loadSeconds = new Histogram({
    name: 'llmgw_gateway_adapter_load_duration_seconds',
    help: 'Time an engine took to load an adapter: what the first request for it on a replica waited.',
    labelNames: ['outcome'],
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60],
    registers,
  });
  new Gauge({
    name: 'llmgw_gateway_adapters_resident',
    help: 'Run-time LoRA adapters each replica holds or is loading.',
    labelNames: ['replica'],
    registers,
    collect() {
      this.reset();
      for (const [replica, names] of resident()) this.set({ replica }, names.length);
    },
  });
  return {
    loaded: (adapter, outcome, seconds) => {
      loads.inc({ adapter, outcome });
      loadSeconds.observe({ outcome }, seconds);
    },
    unloaded: (adapter, outcome) => unloads.inc({ adapter, outcome }),
  };
}
