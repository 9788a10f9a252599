// The admission controller: the effects around the pure queue. A request goes straight to routing
// while its model's replicas have room; once every replica is saturated it waits in the model's
// queue and is dispatched, by class and tenant share, as room comes back (a first byte, a finished
// request, the engine's queue shrinking). A request that cannot start before its deadline is refused
// at once with the reason and a Retry-After; one whose wait runs out is refused then; one whose
// client leaves is taken out at once. Nothing waits unbounded and nothing is dropped silently.
import type { AdmissionConfig } from './config.js';
import { priorityClasses } from './priority.js';
import type { PriorityClass } from './priority.js';
import type { HoldRow, PeerTenant } from './peers.js';
import { FairQueue } from './queue.js';
import type { QueueEntry } from './queue.js';
import { refusalOf } from './refusal.js';
import type { AdmissionRefused } from './refusal.js';
import type { RefusalReason } from './refusal.js';
import { classLimits, higherAwaitsFirstByte, prefillRateOf, queuedPrefillMs, roomOn, slotsOf, startsAmong } from './saturation.js';
import type { ReplicaLoad } from './saturation.js';

/** What admission reads of the replicas: each ready replica's load, now (routing's LoadBook and cost model). */
export interface LoadFacts {
  replicas(model: string): readonly ReplicaLoad[];
}

/** Where admission's counts go (metrics, by wrapping); every method is optional to a fake. */
export interface AdmissionObserver {
  admitted(model: string, priority: PriorityClass, via: 'direct' | 'queued', waitedMs: number): void;
  refused(model: string, priority: PriorityClass, reason: RefusalReason): void;
  /** A request of class `priority` was placed a class lower: its tenant held more than its share. */
  placedLower(model: string, priority: PriorityClass): void;
}

/** What the other gateways' tenants hold of a model, as admission asks for it. */
export type AdmissionPeersView = ((model: string) => ReadonlyMap<string, PeerTenant> | undefined) | undefined;

/** One request asking to be admitted. */
export interface AdmissionAsk {
  readonly model: string;
  readonly tenant: string;
  readonly weight: number;
  readonly priority: PriorityClass;
  /** Estimated prompt tokens: what fairness shares and the drain rate is measured in. */
  readonly costTokens: number;
  /** Memory it holds while it waits. */
  readonly sizeBytes: number;
  /** The longest it may wait in the queue (the client's timeout or header; at most gateway.admission.max_wait_ms). */
  readonly maxWaitMs: number;
  /** The client's: leaving takes it out of the queue at once. */
  readonly signal: AbortSignal;
}

/** A ticket of routing, as admission watches it. */
export interface WatchedTicket {
  firstByte(): void;
  done(): void;
}

/** An admitted request: how it got in, and the hooks that give its room back. */
export interface Permit {
  /** Queued (the replicas were saturated) or straight through. */
  readonly queued: boolean;
  readonly waitedMs: number;
  /** Why it waited, for the receipt; undefined when it did not. */
  readonly why: string | undefined;
  /**
   * The routed request's ticket on `replica`, wrapped so its first byte and end let the next one in;
   * until its first byte no request of a lower class is let onto that replica.
   */
  watch<T extends WatchedTicket>(ticket: T, replica: string): T;
  /**
   * Of `replicas`, those its class may be placed on as admission found them: not one where a higher
   * class awaits its first token, nor a replica kept free of lower classes' prefill; contended, one
   * with no prefill awaited (startsAmong). All of them when that leaves none (the facts moved
   * since): routing then decides as without admission.
   */
  among<R extends { readonly id: string }>(replicas: readonly R[]): readonly R[];
  /** The request is over (answered, failed or never routed); idempotent. */
  done(): void;
}

/** One model's queue as shown in /debug and `ctl status`. */
export interface QueueView {
  readonly model: string;
  readonly queued: number;
  readonly bytes: number;
  readonly byClass: Record<PriorityClass, number>;
  readonly tenants: readonly { tenant: string; priority: PriorityClass; requests: number; costTokens: number }[];
  /** Dispatched and not yet routed. */
  readonly dispatching: number;
  /** Prompt tokens a second the queue drained at while backlogged (0: not measured yet). */
  readonly drainTokensPerS: number;
}

