// vLLM's per-block extra keys, in their own module so that hashing (which encodes them) and pickle
// (which the sha256 algorithm encodes them with) both import the type without importing each other.

/** One element of vLLM's per-block extra-keys tuple: a str, an int, bytes, or a nested tuple. */
export type ExtraKey = string | number | Uint8Array | readonly ExtraKey[];

/**
 * One block's extra keys as an event carries them (msgpack, so unknown): only the shapes vLLM
 * hashes (str, int, bytes, tuple) are usable; anything else is undefined, which makes the block
 * unverifiable rather than wrongly hashed.
 */
export function asExtraKeys(v: unknown): readonly ExtraKey[] | null | undefined {
  if (v === null) return null;
  if (!Array.isArray(v)) return undefined;
  const out: ExtraKey[] = [];
  for (const x of v as unknown[]) {
    const k = asExtraKey(x);
    if (k === undefined) return undefined;
    out.push(k);
  }
  return out;
}

function asExtraKey(x: unknown): ExtraKey | undefined {
  if (typeof x === 'string' || x instanceof Uint8Array) return x;
  if (typeof x === 'number') return Number.isSafeInteger(x) ? x : undefined;
  if (typeof x === 'bigint') return x >= BigInt(Number.MIN_SAFE_INTEGER) && x <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(x) : undefined;
  if (Array.isArray(x)) {
    const inner = asExtraKeys(x);
    return inner === null ? undefined : inner;
  }
  return undefined;
}
