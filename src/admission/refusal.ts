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
