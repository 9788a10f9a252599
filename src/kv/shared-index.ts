// The cluster index: which replica slots hold which block keys, in a SharedArrayBuffer so that the
// workers scoring prompts read it without a message per lookup. The main thread is the only writer
// (one writer needs no locks between writers); workers only read. A reader can see an entry half
// written: every entry sits under a seqlock stripe, and a read that overlapped a write counts as a
// miss. That may cost a slightly lower score for one request, never a crash or a wrong answer.
//
// Open addressing with linear probing, and deletion by shifting later entries back instead of
// tombstones, so a long-running gateway whose blocks churn keeps short probe chains.
import { LlmgwError } from '../errors/index.js';
import { forEachKey, hiOf, loOf, W_HI, W_LO } from './key-words.js';
import {
  E_KEY_HI,
  E_KEY_LO,
  E_MASK_HI,
  E_MASK_LO,
  ENTRY_WORDS,
  EXTRA_ENTRIES,
  H_CAPACITY,
  H_DROPPED,
  H_ENTRIES,
  H_MAGIC,
  H_MOVES,
  H_REMOVALS,
  H_SIZE,
  H_VERSION,
  HEADER_WORDS,
  LAYOUT_VERSION,
  REMOVED_RING,
  MAGIC,
  MAX_LOAD,
  MAX_PROBES,
  MAX_SLOTS,
  STRIPE_SHIFT,
} from './index-layout.js';

interface Layout {
  readonly entries: number;
  readonly ringAt: number;
  readonly stripesAt: number;
  readonly entriesAt: number;
  readonly words: number;
}

function layoutOf(entries: number): Layout {
  const stripes = ((entries + EXTRA_ENTRIES) >>> STRIPE_SHIFT) + 1;
  const ringAt = HEADER_WORDS;
  const stripesAt = ringAt + MAX_SLOTS * REMOVED_RING * 2;
  const entriesAt = stripesAt + stripes;
  return { entries, ringAt, stripesAt, entriesAt, words: entriesAt + (entries + EXTRA_ENTRIES) * ENTRY_WORDS };
}

/** A key's first entry: the multiply-shift of its low word onto [0, entries); keys are sha256 bits, so uniform. */
const homeOf = (lo: number, entries: number): number => Math.min(entries - 1, Math.floor((lo * entries) / 4294967296));

function assertSlot(slot: number): void {
  if (!Number.isInteger(slot) || slot < 0 || slot >= MAX_SLOTS) {
    throw new LlmgwError('LLMGW_INDEX_SLOT', `index slot ${String(slot)} is outside 0..${MAX_SLOTS - 1}; the cluster index holds at most ${MAX_SLOTS} replica slots`);
  }
}

/**
 * Membership of 32-bit words, in a typed table: a JS Set of them is several times slower, since
 * words above 2^30 are boxed numbers, and a long run checks every one of its keys.
 */
function wordSet(words: Uint32Array): (w: number) => boolean {
  let bits = 4;
  while (1 << bits < words.length * 2) bits++;
  const table = new Uint32Array(1 << bits);
  const mask = table.length - 1;
  const shift = 32 - bits;
  // 0 marks an empty entry; a word 0 is kept apart.
  let zero = false;
  for (const w of words) {
    if (w === 0) {
      zero = true;
      continue;
    }
    let i = Math.imul(w, 0x9e3779b1) >>> shift;
    while (table[i] !== 0 && table[i] !== w) i = (i + 1) & mask;
    table[i] = w;
  }
  return (w) => {
    if (w === 0) return zero;
    for (let i = Math.imul(w, 0x9e3779b1) >>> shift; ; i = (i + 1) & mask) {
      const t = table[i] ?? 0;
      if (t === w) return true;
      if (t === 0) return false;
    }
  };
}

/** The writer side of the cluster index. Only the main thread may hold one per buffer. */
export class ClusterIndex {
  readonly buffer: SharedArrayBuffer;
  /** Keys the index accepts before it refuses new ones (counted in `dropped`). */
  readonly capacityBlocks: number;
  readonly #w: Uint32Array;
  readonly #l: Layout;

