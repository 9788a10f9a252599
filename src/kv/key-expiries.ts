// Block keys with a time each, in typed arrays: the gateway's predictions (a key routed to a
// replica and not yet reported by its engine, until when it counts). A Map keyed by BigInt cost
// the event loop 1.4 us a key to enter, a BigInt made for every key read out of the worker's
// typed array among them: a 100k-token chat's turn predicts about 55 new blocks, a cold one 8000.
// Open addressing with linear probing and backward-shift deletion, so a table whose keys come
// and go keeps its probe chains short without tombstones.

// Keys are digests, so their low words are already spread; the multiply guards a caller whose
// keys are not (tests, sequential ids) against one long chain.
const homeOf = (hi: number, lo: number, mask: number): number => (Math.imul(lo ^ Math.imul(hi, 0x85ebca6b), 0x9e3779b1) >>> 0) & mask;

/** 64-bit keys, each with a time (ms); grows as needed, never shrinks until cleared. */
export class KeyExpiries {
  #hi: Uint32Array;
  #lo: Uint32Array;
  #at: Float64Array;
  #used: Uint8Array;
  #mask: number;
  #size = 0;

  constructor(initialCapacity = 256) {
    const n = 2 ** Math.ceil(Math.log2(Math.max(16, initialCapacity)));
    this.#hi = new Uint32Array(n);
    this.#lo = new Uint32Array(n);
    this.#at = new Float64Array(n);
    this.#used = new Uint8Array(n);
    this.#mask = n - 1;
  }

  /** Keys held. */
  get size(): number {
    return this.#size;
  }

  #find(hi: number, lo: number): number {
    for (let e = homeOf(hi, lo, this.#mask); ; e = (e + 1) & this.#mask) {
      if (this.#used[e] === 0) return -1 - e;
      if (this.#hi[e] === hi && this.#lo[e] === lo) return e;
    }
  }

  /** Sets the key's time (a key already held takes the new one). */
  set(hi: number, lo: number, at: number): void {
    let e = this.#find(hi, lo);
    if (e < 0) {
      // Half full at most: a chain stays a few entries long.
      if (2 * (this.#size + 1) > this.#mask + 1) {
        this.#grow();
        e = this.#find(hi, lo);
      }
      e = -1 - e;
      this.#used[e] = 1;
      this.#hi[e] = hi;
      this.#lo[e] = lo;
      this.#size++;
    }
    this.#at[e] = at;
  }

  /** The key's time, or undefined when it is not held. */
  get(hi: number, lo: number): number | undefined {
    const e = this.#find(hi, lo);
    return e < 0 ? undefined : this.#at[e];
  }

  /** Forgets the key; false when it was not held. */
  delete(hi: number, lo: number): boolean {
    let gap = this.#find(hi, lo);
    if (gap < 0) return false;
    this.#size--;
    // Backward shift: every entry after the gap that could sit in it moves up, so no lookup
    // stops at the hole short of a key placed past it.
    for (let e = (gap + 1) & this.#mask; this.#used[e] === 1; e = (e + 1) & this.#mask) {
      const home = homeOf(this.#hi[e] ?? 0, this.#lo[e] ?? 0, this.#mask);
      const fromHome = (e - home) & this.#mask;
      const fromGap = (e - gap) & this.#mask;
      if (fromHome < fromGap) continue;
      this.#hi[gap] = this.#hi[e] ?? 0;
      this.#lo[gap] = this.#lo[e] ?? 0;
      this.#at[gap] = this.#at[e] ?? 0;
      gap = e;
    }
    this.#used[gap] = 0;
    return true;
  }

  /** Forgets every key. */
  clear(): void {
    this.#used.fill(0);
    this.#size = 0;
  }

  #grow(): void {
    const [hi, lo, at, used] = [this.#hi, this.#lo, this.#at, this.#used];
    const n = 2 * used.length;
    this.#hi = new Uint32Array(n);
    this.#lo = new Uint32Array(n);
    this.#at = new Float64Array(n);
    this.#used = new Uint8Array(n);
    this.#mask = n - 1;
    this.#size = 0;
    for (let e = 0; e < used.length; e++) if (used[e] === 1) this.set(hi[e] ?? 0, lo[e] ?? 0, at[e] ?? 0);
  }
}
