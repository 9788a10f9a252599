// A 64-bit block key as the two 32-bit words typed tables and shared memory hold it, read without
// making a BigInt per key where the keys come as a BigUint64Array.

const littleEndian = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
/** Where a key's high and low words sit in a Uint32Array view of a BigUint64Array. */
export const W_HI = littleEndian ? 1 : 0;
export const W_LO = littleEndian ? 0 : 1;

/** The high and low 32-bit words of a 64-bit key. */
export const hiOf = (k: bigint): number => Number((k >> 32n) & 0xffffffffn);
export const loOf = (k: bigint): number => Number(k & 0xffffffffn);

/** Calls `fn` with each key's two 32-bit words (and its index); a BigUint64Array is read without a BigInt per key. */
export function forEachKey(keys: Iterable<bigint> | BigUint64Array, fn: (hi: number, lo: number, i: number) => void): void {
  if (keys instanceof BigUint64Array) {
    const words = new Uint32Array(keys.buffer, keys.byteOffset, keys.length * 2);
    for (let i = 0; i < keys.length; i++) fn(words[2 * i + W_HI] ?? 0, words[2 * i + W_LO] ?? 0, i);
    return;
  }
  let i = 0;
  for (const k of keys) fn(hiOf(k), loOf(k), i++);
}