  constructor(o: { capacityBlocks: number }) {
    if (!Number.isSafeInteger(o.capacityBlocks) || o.capacityBlocks < 1 || o.capacityBlocks > 2 ** 28) {
      throw new LlmgwError(
        'LLMGW_INDEX_CAPACITY',
        `cluster index capacity ${String(o.capacityBlocks)} blocks is outside 1..${2 ** 28}; size it to replicas x KV blocks each (8 x 1M fits)`,
      );
    }
    this.capacityBlocks = o.capacityBlocks;
    this.#l = layoutOf(Math.max(16, Math.ceil(o.capacityBlocks / MAX_LOAD)));
    this.buffer = new SharedArrayBuffer(this.#l.words * 4);
    this.#w = new Uint32Array(this.buffer);
    this.#w[H_MAGIC] = MAGIC;
    this.#w[H_VERSION] = LAYOUT_VERSION;
    this.#w[H_ENTRIES] = this.#l.entries;
    this.#w[H_CAPACITY] = o.capacityBlocks;
  }

  /** Keys held by at least one slot. */
  get size(): number {
    return this.#w[H_SIZE] ?? 0;
  }

  /** Keys refused because the index was full or a probe ran too long. */
  get dropped(): number {
    return this.#w[H_DROPPED] ?? 0;
  }

  #entry(e: number): number {
    return this.#l.entriesAt + e * ENTRY_WORDS;
  }

  #begin(e: number): void {
    Atomics.add(this.#w, this.#l.stripesAt + (e >>> STRIPE_SHIFT), 1);
  }

  #end(e: number): void {
    Atomics.add(this.#w, this.#l.stripesAt + (e >>> STRIPE_SHIFT), 1);
  }

  #setCounter(at: number, v: number): void {
    Atomics.store(this.#w, at, v);
  }

