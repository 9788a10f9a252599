// admission/: saturation, the per-model queue, priorities and fairness between tenants. The queue's
// rules are pure (queue.ts, saturation.ts, priority.ts); admission.ts holds the timers and signals.
export { Admission, classLimits, higherAwaitsFirstByte, slotsOf } from './admission.js';
export type { AdmissionAsk, AdmissionObserver, LoadFacts, Permit, QueueView, WatchedTicket } from './admission.js';
export { admissionDefaults, admissionKeys, parseAdmissionSection } from './config.js';
export type { AdmissionConfig } from './config.js';
export { admissionMetrics } from './metrics.js';
export { defaultPriority, enginePriorityOf, isPriorityClass, maxWaitOf, priorityClasses, requestPriority } from './priority.js';
export type { PriorityClass } from './priority.js';
export { FairQueue } from './queue.js';
export type { Offer, QueueEntry, QueueLimits } from './queue.js';
export { AdmissionRefused } from './refusal.js';
export type { RefusalReason } from './refusal.js';
export { roomOn } from './saturation.js';
export type { ReplicaLoad, SaturationLimits } from './saturation.js';