interface Waiter {
  readonly ask: AdmissionAsk;
  readonly atMs: number;
  /** Why it was queued, as it found the replicas when it asked. */
  readonly why: string;
  resolve(p: Permit): void;
  reject(e: unknown): void;
  cleanup(): void;
}

interface ModelState {
  readonly model: string;
  readonly queue: FairQueue<Waiter>;
  /** Dispatched but not yet booked on a replica, by class index: routing's load does not show them yet. */
  readonly dispatching: number[];
  /** Of those, the ones placed a class below their own. */
  dispatchingDemoted: number;
  /** When a request of each class (by index) last asked to be admitted: what makes a class active. */
  readonly lastAskMs: number[];
  /** The same per tenant, for the tenants that asked within `activeWindowMs` (older ones are dropped as met). */
  readonly tenantAskMs: Map<string, number[]>;
  /** Per tenant, its requests let in and not yet over, by class index: with its queued ones, what it holds. */
  readonly admittedOf: Map<string, number[]>;
  /** When a request of each class (by index) was last let in: a class queued and not let in is starving. */
  readonly lastAdmitMs: number[];
  /** Per replica, this gateway's requests of each class routed there and not yet answering (by class index). */
  readonly awaitingFirstByte: Map<string, number[]>;
  /**
   * Per replica, this gateway's requests placed a class below their own (their tenant over its
   * share) routed there and not yet over, by the class index they were placed at.
   */
  readonly demotedOn: Map<string, number[]>;
  /** Drain rate learned while backlogged: tokens dispatched from the queue over time spent backlogged. */
  drainedTokens: number;
  backloggedMs: number;
  lastMs: number;
}

// The drain rate forgets with a half-life of about this much backlogged time.
const drainHalfLifeMs = 10_000;
// Admission off: every request goes straight through and nothing is counted.
const passThrough: Permit = Object.freeze({
  queued: false,
  waitedMs: 0,
  why: undefined,
  watch: <T>(t: T): T => t,
  among: <R>(replicas: readonly R[]): readonly R[] => replicas,
  done: (): void => undefined,
});

/** Whether a class below index `top` has a request in `counts` (by class index). */
const lowerIn = (counts: readonly number[] | undefined, top: number): boolean => counts !== undefined && counts.some((n, i) => i > top && n > 0);
const sum = (xs: readonly number[]): number => xs.reduce((n, x) => n + x, 0);

/** Admission for every model of one gateway; `close()` refuses whatever still waits. */
export class Admission {
  readonly #cfg: AdmissionConfig;
  readonly #facts: LoadFacts;
  readonly #now: () => number;
  readonly #observer: AdmissionObserver | undefined;
  readonly #peers: AdmissionPeersView;
  readonly #models = new Map<string, ModelState>();
  #timer: NodeJS.Timeout | undefined;
  #closed = false;

  /** `peers`: what the other gateways' tenants hold of a model (AdmissionPeers.holdsOf); absent with one gateway. */
  constructor(o: { config: AdmissionConfig; facts: LoadFacts; now?: () => number; observer?: AdmissionObserver | undefined; peers?: AdmissionPeersView }) {
    this.#cfg = o.config;
    this.#facts = o.facts;
    this.#now = o.now ?? (() => performance.now());
    this.#observer = o.observer;
    this.#peers = o.peers;
  }

