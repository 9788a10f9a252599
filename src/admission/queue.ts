// The admission queue of one model: who goes next when the replicas have room again. Pure: entries
// and the current time in, the next entry out; no timers, no I/O (the Admission controller owns those).
//
// The rules, in the order they are applied:
// 1. Higher classes first: interactive before standard before batch.
// 2. No starvation: when something has waited longer than `starvationMs` behind a higher class, one
//    dispatch in `starvationEvery` goes to the oldest such entry. A flood of interactive requests
//    slows batch work down to that share of dispatches; it can never stop it.
// 3. Within a class, fairness between tenants by tokens, weighted (start-time fair queueing): each
//    tenant has a virtual time that grows by cost/weight with every dispatch, and the backlogged
//    tenant with the least goes next. A tenant with 100k-token prompts therefore gets a hundredth of
//    the dispatches of one sending 1k-token prompts at the same weight: the engines' prefill is
//    shared, not the request count. A tenant that was idle starts at the class's current virtual
//    time, so idleness banks no credit to flood with later.
// 4. Within a tenant and class, first come first served.
import type { PriorityClass } from './priority.js';
import { priorityClasses } from './priority.js';

/** One queued request as the queue sees it. */
export interface QueueEntry<T> {
  readonly tenant: string;
  /** Fair-share weight of the tenant's key (> 0). */
  readonly weight: number;
  readonly priority: PriorityClass;
  /** What it costs the engines, in prompt tokens (estimated): what fairness shares. */
  readonly costTokens: number;
  /** Memory it holds while queued (its body), for the byte bound. */
  readonly sizeBytes: number;
  readonly enqueuedAtMs: number;
  readonly value: T;
}

/** The queue's bounds and its starvation rule. */
export interface QueueLimits {
  readonly maxRequests: number;
  readonly maxBytes: number;
  readonly starvationMs: number;
  readonly starvationEvery: number;
}

/** What `offer` did: queued, queued in place of a displaced entry (to be refused), or refused. */
export type Offer<T> =
  | { readonly queued: true; readonly displaced?: QueueEntry<T> | undefined }
  | { readonly queued: false; readonly reason: 'queue-full' | 'tenant-over-share' };

// One tenant's FIFO in one class. A head index instead of shift(): 10,000 queued requests of one
// tenant would otherwise cost a copy of the array per dispatch.
interface Lane<T> {
  readonly tenant: string;
  items: QueueEntry<T>[];
  head: number;
  costTokens: number;
  /** Virtual time: tokens dispatched over weight. */
  virtualTokens: number;
  weight: number;
}

interface Band<T> {
  readonly lanes: Map<string, Lane<T>>;
  /** The virtual time of the last dispatch: where a tenant coming back from idle starts. */
  clock: number;
}

const laneSize = <T>(l: Lane<T>): number => l.items.length - l.head;
const rank = (p: PriorityClass): number => priorityClasses.indexOf(p);
const highest: PriorityClass = 'interactive';
// Tenants of one class next() asks for room before it gives up until room comes back: each ask
// weighs every tenant's share (Admission's placement), so a queue of thousands of tenants must not
// ask all of them on every first byte, and two kinds of room (at the class, a class lower) are what
// the heads differ by.
const tenantsTried = 4;

/** A bounded, priority-ordered, tenant-fair queue of one model's requests. */
export class FairQueue<T> {
  readonly #limits: QueueLimits;
  readonly #bands: readonly Band<T>[] = priorityClasses.map(() => ({ lanes: new Map(), clock: 0 }));
  #size = 0;
  #bytes = 0;
  #dispatches = 0;

  constructor(limits: QueueLimits) {
    this.#limits = limits;
  }

  get size(): number {
    return this.#size;
  }

  get bytes(): number {
    return this.#bytes;
  }

