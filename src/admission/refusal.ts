// A request the admission queue will not serve: refused at once, or when its wait ran out, always
// with the reason and when to come back, never left to time out in silence.
import { LlmgwError } from '../errors/index.js';
import type { PriorityClass } from './priority.js';

/** Why a request was refused; a label of llmgw_admission_refused_total. */
export type RefusalReason = 'queue-full' | 'tenant-over-share' | 'displaced' | 'deadline' | 'wait-expired' | 'closing';

/** The refusal a client receives: 429 for its tenant's own excess, 503 for the cluster's overload. */
export class AdmissionRefused extends LlmgwError {
  readonly reason: RefusalReason;
  readonly priority: PriorityClass;
  /** When the client may try again, in seconds (Retry-After). */
  readonly retryAfterS: number;
  constructor(reason: RefusalReason, priority: PriorityClass, retryAfterS: number, message: string) {
    super(reason === 'tenant-over-share' || reason === 'displaced' ? 'LLMGW_TENANT_SHARE' : reason === 'queue-full' || reason === 'closing' ? 'LLMGW_QUEUE_FULL' : 'LLMGW_QUEUE_DEADLINE', message);
    this.reason = reason;
    this.priority = priority;
    this.retryAfterS = retryAfterS;
  }
}

/** The refusal of a request of `ask.priority` by `ask.tenant` for `ask.model`, its message naming what to change. */
export function refusalOf(ask: { readonly model: string; readonly tenant: string; readonly priority: PriorityClass; readonly maxWaitMs: number }, reason: RefusalReason, retryAfterS: number, waitMs?: number): AdmissionRefused {
  const retry = Math.max(1, Math.ceil(retryAfterS));
  const at = `model "${ask.model}", ${ask.priority} request of tenant "${ask.tenant}"`;
  const message = {
    'queue-full': `${at}: every replica is saturated and the admission queue is full; retry after ${retry} s, or raise gateway.admission.max_queued_requests / max_queued_bytes`,
    'tenant-over-share': `${at}: the admission queue is full and this tenant already holds more than its share of it; retry after ${retry} s, or raise its weight in gateway.api_keys`,
    displaced: `${at}: displaced from the full admission queue by a request of a higher class or a tenant under its share; retry after ${retry} s`,
    deadline: `${at}: every replica is saturated and the estimated wait (${Math.round(waitMs ?? 0)} ms) is longer than this request may wait (${ask.maxWaitMs} ms); retry after ${retry} s, send a longer x-llmgw-max-wait-ms, or add replicas`,
    'wait-expired': `${at}: waited ${Math.round(waitMs ?? 0)} ms in the admission queue, its limit, without a replica having room; retry after ${retry} s`,
    closing: `${at}: the gateway is shutting down; retry on another gateway`,
  }[reason];
  return new AdmissionRefused(reason, ask.priority, retry, message);
}