  #state(model: string): ModelState {
    let s = this.#models.get(model);
    if (s === undefined) {
      const c = this.#cfg;
      s = {
        model,
        queue: new FairQueue<Waiter>({ maxRequests: c.maxQueuedRequests, maxBytes: c.maxQueuedBytes, starvationMs: c.starvationMs, starvationEvery: c.starvationEvery }),
        dispatching: priorityClasses.map(() => 0),
        dispatchingDemoted: 0,
        lastAskMs: priorityClasses.map(() => -Infinity),
        tenantAskMs: new Map(),
        admittedOf: new Map(),
        lastAdmitMs: priorityClasses.map(() => -Infinity),
        awaitingFirstByte: new Map(),
        demotedOn: new Map(),
        drainedTokens: 0,
        backloggedMs: 0,
        lastMs: this.#now(),
      };
      this.#models.set(model, s);
    }
    return s;
  }

  /**
   * Admits a request: at once while its model has room, else after its turn in the queue. Rejects
   * with AdmissionRefused (the reason and Retry-After), or with the client's abort reason when it left.
   */
  admit(ask: AdmissionAsk): Promise<Permit> {
    ask.signal.throwIfAborted();
    if (!this.#cfg.enabled) return Promise.resolve(passThrough);
    const s = this.#state(ask.model);
    this.#account(s);
    const rank = priorityClasses.indexOf(ask.priority);
    s.lastAskMs[rank] = this.#now();
    const asks = s.tenantAskMs.get(ask.tenant) ?? priorityClasses.map(() => -Infinity);
    asks[rank] = this.#now();
    s.tenantAskMs.set(ask.tenant, asks);
    const replicas = this.#facts.replicas(ask.model);
    // Placed as the queue would place it: a flood's first requests, let in before any queued, took
    // both replicas at standard and kept them from the polite tenant until they ended.
    const place = this.#placement(s, replicas, ask.tenant, ask.priority);
    const barred = this.#barred(s, replicas, place);
    // Something queued goes first: a request of its class or above, or a starved one.
    const behind = s.queue.sizeAtOrAbove(ask.priority) > 0 || s.queue.hasStarved(this.#now());
    // No ready replica: routing answers that at once with its own 503; queueing would only delay it.
    // Straight through when nothing queued would go first and its class has room.
    if (replicas.length === 0 || (!behind && this.#room(s, replicas, place, barred, place !== ask.priority) > 0)) {
      s.queue.charge(ask);
      this.#observer?.admitted(ask.model, ask.priority, 'direct', 0);
      return Promise.resolve(this.#permit(ask.model, s, ask, place, undefined, 0, barred));
    }
    if (this.#closed) return Promise.reject(this.#refusal(ask, 'closing', 1));
    const waitMs = this.#estimateWaitMs(s, ask, replicas);
    if (waitMs > ask.maxWaitMs || ask.maxWaitMs <= 0) return Promise.reject(this.#refusal(ask, 'deadline', waitMs / 1000, waitMs));
    return new Promise<Permit>((resolve, reject) => {
      const atMs = this.#now();
      const onAbort = (): void => {
        if (s.queue.remove(entry)) waiter.cleanup();
        reject(ask.signal.reason);
      };
      const timer = setTimeout(() => {
        if (!s.queue.remove(entry)) return;
        waiter.cleanup();
        reject(this.#refusal(ask, 'wait-expired', this.#estimateWaitMs(s, ask, this.#facts.replicas(ask.model)) / 1000, this.#now() - atMs));
      }, ask.maxWaitMs);
      const waiter: Waiter = {
        ask,
        atMs,
        why: behind ? 'requests queued before it' : this.#whyNoRoom(s, replicas, ask.priority),
        resolve,
        reject,
        cleanup: () => {
          clearTimeout(timer);
          ask.signal.removeEventListener('abort', onAbort);
        },
      };
      const entry: QueueEntry<Waiter> = { tenant: ask.tenant, weight: ask.weight, priority: ask.priority, costTokens: ask.costTokens, sizeBytes: ask.sizeBytes, enqueuedAtMs: atMs, value: waiter };
      const offer = s.queue.offer(entry);
      if (!offer.queued) {
        waiter.cleanup();
        reject(this.#refusal(ask, offer.reason, this.#estimateWaitMs(s, ask, replicas) / 1000));
        return;
      }
      if (offer.displaced !== undefined) {
        const d = offer.displaced.value;
        d.cleanup();
        d.reject(this.#refusal(d.ask, 'displaced', this.#estimateWaitMs(s, d.ask, replicas) / 1000));
      }
      ask.signal.addEventListener('abort', onAbort, { once: true });
      this.#tick();
      this.#pump(ask.model);
    });
  }

  // Keeps one poll timer while anything is queued: the engines' queues shrink without telling us.
  #tick(): void {
    if (this.#timer !== undefined || this.#closed) return;
    this.#timer = setInterval(() => {
      let queued = 0;
      for (const [model, s] of this.#models) {
        this.#pump(model);
        queued += s.queue.size;
      }
      if (queued === 0) {
        clearInterval(this.#timer);
        this.#timer = undefined;
      }
    }, this.#cfg.pollIntervalMs);
    // The queue's waiters hold the process by their sockets; this timer must not hold it alone.
    this.#timer.unref();
  }

  // Time spent backlogged, for the drain rate.
  #account(s: ModelState): void {
    const now = this.#now();
    if (s.queue.size > 0) s.backloggedMs += now - s.lastMs;
    s.lastMs = now;
    if (s.backloggedMs > drainHalfLifeMs * 2) {
      s.backloggedMs /= 2;
      s.drainedTokens /= 2;
    }
  }

  #drainRate(s: ModelState, replicas: readonly ReplicaLoad[]): number {
    // Until it is measured, the replicas' prefill rate is the guess.
    return measuredDrain(s) || prefillRateOf(replicas);
  }

  // The queue ahead at the rate it drains, after the first replica to clear its own queued prefill:
  // with every replica saturated, nothing starts before one of them has room.
  #estimateWaitMs(s: ModelState, ask: AdmissionAsk, replicas: readonly ReplicaLoad[]): number {
    let first = replicas.length === 0 ? 0 : Infinity;
    for (const r of replicas) first = Math.min(first, queuedPrefillMs(r));
    return first + (s.queue.tokensAhead(ask) * 1000) / Math.max(1, this.#drainRate(s, replicas));
  }

  // Room for one more request of class `p`: each lower class leaves `reservedPerClass` waiting
  // requests a replica free for the classes above it, so an interactive request finds room at once
  // while batch work keeps the replicas busy, instead of waiting for a batch request's first byte.
  // With the engine's slots stated, each lower class also leaves `reservedSlotsPerClass` of them
  // free: a batch flood filling every slot made each interactive request preempt a running batch
  // request (vLLM's priority policy), whose prompt is then prefilled again in a step an interactive
  // request may be waiting behind.
  // And a replica where a request of a higher class is waiting for its first token takes no lower
  // one until it has it: the engine would start the lower one's prefill in the same step (it fills
  // free slots after the higher one), and the step, which nothing interrupts, ends with both prompts.
  // With reserved_replicas_exclusive, a tenant placed lower (`demoted`) and kept off the reserved
  // replicas altogether fills every slot of its lanes instead: the polite tenant has a replica of
  // its own to start on, so the slots left for it there would only stand idle (2 of a 4-slot sim's),
  // and the flood would lose them twice, on the replica it may not use and on the one it may.
  #room(s: ModelState, replicas: readonly ReplicaLoad[], p: PriorityClass, barred: ReadonlySet<string>, demoted = false): number {
    const ownLanes = demoted && this.#cfg.reservedReplicasExclusive && this.#reservedFor(s, replicas, p) >= 0;
    let room = 0;
    for (const r of replicas) {
      if (barred.has(r.id)) continue;
      const slots = slotsOf(this.#cfg, r);
      const limits = classLimits(this.#cfg, p, slots);
      room += roomOn(r, ownLanes && slots > 0 ? { ...limits, maxInFlightPerReplica: slots } : limits);
    }
    // Requests placed lower go to their lanes, not where the polite tenant starts: counted against
    // its room, they made its request wait for the flood's routing (78 ms, the slowest of 28, on a
    // loaded box).
    const elsewhere = !demoted && this.#cfg.reservedReplicasExclusive ? s.dispatchingDemoted : 0;
    return room - (sum(s.dispatching) - elsewhere);
  }

  // The index of the highest class active lately when class `p` is below it and keeps
  // `reservedReplicas` replicas for it (two replicas or more); else -1.
  #reservedFor(s: ModelState, replicas: readonly ReplicaLoad[], p: PriorityClass): number {
    const now = this.#now();
    const top = s.lastAskMs.findIndex((t) => now - t <= this.#cfg.activeWindowMs);
    if (this.#cfg.reservedReplicas === 0 || top < 0 || priorityClasses.indexOf(p) <= top || replicas.length < 2) return -1;
    return top;
  }

  // The replicas a request of class `p` may not go onto now. Besides those where a higher class
  // awaits its first token: while a higher class is active, a lower class starts prefill on a
  // further replica only if that leaves `reservedReplicas` replicas with no prefill at all, and
  // never on more than all replicas but those. A prefill step runs to its end whatever arrives, so
  // an interactive request sent to a replica in a batch prompt's prefill waits for that step and
  // then for its own; with every replica prefilling batch prompts (a flood keeps them so), every
  // interactive request did. Keeping one replica free of batch prefill alone was not enough: the
  // next interactive request took it, and the one after found both replicas prefilling, one of
  // them a batch prompt (docs/perf.md has both rules measured). A class queued and let in for none
  // of `starvationMs` (interactive prompts keeping the replicas in prefill) no longer needs the idle
  // replica, so it still progresses on its lanes. A lower request counts from its dispatch (routing
  // has not placed it yet) to its first byte.
  // With reserved_replicas_exclusive (the default) a request placed lower for its tenant's share
  // (#placement) counts until it is over, not until its first byte, so the reserved replicas run no
  // step of an over-share tenant at all: a polite request sent to a replica decoding the flood
  // waits for the decode step under way (20 ms at the sim's 50 tokens/s). Measured when the sim
  // still charged a step with a prefill and decodes their sum (docs/sim.md), it paid a decode step
  // more in its own step too: issue 46's shape was 1.33x its first-token time alone without the
  // rule, 1.07x at 200 tokens/s. Each tenant then has about its share: on two replicas, one each.
  // Not so for a class below another: an interactive stream at a third of the fleet's capacity met
  // itself on the one replica left to it more often than it met batch decodes on two (measured
  // then, and again with mixed steps at the larger cost: docs/perf.md), so batch keeps off the
  // reserved replicas' prefill only.
  #barred(s: ModelState, replicas: readonly ReplicaLoad[], p: PriorityClass): ReadonlySet<string> {
    const barred = new Set<string>();
    for (const r of replicas) if (higherAwaitsFirstByte(s.awaitingFirstByte.get(r.id), p)) barred.add(r.id);
    const top = this.#reservedFor(s, replicas, p);
    if (top < 0) return barred;
    const reserved = this.#cfg.reservedReplicas;
    const lanes = Math.max(1, replicas.length - reserved);
    const exclusive = this.#cfg.reservedReplicasExclusive;
    const inLane = new Set(replicas.filter((r) => lowerIn(s.awaitingFirstByte.get(r.id), top) || (exclusive && lowerIn(s.demotedOn.get(r.id), top))).map((r) => r.id));
    const idle = replicas.filter((r) => !s.awaitingFirstByte.has(r.id) && !inLane.has(r.id)).length - sum(s.dispatching);
    const opens = inLane.size + sum(s.dispatching.slice(top + 1)) < lanes && (idle > reserved || this.#starving(s, p));
    if (opens) return barred;
    for (const r of replicas) if (!inLane.has(r.id)) barred.add(r.id);
    return barred;
  }

  // Where a request of `tenant` and class `p` is placed: as the class below when its tenant
  // holds more than its share of the class's capacity (the replicas' slots, or waiting places where
  // the slots are not known, over the tenants of the class active lately) while another active
  // tenant holds less. Equal keys otherwise share every replica's prefill and slots: the polite
  // tenant's request, first out of the fair queue, still met a replica prefilling the flood's
  // prompts in the step it joined, and no slot free (measured under a 32-stream flood on 4-slot
  // sims: 6.6x its first-token time alone). Placed a class lower, the flood leaves it a slot on each
  // replica and a replica with no prefill, by the rules above; the queue's order, and with it the
  // share of the dispatches, stays its class's. Two tenants both over their share are placed at
  // their class: neither is polite. Batch has no class below: batch keys share by the queue alone.
  #placement(s: ModelState, replicas: readonly ReplicaLoad[], tenant: string, p: PriorityClass): PriorityClass {
    const rank = priorityClasses.indexOf(p);
    const lower = priorityClasses[rank + 1];
    if (lower === undefined) return p;
    const now = this.#now();
    // A set: each of the other gateways' tenants is looked up in it, and a list made that quadratic
    // in the tenants (a decision 3.0x dearer with 50 of them on another gateway).
    const active = new Set<string>();
    for (const [t, asks] of s.tenantAskMs) {
      if (asks.every((at) => now - at > this.#cfg.activeWindowMs)) s.tenantAskMs.delete(t);
      else if (now - (asks[rank] ?? -Infinity) <= this.#cfg.activeWindowMs) active.add(t);
    }
    // The other gateways' tenants count as this one's: a flood through one yields to a polite
    // tenant asking through another (the replicas, and so the capacity, are the same).
    const peers = this.#peers?.(s.model);
    for (const [t, h] of peers ?? []) if (h.active[rank] === true) active.add(t);
    if (active.size < 2) return p;
    let capacity = 0;
    for (const r of replicas) capacity += slotsOf(this.#cfg, r) || classLimits(this.#cfg, p).maxWaitingPerReplica;
    const share = capacity / active.size;
    const holds = (t: string): number => s.queue.queuedOf(t, p) + (s.admittedOf.get(t)?.[rank] ?? 0) + (peers?.get(t)?.holds[rank] ?? 0);
    if (holds(tenant) <= share) return p;
    for (const t of active) if (t !== tenant && holds(t) < share) return lower;
    return p;
  }

  // Whether class `p` has waited in the queue, and been let in for none of, `starvationMs`.
  #starving(s: ModelState, p: PriorityClass): boolean {
    const oldest = s.queue.oldestAtMs(p);
    const now = this.#now();
    const since = s.lastAdmitMs[priorityClasses.indexOf(p)] ?? -Infinity;
    return oldest !== undefined && now - oldest >= this.#cfg.starvationMs && now - since >= this.#cfg.starvationMs;
  }

  /** Dispatches queued requests of `model` while its replicas have room. */
  #pump(model: string): void {
    const s = this.#models.get(model);
    if (s === undefined || s.queue.size === 0) return;
    this.#account(s);
    const replicas = this.#facts.replicas(model);
    for (;;) {
      // The permit carries its own class's barred replicas, taken while it is still queued: out of
      // the queue its class may no longer count as starving. A request the queue's no-starvation
      // rule lets in gets the highest class's room, not its placement.
      let barred: ReadonlySet<string> = new Set();
      let place: PriorityClass = 'standard';
      const e = s.queue.next(this.#now(), (p, head) => {
        place = this.#placement(s, replicas, head.tenant, head.priority);
        barred = this.#barred(s, replicas, place);
        return replicas.length === 0 || (p === head.priority ? this.#room(s, replicas, place, barred, place !== head.priority) : this.#room(s, replicas, p, this.#barred(s, replicas, p))) > 0;
      });
      if (e === undefined) break;
      const w = e.value;
      w.cleanup();
      const waitedMs = this.#now() - w.atMs;
      s.drainedTokens += w.ask.costTokens;
      this.#observer?.admitted(model, w.ask.priority, 'queued', waitedMs);
      w.resolve(this.#permit(model, s, w.ask, place, w.why, waitedMs, barred));
    }
  }

  // Why a request of class `p` found no room: an operator reading the receipt of a batch request
  // queued beside idle-looking replicas needs to know they were kept for the classes above, not full.
  #whyNoRoom(s: ModelState, replicas: readonly ReplicaLoad[], p: PriorityClass): string {
    const top = priorityClasses[0] ?? p;
    if (p === top || this.#room(s, replicas, top, new Set()) <= 0) return 'every replica saturated';
    return 'room kept for the classes above it';
  }

  // A permit of `ask`, placed as class `priority` (its own, or the one below: #placement).
  #permit(model: string, s: ModelState, ask: AdmissionAsk, priority: PriorityClass, why: string | undefined, waitedMs: number, barred: ReadonlySet<string>): Permit {
    const i = priorityClasses.indexOf(priority);
    s.dispatching[i] = (s.dispatching[i] ?? 0) + 1;
    const own = priorityClasses.indexOf(ask.priority);
    const demoted = i !== own;
    if (demoted) {
      s.dispatchingDemoted++;
      this.#observer?.placedLower(model, ask.priority);
    }
    const admitted = s.admittedOf.get(ask.tenant) ?? priorityClasses.map(() => 0);
    s.admittedOf.set(ask.tenant, admitted);
    admitted[own] = (admitted[own] ?? 0) + 1;
    s.lastAdmitMs[i] = this.#now();
    let routed = false;
    let over = false;
    const booked = (): void => {
      if (routed) return;
      routed = true;
      s.dispatching[i] = (s.dispatching[i] ?? 1) - 1;
      if (demoted) s.dispatchingDemoted--;
    };
    const freed = (): void => this.#pump(model);
    // Placed lower, each replica it was routed to holds it until that ticket ends, or the request
    // does (a ticket whose end is never reported must not keep a replica a lane for ever).
    const holds: (() => void)[] = [];
    return {
      queued: why !== undefined,
      waitedMs,
      why,
      watch: (t, replica) => {
        booked();
        const answers = countOn(s.awaitingFirstByte, replica, i);
        const ends = demoted ? countOn(s.demotedOn, replica, i) : (): void => undefined;
        holds.push(ends);
        return {
          ...t,
          firstByte: () => {
            t.firstByte();
            answers();
            freed();
          },
          done: () => {
            t.done();
            answers();
            ends();
            freed();
          },
        };
      },
      among: (replicas) => {
        const open = replicas.filter((r) => !barred.has(r.id));
        if (open.length === 0) return replicas;
        if (demoted) return open;
        const keepOff = this.#cfg.reservedReplicasExclusive && this.#cfg.reservedReplicas > 0;
        // Contended: a class below asked lately, or a tenant is placed lower.
        const contended = s.dispatchingDemoted > 0 || s.demotedOn.size > 0 || s.lastAskMs.some((t, k) => k > i && this.#now() - t <= this.#cfg.activeWindowMs);
        return startsAmong(open, { awaitingFirstByte: s.awaitingFirstByte, demotedOn: keepOff ? s.demotedOn : new Map(), rank: i, contended });
      },
      done: () => {
        if (over) return;
        over = true;
        booked();
        admitted[own] = (admitted[own] ?? 1) - 1;
        if (admitted.every((n) => n === 0)) s.admittedOf.delete(ask.tenant);
        for (const end of holds) end();
        freed();
      },
    };
  }

  #refusal(ask: AdmissionAsk, reason: RefusalReason, retryAfterS: number, waitMs?: number): AdmissionRefused {
    this.#observer?.refused(ask.model, ask.priority, reason);
    return refusalOf(ask, reason, retryAfterS, waitMs);
  }

  /** Every model's queue, for the operator. */
  view(): QueueView[] {
    return [...this.#models].map(([model, s]) => ({
      model,
      queued: s.queue.size,
      bytes: s.queue.bytes,
      byClass: s.queue.depthByClass(),
      tenants: s.queue.tenants(),
      dispatching: sum(s.dispatching),
      drainTokensPerS: Math.round(measuredDrain(s)),
    }));
  }

  /** What each tenant that asked within `activeWindowMs` holds, per model and class: this gateway's report to its peers. */
  holdings(): HoldRow[] {
    const now = this.#now();
    const rows: HoldRow[] = [];
    for (const [model, s] of this.#models) {
      for (const [tenant, asks] of s.tenantAskMs) {
        priorityClasses.forEach((p, rank) => {
          if (now - (asks[rank] ?? -Infinity) <= this.#cfg.activeWindowMs) rows.push({ model, tenant, rank, holds: s.queue.queuedOf(tenant, p) + (s.admittedOf.get(tenant)?.[rank] ?? 0) });
        });
      }
    }
    return rows;
  }

  /** Refuses everything queued (the gateway is closing) and stops the poll timer; idempotent. */
  close(): void {
    this.#closed = true;
    clearInterval(this.#timer);
    this.#timer = undefined;
    for (const s of this.#models.values()) {
      for (const e of s.queue.drain()) {
        e.value.cleanup();
        e.value.reject(this.#refusal(e.value.ask, 'closing', 1));
      }
    }
  }
}

// Counts a request of class index `i` on `replica` in `by`; the function returned takes it off, once.
function countOn(by: Map<string, number[]>, replica: string, i: number): () => void {
  const counts = by.get(replica) ?? priorityClasses.map(() => 0);
  by.set(replica, counts);
  counts[i] = (counts[i] ?? 0) + 1;
  let off = false;
  return () => {
    if (off) return;
    off = true;
    counts[i] = (counts[i] ?? 1) - 1;
    if (counts.every((n) => n === 0) && by.get(replica) === counts) by.delete(replica);
  };
}

// The rate the queue drained at while backlogged, in tokens/s; 0 until a few hundred ms of backlog
// say something.
const measuredDrain = (s: ModelState): number => (s.backloggedMs >= 500 && s.drainedTokens > 0 ? (s.drainedTokens * 1000) / s.backloggedMs : 0);