  /** The entry holding (hi, lo), or where it would go (negative: -1 - empty entry), or null if out of probes. */
  #find(hi: number, lo: number): number | null {
    const w = this.#w;
    const n = this.#l.entries;
    if (hi === 0 && lo === 0) {
      const base = this.#entry(n);
      return (w[base + E_MASK_LO] ?? 0) !== 0 || (w[base + E_MASK_HI] ?? 0) !== 0 ? n : -1 - n;
    }
    let e = homeOf(lo, n);
    for (let p = 0; p < MAX_PROBES; p++) {
      const base = this.#entry(e);
      const khi = w[base + E_KEY_HI] ?? 0;
      const klo = w[base + E_KEY_LO] ?? 0;
      if (khi === 0 && klo === 0) return -1 - e;
      if (khi === hi && klo === lo) return e;
      e = e + 1 === n ? 0 : e + 1;
    }
    return null;
  }

  /** Marks `keys` as held by `slot`; returns how many it did not hold before. */
  add(slot: number, keys: Iterable<bigint> | BigUint64Array): number {
    assertSlot(slot);
    const w = this.#w;
    if (keys instanceof BigUint64Array) this.#touch(keys);
    const bitLo = slot < 32 ? (1 << slot) >>> 0 : 0;
    const bitHi = slot < 32 ? 0 : (1 << (slot - 32)) >>> 0;
    // The count is kept here and stored once: readers take it as approximate while the writer works.
    let size = this.size;
    let dropped = 0;
    let added = 0;
    forEachKey(keys, (hi, lo) => {
      const found = this.#find(hi, lo);
      if (found === null || (found < 0 && size >= this.capacityBlocks)) {
        dropped++;
        return;
      }
      const e = found < 0 ? -1 - found : found;
      const base = this.#entry(e);
      const mlo = w[base + E_MASK_LO] ?? 0;
      const mhi = w[base + E_MASK_HI] ?? 0;
      if ((mlo & bitLo) !== 0 || (mhi & bitHi) !== 0) return;
      this.#begin(e);
      if (found < 0) {
        w[base + E_KEY_HI] = hi;
        w[base + E_KEY_LO] = lo;
        size++;
      }
      w[base + E_MASK_LO] = (mlo | bitLo) >>> 0;
      w[base + E_MASK_HI] = (mhi | bitHi) >>> 0;
      this.#end(e);
      added++;
    });
    this.#setCounter(H_SIZE, size);
    if (dropped > 0) this.#setCounter(H_DROPPED, this.dropped + dropped);
    return added;
  }

  // Reads each key's home entry and stripe before any is written. The loads do not depend on each
  // other, so the CPU waits for their cache misses together rather than one by one: a turn's 53 new
  // blocks in a table of 1M cost the event loop 48 us, 24 us with this and the count kept aside
  // (measured with the table out of the caches, as it is between requests). The sum gives the reads
  // a use.
  #touch(keys: BigUint64Array): number {
    const w = this.#w;
    const words = new Uint32Array(keys.buffer, keys.byteOffset, keys.length * 2);
    const n = this.#l.entries;
    let sum = 0;
    for (let i = 0; i < keys.length; i++) {
      const e = homeOf(words[2 * i + W_LO] ?? 0, n);
      sum += (w[this.#entry(e)] ?? 0) + (w[this.#l.stripesAt + (e >>> STRIPE_SHIFT)] ?? 0);
    }
    return sum;
  }

  /** Marks `keys` as no longer held by `slot`; a key no slot holds leaves the table. Returns how many it held. */
  remove(slot: number, keys: Iterable<bigint> | BigUint64Array): number {
    assertSlot(slot);
    let removed = 0;
    forEachKey(keys, (hi, lo) => {
      const e = this.#find(hi, lo);
      if (e !== null && e >= 0 && this.#clearBit(e, slot) !== 'kept') removed++;
    });
    return removed;
  }

  /** Drops `slot` from every key (the replica reset or went away). Returns how many keys it held. */
  clearSlot(slot: number): number {
    assertSlot(slot);
    const n = this.#l.entries;
    let removed = this.#clearBit(n, slot) === 'kept' ? 0 : 1;
    for (let e = 0; e < n; ) {
      const r = this.#clearBit(e, slot);
      if (r !== 'kept') removed++;
      // A deletion may shift a later entry into this one: look at it again. Entries shifted in
      // from the wrapped start of the table were seen already and no longer have the bit.
      const base = this.#entry(e);
      if (r === 'deleted' && ((this.#w[base + E_KEY_HI] ?? 0) !== 0 || (this.#w[base + E_KEY_LO] ?? 0) !== 0)) continue;
      e++;
    }
    return removed;
  }

  /** Clears `slot`'s bit on entry e and deletes the entry when no slot is left. */
  #clearBit(e: number, slot: number): 'kept' | 'cleared' | 'deleted' {
    const w = this.#w;
    const base = this.#entry(e);
    const mlo = w[base + E_MASK_LO] ?? 0;
    const mhi = w[base + E_MASK_HI] ?? 0;
    const bitLo = slot < 32 ? (1 << slot) >>> 0 : 0;
    const bitHi = slot < 32 ? 0 : (1 << (slot - 32)) >>> 0;
    if ((mlo & bitLo) === 0 && (mhi & bitHi) === 0) return 'kept';
    // The key goes into the slot's ring before the count moves: a reader that sees the count sees it.
    const at = this.#l.ringAt + (slot * REMOVED_RING + ((w[H_REMOVALS + slot] ?? 0) % REMOVED_RING)) * 2;
    w[at] = w[base + E_KEY_HI] ?? 0;
    w[at + 1] = w[base + E_KEY_LO] ?? 0;
    Atomics.add(w, H_REMOVALS + slot, 1);
    const nlo = (mlo & ~bitLo) >>> 0;
    const nhi = (mhi & ~bitHi) >>> 0;
    if (nlo !== 0 || nhi !== 0) {
      this.#begin(e);
      w[base + E_MASK_LO] = nlo;
      w[base + E_MASK_HI] = nhi;
      this.#end(e);
      return 'cleared';
    }
    this.#delete(e);
    this.#setCounter(H_SIZE, this.size - 1);
    return 'deleted';
  }

  #write(e: number, hi: number, lo: number, mlo: number, mhi: number): void {
    const w = this.#w;
    const base = this.#entry(e);
    this.#begin(e);
    w[base + E_KEY_HI] = hi;
    w[base + E_KEY_LO] = lo;
    w[base + E_MASK_LO] = mlo;
    w[base + E_MASK_HI] = mhi;
    this.#end(e);
  }

  /** Backward-shift deletion: pull later entries of the cluster into the hole while that keeps them reachable. */
  #delete(i: number): void {
    const n = this.#l.entries;
    if (i === n) {
      this.#write(n, 0, 0, 0, 0);
      return;
    }
    const w = this.#w;
    // Readers that miss while this changes look again.
    Atomics.add(w, H_MOVES, 1);
    let hole = i;
    let j = i;
    for (let p = 0; p < n; p++) {
      j = j + 1 === n ? 0 : j + 1;
      const base = this.#entry(j);
      const hi = w[base + E_KEY_HI] ?? 0;
      const lo = w[base + E_KEY_LO] ?? 0;
      if (hi === 0 && lo === 0) break;
      const h = homeOf(lo, n);
      const stays = hole <= j ? hole < h && h <= j : hole < h || h <= j;
      if (stays) continue;
      this.#write(hole, hi, lo, w[base + E_MASK_LO] ?? 0, w[base + E_MASK_HI] ?? 0);
      hole = j;
    }
    this.#write(hole, 0, 0, 0, 0);
    Atomics.add(w, H_MOVES, 1);
  }
}

/** The reader side, in any thread: built once per worker over the buffer handed over in workerData. */
export class IndexReader {
  readonly #w: Uint32Array;
  readonly #l: Layout;
  // The last probe's mask, kept in fields so the hot loop allocates nothing.
  #mlo = 0;
  #mhi = 0;
  /** Keys looked up by leadingBlocks so far: what a caller's runs saved shows as keys not looked up. */
  lookups = 0;

  constructor(buffer: SharedArrayBuffer) {
    const w = new Uint32Array(buffer);
    if (w[H_MAGIC] !== MAGIC || w[H_VERSION] !== LAYOUT_VERSION) {
      throw new LlmgwError(
        'LLMGW_INDEX_LAYOUT',
        `shared buffer is not a cluster index of layout ${LAYOUT_VERSION} (magic ${String(w[H_MAGIC])}, version ${String(w[H_VERSION])}); pass ClusterIndex.buffer`,
      );
    }
    this.#w = w;
    this.#l = layoutOf(w[H_ENTRIES] ?? 0);
    if (this.#l.words * 4 !== buffer.byteLength) {
      throw new LlmgwError('LLMGW_INDEX_LAYOUT', `cluster index buffer is ${buffer.byteLength} bytes; its header wants ${this.#l.words * 4}`);
    }
  }

  /** One probe; sets #mlo/#mhi (0 for a miss). Returns false when the read overlapped a write. */
  #probe(hi: number, lo: number): boolean {
    const w = this.#w;
    const n = this.#l.entries;
    this.#mlo = 0;
    this.#mhi = 0;
    let e = hi === 0 && lo === 0 ? n : homeOf(lo, n);
    for (let p = 0; p < MAX_PROBES; p++) {
      const s = this.#l.stripesAt + (e >>> STRIPE_SHIFT);
      const v1 = Atomics.load(w, s);
      if ((v1 & 1) !== 0) return false;
      const base = this.#l.entriesAt + e * ENTRY_WORDS;
      const khi = w[base + E_KEY_HI] ?? 0;
      const klo = w[base + E_KEY_LO] ?? 0;
      const mlo = w[base + E_MASK_LO] ?? 0;
      const mhi = w[base + E_MASK_HI] ?? 0;
      if (Atomics.load(w, s) !== v1) return false;
      if (khi === hi && klo === lo) {
        this.#mlo = mlo;
        this.#mhi = mhi;
        return true;
      }
      if ((khi === 0 && klo === 0) || e === n) return true;
      e = e + 1 === n ? 0 : e + 1;
    }
    return true;
  }

  /** Probes (hi, lo); a miss seen while a deletion moved entries is tried again, twice at most. */
  #lookup(hi: number, lo: number): void {
    for (let attempt = 0; attempt < 3; attempt++) {
      const moves = Atomics.load(this.#w, H_MOVES);
      const clean = this.#probe(hi, lo);
      if ((this.#mlo !== 0 || this.#mhi !== 0) && clean) return;
      if (clean && Atomics.load(this.#w, H_MOVES) === moves) return;
    }
    this.#mlo = 0;
    this.#mhi = 0;
  }

  /** The slots holding `key`, as a 64-bit mask (bit s = slot s); 0n when none or when the read was torn. */
  holds(key: bigint): bigint {
    this.#lookup(hiOf(key), loOf(key));
    return (BigInt(this.#mhi) << 32n) | BigInt(this.#mlo);
  }

  /** Keys the index holds (approximate while the writer works). */
  get size(): number {
    return Atomics.load(this.#w, H_SIZE);
  }

  /** How many keys `slot` has lost so far; read it before probing, keep it beside the run found. */
  removals(slot: number): number {
    assertSlot(slot);
    return Atomics.load(this.#w, H_REMOVALS + slot);
  }

  /**
   * How much of a run still stands: `slot` was found holding the first `blocks` of `keys` when its
   * removal count was `since`; this is where the first key it lost since then sits among them (a
   * probe from there looks at it again, in case it came back), `blocks` when it lost none of them,
   * and 0 when it lost more keys than its ring remembers.
   */
  keptRun(slot: number, keys: BigUint64Array, blocks: number, since: number): number {
    const lost = this.#lostSince(slot, since);
    if (lost === undefined) return 0;
    if (lost.length === 0) return blocks;
    // Low words alone may take a key that was not lost for one that was, never the other way: a
    // run cut too short is probed again, one left too long would be wrong.
    const gone = wordSet(lost);
    const words = new Uint32Array(keys.buffer, keys.byteOffset, keys.length * 2);
    const n = Math.min(blocks, keys.length);
    for (let i = 0; i < n; i++) if (gone(words[2 * i + W_LO] ?? 0)) return i;
    return n;
  }

  // The low words of the keys `slot` lost since its count was `since`, or undefined when it lost
  // more than its ring keeps (or the writer overwrote what was being read).
  #lostSince(slot: number, since: number): Uint32Array | undefined {
    assertSlot(slot);
    const w = this.#w;
    const lost = (Atomics.load(w, H_REMOVALS + slot) - since) >>> 0;
    // One entry short of the ring: the writer may be writing the next one over the oldest.
    if (lost >= REMOVED_RING) return undefined;
    const out = new Uint32Array(lost);
    for (let i = 0; i < lost; i++) out[i] = w[this.#l.ringAt + (slot * REMOVED_RING + ((since + i) >>> 0) % REMOVED_RING) * 2 + 1] ?? 0;
    return (Atomics.load(w, H_REMOVALS + slot) - since) >>> 0 < REMOVED_RING ? out : undefined;
  }

  /**
   * For each of `slots`, how many LEADING keys (from keys[0], without a gap) it holds: the
   * prefix a replica can skip prefilling. Probes stop once no slot can extend its run. `from[j]`:
   * slot j is known to hold keys before it (a run found earlier that `removals` or keptRun says
   * still stands), so its probing starts there.
   */
  leadingBlocks(keys: BigUint64Array | readonly bigint[], slots: readonly number[], from?: readonly number[]): number[] {
    for (const s of slots) assertSlot(s);
    const leading = slots.map(() => keys.length);
    const start = slots.map((_, j) => Math.min(keys.length, Math.max(0, from?.[j] ?? 0)));
    let alive = slots.length;
    const open = slots.map(() => true);
    const words = keys instanceof BigUint64Array ? new Uint32Array(keys.buffer, keys.byteOffset, keys.length * 2) : null;
    for (let i = 0; i < keys.length && alive > 0; i++) {
      // No open slot needs a key before the earliest start among them: jump there.
      let next = keys.length;
      for (let j = 0; j < slots.length; j++) if (open[j]) next = Math.min(next, start[j] ?? 0);
      i = Math.max(i, next);
      if (i >= keys.length) break;
      this.lookups++;
      if (words !== null) this.#lookup(words[2 * i + W_HI] ?? 0, words[2 * i + W_LO] ?? 0);
      else {
        const k = (keys as readonly bigint[])[i] ?? 0n;
        this.#lookup(hiOf(k), loOf(k));
      }
      for (let j = 0; j < slots.length; j++) {
        if (!open[j] || i < (start[j] ?? 0)) continue;
        const s = slots[j] ?? 0;
        const held = s < 32 ? (this.#mlo >>> s) & 1 : (this.#mhi >>> (s - 32)) & 1;
        if (held === 0) {
          open[j] = false;
          leading[j] = i;
          alive--;
        }
      }
    }
    return leading;
  }
}
