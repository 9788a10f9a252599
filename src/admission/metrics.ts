// Admission's metrics: the observer the controller reports to, and the queue's depth read at scrape
// time from the controller itself (never pushed from inside its logic).
import { Counter, Gauge, Histogram } from 'prom-client';
import type { Registry } from 'prom-client';
import type { AdmissionObserver, QueueView } from './admission.js';
import { priorityClasses } from './priority.js';

/** Registers admission's metrics on `registry`; `view` is read at each scrape. */
export function admissionMetrics(registry: Registry, view: () => readonly QueueView[]): AdmissionObserver {
  const registers = [registry];
  const admitted = new Counter({
    name: 'llmgw_admission_admitted_total',
    help: 'Requests admitted, by model, priority class and how (direct: a replica had room; queued: after waiting).',
    labelNames: ['model', 'priority', 'via'],
    registers,
  });
  const refused = new Counter({
    name: 'llmgw_admission_refused_total',
    help: 'Requests refused by admission, by model, priority class and reason (queue-full, tenant-over-share, displaced, deadline, wait-expired, closing).',
    labelNames: ['model', 'priority', 'reason'],
    registers,
  });
  const placedLower = new Counter({
    name: 'llmgw_admission_placed_lower_total',
    help: 'Requests placed a class below their own because their tenant held more than its share while another active tenant (on this gateway or a peer) held less, by model and priority class.',
    labelNames: ['model', 'priority'],
    registers,
  });
  const waitSeconds = new Histogram({
    name: 'llmgw_admission_wait_seconds',
    help: 'Time queued requests waited in the admission queue before dispatch, by priority class.',
    labelNames: ['priority'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers,
  });
  new Gauge({
    name: 'llmgw_admission_queue_depth',
    help: 'Requests waiting in the admission queue, by model and priority class.',
    labelNames: ['model', 'priority'],
    registers,
    collect() {
      this.reset();
      for (const q of view()) for (const p of priorityClasses) this.set({ model: q.model, priority: p }, q.byClass[p]);
    },
  });
  new Gauge({
    name: 'llmgw_admission_queue_bytes',
    help: 'Request body bytes held by the admission queue, by model.',
    labelNames: ['model'],
    registers,
    collect() {
      this.reset();
      for (const q of view()) this.set({ model: q.model }, q.bytes);
    },
  });
  return {
    admitted: (model, priority, via, waitedMs) => {
      admitted.inc({ model, priority, via });
      if (via === 'queued') waitSeconds.observe({ priority }, waitedMs / 1000);
    },
    refused: (model, priority, reason) => refused.inc({ model, priority, reason }),
    placedLower: (model, priority) => placedLower.inc({ model, priority }),
  };
}
