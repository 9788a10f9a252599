// admission/: saturation, the per-model queue, priorities and fairness between tenants. The queue's
// rules are pure (queue.ts, saturation.ts, priority.ts); admission.ts holds the timers and signals.
export { Admission } from './admission.js';
export type { AdmissionAsk, AdmissionObserver, AdmissionPeersView, LoadFacts, Permit, QueueView, WatchedTicket } from './admission.js';
export { admissionDefaults, admissionKeys, parseAdmissionSection } from './config.js';
export type { AdmissionConfig } from './config.js';
export { admissionMetrics } from './metrics.js';
export { defaultPriority, enginePriorityOf, isPriorityClass, maxWaitOf, priorityClasses, requestPriority } from './priority.js';
export type { PriorityClass } from './priority.js';
export { AdmissionPeers, decodeHolds, encodeHolds, mergePeers } from './peers.js';
export type { AdmissionPeersOptions, HoldRow, PeerBoard, PeerHolds, PeerReport, PeerTenant } from './peers.js';
export { FairQueue } from './queue.js';
export type { Offer, QueueEntry, QueueLimits } from './queue.js';
export { AdmissionRefused } from './refusal.js';
export type { RefusalReason } from './refusal.js';
export { classLimits, higherAwaitsFirstByte, roomOn, slotsOf } from './saturation.js';
export type { ReplicaLoad, SaturationLimits } from './saturation.js';