  /** Queued requests of class `p` and the classes above it: those a new request of `p` would queue behind. */
  sizeAtOrAbove(p: PriorityClass): number {
    let n = 0;
    for (let r = 0; r <= rank(p); r++) for (const l of this.#bands[r]?.lanes.values() ?? []) n += laneSize(l);
    return n;
  }

  /** Queued requests of `tenant` in class `p`. */
  queuedOf(tenant: string, p: PriorityClass): number {
    const l = this.#band(p).lanes.get(tenant);
    return l === undefined ? 0 : laneSize(l);
  }

  /** When the oldest queued request of class `p` was queued; undefined when none is. */
  oldestAtMs(p: PriorityClass): number | undefined {
    let oldest: number | undefined;
    for (const l of this.#band(p).lanes.values()) {
      const head = l.items[l.head];
      if (head !== undefined && (oldest === undefined || head.enqueuedAtMs < oldest)) oldest = head.enqueuedAtMs;
    }
    return oldest;
  }

  /** Queued requests per class. */
  depthByClass(): Record<PriorityClass, number> {
    const out = { interactive: 0, standard: 0, batch: 0 };
    for (const p of priorityClasses) for (const l of this.#band(p).lanes.values()) out[p] += laneSize(l);
    return out;
  }

  /** Queued requests and tokens per tenant, for the operator's view. */
  tenants(): { tenant: string; priority: PriorityClass; requests: number; costTokens: number }[] {
    return priorityClasses.flatMap((p) =>
      [...this.#band(p).lanes.values()].filter((l) => laneSize(l) > 0).map((l) => ({ tenant: l.tenant, priority: p, requests: laneSize(l), costTokens: l.costTokens })),
    );
  }

  #band(p: PriorityClass): Band<T> {
    const b = this.#bands[rank(p)];
    if (b === undefined) throw new RangeError(`unknown priority class ${JSON.stringify(p)}`);
    return b;
  }

  #lane(e: { tenant: string; priority: PriorityClass; weight: number }): Lane<T> {
    const band = this.#band(e.priority);
    let l = band.lanes.get(e.tenant);
    if (l === undefined) {
      l = { tenant: e.tenant, items: [], head: 0, costTokens: 0, virtualTokens: band.clock, weight: e.weight };
      band.lanes.set(e.tenant, l);
    }
    l.weight = e.weight;
    return l;
  }

  /**
   * Queues `e`, within the bounds. A full queue makes room only for a request that ranks above what
   * it displaces: one of a higher class than the lowest queued, or of the same class from a tenant
   * further under its fair share. The displaced entry is the newest of the lowest class's heaviest
   * tenant (by tokens over weight), so a flood pays for itself and the caller refuses it.
   */
  offer(e: QueueEntry<T>): Offer<T> {
    let displaced: QueueEntry<T> | undefined;
    if (this.#size >= this.#limits.maxRequests || this.#bytes + e.sizeBytes > this.#limits.maxBytes) {
      const victim = this.#victimFor(e);
      // One displaced at most, and only when that makes room: a big body never evicts a crowd.
      const room = victim !== undefined && this.#bytes - victim.entry.sizeBytes + e.sizeBytes <= this.#limits.maxBytes;
      if (victim === undefined || !room) return { queued: false, reason: this.#isOverShare(e) ? 'tenant-over-share' : 'queue-full' };
      this.#take(victim.lane, victim.lane.items.length - 1);
      displaced = victim.entry;
    }
    const l = this.#lane(e);
    if (laneSize(l) === 0) {
      // Back from idle: start at the class's clock, never behind it.
      l.virtualTokens = Math.max(l.virtualTokens, this.#band(e.priority).clock);
    }
    l.items.push(e);
    l.costTokens += e.costTokens;
    this.#size++;
    this.#bytes += e.sizeBytes;
    return { queued: true, displaced };
  }

  // The tenant's share of its class's queued tokens against its weight's share of the class.
  #isOverShare(e: QueueEntry<T>): boolean {
    const band = this.#band(e.priority);
    let tokens = 0;
    let weights = 0;
    for (const l of band.lanes.values()) {
      if (laneSize(l) === 0) continue;
      tokens += l.costTokens;
      weights += l.weight;
    }
    const own = band.lanes.get(e.tenant);
    if (own === undefined || laneSize(own) === 0 || tokens === 0) return false;
    return own.costTokens / tokens > own.weight / weights;
  }

  #victimFor(e: QueueEntry<T>): { lane: Lane<T>; entry: QueueEntry<T> } | undefined {
    for (let r = priorityClasses.length - 1; r >= rank(e.priority); r--) {
      const band = this.#bands[r];
      if (band === undefined) continue;
      let heaviest: Lane<T> | undefined;
      for (const l of band.lanes.values()) {
        if (laneSize(l) === 0) continue;
        if (heaviest === undefined || l.costTokens / l.weight > heaviest.costTokens / heaviest.weight) heaviest = l;
      }
      if (heaviest === undefined) continue;
      if (r === rank(e.priority)) {
        // Same class: only a tenant heavier than the newcomer's own (with it added) gives way.
        if (heaviest.tenant === e.tenant) return undefined;
        const own = band.lanes.get(e.tenant);
        const ownTokens = (own === undefined ? 0 : own.costTokens) + e.costTokens;
        if (heaviest.costTokens / heaviest.weight <= ownTokens / e.weight) return undefined;
      }
      const entry = heaviest.items[heaviest.items.length - 1];
      return entry === undefined ? undefined : { lane: heaviest, entry };
    }
    return undefined;
  }

  // Removes the entry at `index` of a lane's items, keeping the counts.
  #take(l: Lane<T>, index: number): QueueEntry<T> | undefined {
    const e = l.items[index];
    if (e === undefined || index < l.head) return undefined;
    if (index === l.head) l.head++;
    else l.items.splice(index, 1);
    l.costTokens -= e.costTokens;
    this.#size--;
    this.#bytes -= e.sizeBytes;
    if (laneSize(l) === 0) {
      l.items = [];
      l.head = 0;
      l.costTokens = 0;
    } else if (l.head > 1024 && l.head * 2 > l.items.length) {
      l.items = l.items.slice(l.head);
      l.head = 0;
    }
    return e;
  }

