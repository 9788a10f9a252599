// In-process stand-ins for kv's ClusterIndex and workers' HashPool, so routing rules are tested
// without threads: the same interfaces, a Map for the index, a chained sha256 for block keys.
import { createHash } from 'node:crypto';
import type { Scorer } from '../../src/routing/index.js';
import type { SharedIndex } from '../../src/kv/index.js';
import { isBlockKeyArray, type BlockKeyArray } from '../../src/kv/index.js';

/** A Map-backed index: key -> slots holding it. */
export class FakeIndex implements SharedIndex {
  readonly map = new Map<bigint, Set<number>>();
  add(slot: number, keys: Iterable<bigint>): void {
    for (const k of keys) {
      const s = this.map.get(k) ?? new Set();
      s.add(slot);
      this.map.set(k, s);
    }
  }
  remove(slot: number, keys: Iterable<bigint>): void {
    for (const k of keys) {
      const s = this.map.get(k);
      if (s === undefined) continue;
      s.delete(slot);
      if (s.size === 0) this.map.delete(k);
    }
  }
  clearSlot(slot: number): void {
    for (const k of [...this.map.keys()]) this.remove(slot, [k]);
  }
  get size(): number {
    return this.map.size;
  }
  holds(key: bigint, slot: number): boolean {
    return this.map.get(key)?.has(slot) ?? false;
  }
}

/** Block keys of `tokens`: one per full block, each over the whole prefix up to it (plus salt/adapter). */
export function fakeKeys(tokens: ArrayLike<number>, blockSize: number, extra = ''): bigint[] {
  const keys: bigint[] = [];
  const h = createHash('sha256').update(extra);
  for (let b = 0; b + blockSize <= tokens.length; b += blockSize) {
    h.update(Uint32Array.from(Array.prototype.slice.call(tokens, b, b + blockSize) as number[]));
    keys.push(h.copy().digest().readBigUInt64BE(24));
  }
  return keys;
}

/** Keys as the pool hands them over: a BlockKeyArray. */
export function keyArray(keys: readonly bigint[]): BlockKeyArray {
  const a = BigUint64Array.from(keys);
  if (!isBlockKeyArray(a)) throw new Error('not a key array');
  return a;
}

/** A scorer over a FakeIndex; `delayMs` makes it late, `fail` makes it refuse. */
export function fakeScorer(index: FakeIndex, o: { delayMs?: number; fail?: string } = {}): Scorer & { calls: number } {
  const s = {
    calls: 0,
    async score(task: Parameters<Scorer['score']>[0]) {
      s.calls++;
      if (o.delayMs !== undefined) await new Promise((r) => setTimeout(r, o.delayMs));
      if (o.fail !== undefined) return { ok: false as const, reason: o.fail };
      const keys = fakeKeys(task.tokens, task.hash.blockSizeTokens, `${task.hash.loraName ?? ''}|${task.hash.cacheSalt ?? ''}`);
      const leading = task.slots.map((slot) => {
        let n = 0;
        while (n < keys.length && index.holds(keys[n] ?? 0n, slot)) n++;
        return n;
      });
      return { ok: true as const, keys: keyArray(keys), leading };
    },
  };
  return s;
}
