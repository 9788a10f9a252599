// Memory layout of the shared cluster index (a SharedArrayBuffer read by worker threads). The writer
// and every reader use these constants and nothing else, so the two sides cannot drift apart; a
// change here bumps LAYOUT_VERSION so a reader refuses a buffer laid out by another version.

/** Identifies a buffer as a cluster index ("LGWI"). */
export const MAGIC = 0x4c475749;
export const LAYOUT_VERSION = 3;

/** Replica slots a mask can hold. Slots are per replica and data-parallel rank; 64 covers a small cluster. */
export const MAX_SLOTS = 64;

/**
 * Per slot, how many times it lost a key (MAX_SLOTS words from this one on). A reader that found a
 * run of leading blocks for a slot keeps this count beside it: while it is unchanged the slot has
 * lost none of them, so a conversation's next turn probes only the blocks after the run.
 */
export const H_REMOVALS = 16;

/**
 * Per slot, its last REMOVED_RING lost keys (two words each, high then low), the one lost as count
 * n at n % REMOVED_RING, written before the count moves. A count that moved then need not send a
 * reader's run back to the start: an engine evicts blocks all the time (every reuse of a cached
 * free block), nearly never the ones of the conversation being routed, and the keys it lost say
 * whether any of them was in the run. Right after the header.
 */
export const REMOVED_RING = 4096;

/** Header, in 32-bit words at the start of the buffer. */
export const HEADER_WORDS = H_REMOVALS + MAX_SLOTS;
export const H_MAGIC = 0;
export const H_VERSION = 1;
/** Entries in the table (not a power of two: the home of a key is a multiply-shift of its low word). */
export const H_ENTRIES = 2;
/** Keys with at least one slot (what `size` reports). */
export const H_SIZE = 3;
/** Bumped whenever a deletion moves an entry: a reader that missed while it changed tries again. */
export const H_MOVES = 4;
/** Keys the writer refused because their probe ran past MAX_PROBES (the table is too full). */
export const H_DROPPED = 5;
/** Configured capacity in keys. */
export const H_CAPACITY = 6;

/** One entry: key high word, key low word, slot mask low word (slots 0-31), high word (32-63). */
export const ENTRY_WORDS = 4;
export const E_KEY_HI = 0;
export const E_KEY_LO = 1;
export const E_MASK_LO = 2;
export const E_MASK_HI = 3;

/**
 * Key 0 marks an empty entry, so a real key 0 (one chance in 2^64, but possible) lives in one extra
 * entry after the table instead of being lost or breaking a probe chain.
 */
export const EXTRA_ENTRIES = 1;

/** Entries per seqlock stripe: one version word guards this many entries (odd = being written). */
export const STRIPE_SHIFT = 4;

/** Longest probe the writer makes and a reader follows: over shared memory, never an unbounded loop. */
export const MAX_PROBES = 512;

/** Fill at most this fraction of entries; linear probing slows sharply above it. */
export const MAX_LOAD = 0.7;
