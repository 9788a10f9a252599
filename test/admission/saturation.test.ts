// What saturates a replica for each class: waiting places and the engine's slots, each lower class
// leaving some free for the classes above it; and the hold a higher class's prefill puts on a replica.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { admissionDefaults, classLimits, higherAwaitsFirstByte, roomOn, slotsOf } from '../../src/admission/index.js';
import type { AdmissionConfig, PriorityClass, ReplicaLoad, SaturationLimits } from '../../src/admission/index.js';

const cfg = (o: Partial<AdmissionConfig>): AdmissionConfig => ({ ...admissionDefaults, ...o });

const limits: readonly { why: string; cfg: AdmissionConfig; p: PriorityClass; waiting: number; slots: number }[] = [
  { why: 'the defaults keep one batch request waiting per replica, so the engine never starts two batch prompts in one step', cfg: cfg({}), p: 'batch', waiting: 1, slots: 0 },
  { why: 'the defaults: standard leaves 4 waiting places to interactive', cfg: cfg({}), p: 'standard', waiting: 4, slots: 0 },
  { why: 'the highest class may fill every place', cfg: cfg({}), p: 'interactive', waiting: 8, slots: 0 },
  { why: 'slots are not counted until the operator states them', cfg: cfg({ slotsPerReplica: 0, reservedSlotsPerClass: 3 }), p: 'batch', waiting: 1, slots: 0 },
  { why: 'with 4 slots batch holds 2, so an interactive request finds a slot without preempting', cfg: cfg({ slotsPerReplica: 4 }), p: 'batch', waiting: 1, slots: 2 },
  { why: 'with 4 slots standard holds 3', cfg: cfg({ slotsPerReplica: 4 }), p: 'standard', waiting: 4, slots: 3 },
  { why: 'with 4 slots interactive is bound by waiting places only, so the engine always has its next request queued', cfg: cfg({ slotsPerReplica: 4 }), p: 'interactive', waiting: 8, slots: 0 },
  { why: 'a class never gets less than one slot: batch still runs on a one-slot engine', cfg: cfg({ slotsPerReplica: 1 }), p: 'batch', waiting: 1, slots: 1 },
  { why: 'nothing reserved: a lower class may fill every place and slot', cfg: cfg({ reservedPerClass: 0, slotsPerReplica: 4, reservedSlotsPerClass: 0 }), p: 'batch', waiting: 8, slots: 4 },
];
for (const r of limits) {
  void test(`classLimits: ${r.why}`, () => {
    const l = classLimits(r.cfg, r.p);
    assert.deepEqual([l.maxWaitingPerReplica, l.maxInFlightPerReplica], [r.waiting, r.slots]);
  });
}

const load = (o: Partial<ReplicaLoad>): ReplicaLoad => ({ id: 'r', waiting: 0, engineWaiting: 0, queuedPrefillTokens: 0, prefillTokensPerS: 10_000, ...o });
const l = (o: Partial<SaturationLimits>): SaturationLimits => ({ maxWaitingPerReplica: 4, maxQueuedPrefillMs: 2000, ...o });
const rooms: readonly { why: string; r: ReplicaLoad; l: SaturationLimits; room: number }[] = [
  { why: 'waiting places alone without a slot bound', r: load({ waiting: 1, inFlight: 30 }), l: l({}), room: 3 },
  { why: 'the slots bound the room below the waiting places', r: load({ waiting: 1, inFlight: 3 }), l: l({ maxInFlightPerReplica: 4 }), room: 1 },
  { why: 'every slot taken: saturated though nothing waits', r: load({ inFlight: 4 }), l: l({ maxInFlightPerReplica: 4 }), room: 0 },
  { why: 'more in flight than slots (another class filled them): saturated, not negative', r: load({ inFlight: 6 }), l: l({ maxInFlightPerReplica: 2 }), room: 0 },
  { why: 'the waiting places bound the room below the slots', r: load({ waiting: 3, inFlight: 3 }), l: l({ maxInFlightPerReplica: 16 }), room: 1 },
];
for (const r of rooms) void test(`roomOn: ${r.why}`, () => assert.equal(roomOn(r.r, r.l), r.room));

const holds: readonly { why: string; counts: number[] | undefined; p: PriorityClass; held: boolean }[] = [
  { why: 'an interactive request in prefill holds the replica for batch', counts: [1, 0, 0], p: 'batch', held: true },
  { why: 'and for standard', counts: [1, 0, 0], p: 'standard', held: true },
  { why: 'never for its own class', counts: [2, 0, 0], p: 'interactive', held: false },
  { why: 'a standard request holds it for batch', counts: [0, 1, 0], p: 'batch', held: true },
  { why: 'a batch request holds nothing', counts: [0, 0, 3], p: 'standard', held: false },
  { why: 'a replica with nothing in prefill holds nothing', counts: undefined, p: 'batch', held: false },
];
for (const h of holds) void test(`higherAwaitsFirstByte: ${h.why}`, () => assert.equal(higherAwaitsFirstByte(h.counts, h.p), h.held));

const slots: readonly { why: string; stated: number; learned: number | undefined; want: number }[] = [
  { why: "the operator's slots_per_replica wins", stated: 8, learned: 4, want: 8 },
  { why: 'else the slots the engine showed when full', stated: 0, learned: 4, want: 4 },
  { why: 'else none: slots are not counted', stated: 0, learned: undefined, want: 0 },
];
for (const s of slots) {
  void test(`slotsOf: ${s.why}`, () => {
    const r: ReplicaLoad = { id: 'r', waiting: 0, engineWaiting: 0, queuedPrefillTokens: 0, prefillTokensPerS: 1, engineSlots: s.learned };
    assert.equal(slotsOf(cfg({ slotsPerReplica: s.stated }), r), s.want);
    assert.equal(classLimits(cfg({}), 'batch', slotsOf(cfg({ slotsPerReplica: s.stated }), r)).maxInFlightPerReplica, s.want === 0 ? 0 : Math.max(1, s.want - 2));
  });
}