  /** Takes a queued entry out (its client left, or its deadline passed); false when it is not queued. */
  remove(e: QueueEntry<T>): boolean {
    const l = this.#band(e.priority).lanes.get(e.tenant);
    if (l === undefined) return false;
    const i = l.items.indexOf(e, l.head);
    return i >= 0 && this.#take(l, i) !== undefined;
  }

  /**
   * The entry to dispatch next by the rules above, taken out of the queue; undefined when empty, or
   * when `admits` says there is no room for it with class `p`'s room (its own; the highest class's
   * for a starved entry). Nothing is taken then: it stays next. `admits` sees the entry still queued.
   * When the fairest tenant's head has no room, the next fairest of its class (up to
   * `tenantsTried` of them) may go instead: the room asked for depends on the tenant (one over its
   * share is placed a class lower, onto its own lanes), so a flood whose lanes are full held the
   * polite tenant's request behind it while the polite tenant's replica stood idle (41 ms in the
   * admission queue for the slowest of 27 on issue 46's shape). A higher class's head with no room
   * still holds every lower class: rule 1.
   */
  next(nowMs: number, admits: (p: PriorityClass, e: QueueEntry<T>) => boolean = () => true): QueueEntry<T> | undefined {
    if (this.#size === 0) return undefined;
    const turn = this.#dispatches + 1;
    const starved = turn % this.#limits.starvationEvery === 0 ? this.#starved(nowMs) : undefined;
    // A starved request takes its turn with the room of the highest class, or the headroom kept for
    // the classes above it would starve it again.
    const lane = starved !== undefined ? this.#fits(starved.lane, highest, admits) : this.#fairest().find((l) => this.#fits(l, undefined, admits));
    if (lane === undefined) return undefined;
    this.#dispatches = turn;
    const e = this.#take(lane, lane.head);
    if (e === undefined) return undefined;
    this.charge(e);
    return e;
  }

  /**
   * Counts a dispatch against its tenant's virtual time; `next` does it for queued entries, the
   * controller for requests that went straight through, so a tenant's share counts both.
   */
  charge(e: { tenant: string; priority: PriorityClass; weight: number; costTokens: number }): void {
    const band = this.#band(e.priority);
    const l = this.#lane(e);
    const start = Math.max(l.virtualTokens, band.clock);
    l.virtualTokens = start + e.costTokens / Math.max(e.weight, Number.MIN_VALUE);
    band.clock = start;
    // A tenant with nothing queued is forgotten once the clock has passed it (it would start there
    // anyway): the map stays as small as the set of tenants active lately.
    for (const other of band.lanes.values()) if (laneSize(other) === 0 && other.virtualTokens <= band.clock) band.lanes.delete(other.tenant);
  }

  // Rule 3 in the highest class with anything queued: its backlogged tenants, the fairest first, at most `tenantsTried`.
  #fairest(): Lane<T>[] {
    for (const band of this.#bands) {
      const backlogged = [...band.lanes.values()].filter((l) => laneSize(l) > 0);
      if (backlogged.length > 0) return backlogged.sort((a, b) => a.virtualTokens - b.virtualTokens).slice(0, tenantsTried);
    }
    return [];
  }

