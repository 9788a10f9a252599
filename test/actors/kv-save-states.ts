// The two KV stream states the crash test saves one after the other (kv-save-crash.test.ts and its child).
import type { BlockKey, StreamState } from '../../src/kv/index.js';

// A state of `n` blocks: big enough that half of its file could not parse as a state.
function stateOf(n: number, seq: number): StreamState {
  const hashes = Array.from({ length: n }, (_, i) => 2n ** 63n + BigInt(seq * 100_000 + i));
  return { ranks: [{ lastSeq: seq, mirror: { verification: 'verified', parts: [{ rank: 0, medium: 'GPU', group: 0, hashes, refs: hashes.map(() => 1), keys: hashes.map((h) => h as BlockKey) }] } }] };
}

/** The last save before the crash. */
export const before = stateOf(2_000, 7);
/** The save the crash interrupts. */
export const after = stateOf(3_000, 9);