  // `l` when its head has room with class `p`'s (absent: the head's own).
  #fits(l: Lane<T>, p: PriorityClass | undefined, admits: (p: PriorityClass, e: QueueEntry<T>) => boolean): Lane<T> | undefined {
    const head = l.items[l.head];
    return head !== undefined && admits(p ?? head.priority, head) ? l : undefined;
  }

  /** Whether a request has waited past starvation_ms behind a higher class: then nothing goes around the queue. */
  hasStarved(nowMs: number): boolean {
    return this.#starved(nowMs) !== undefined;
  }

  // Rule 2: the oldest head that has waited past starvationMs below the highest class queued.
  #starved(nowMs: number): { lane: Lane<T> } | undefined {
    let top = -1;
    let oldest: { lane: Lane<T>; at: number } | undefined;
    for (const [r, band] of this.#bands.entries()) {
      for (const l of band.lanes.values()) {
        const head = l.items[l.head];
        if (head === undefined) continue;
        if (top < 0) top = r;
        if (r === top || nowMs - head.enqueuedAtMs < this.#limits.starvationMs) continue;
        if (oldest === undefined || head.enqueuedAtMs < oldest.at) oldest = { lane: l, at: head.enqueuedAtMs };
      }
    }
    return oldest;
  }

  /**
   * Estimated prompt tokens dispatched before a new entry like `e` would be: everything queued in
   * higher classes, and of each tenant in its class what fair sharing serves while `e`'s tenant gets
   * through its own queue and `e` (weighted). What the controller divides by the drain rate to say
   * whether `e` can start before its deadline.
   */
  tokensAhead(e: { tenant: string; priority: PriorityClass; weight: number; costTokens: number }): number {
    let ahead = 0;
    for (let r = 0; r < rank(e.priority); r++) for (const l of this.#bands[r]?.lanes.values() ?? []) ahead += l.costTokens;
    const band = this.#band(e.priority);
    const own = (band.lanes.get(e.tenant)?.costTokens ?? 0) + e.costTokens;
    const rounds = own / e.weight;
    for (const l of band.lanes.values()) ahead += l.tenant === e.tenant ? own - e.costTokens : Math.min(l.costTokens, rounds * l.weight);
    return ahead;
  }

  /** Every queued entry, each once (for closing: each is refused). */
  drain(): QueueEntry<T>[] {
    const out: QueueEntry<T>[] = [];
    for (const band of this.#bands) {
      for (const l of band.lanes.values()) out.push(...l.items.slice(l.head));
      band.lanes.clear();
    }
    this.#size = 0;
    this.#bytes = 0;
    return out;
  }
}
