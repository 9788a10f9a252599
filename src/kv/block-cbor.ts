// Canonical CBOR written by hand, as cbor2.dumps(x, canonical=True) writes it for what vLLM's
// sha256_cbor block hash serialises (plain shortest-form definite CBOR): a block message
// (parent digest, token ids, extra keys) laid into one reused buffer, so hashing a chain makes no
// object per block. hashing.ts says why by hand and what it measured.
import { LlmgwError } from '../errors/index.js';
import type { ExtraKey } from './extra-key.js';

/** Bytes of a sha256 digest, the parent of every block but the first. */
export const DIGEST_BYTES = 32;
/** Bytes before the token array in every block message: array(3) header, bytes(32) header, parent. */
export const PARENT_AT = 3;
export const TOKENS_AT = PARENT_AT + DIGEST_BYTES;

let scratch: Buffer = Buffer.allocUnsafeSlow(4096);
// crypto.hash needs a view of exactly the message; one cached view per length avoids a subarray per block.
let views: Buffer[] = [];

/** The reused buffer block messages are laid in, grown to hold `bytes`. */
export function ensureScratch(bytes: number): Buffer {
  if (scratch.length < bytes) {
    let size = scratch.length;
    while (size < bytes) size *= 2;
    scratch = Buffer.allocUnsafeSlow(size);
    views = [];
  }
  return scratch;
}

/** The first `len` bytes of the scratch buffer, the message crypto.hash is given. */
export function viewOf(len: number): Buffer {
  let v = views[len];
  if (v === undefined) {
    v = scratch.subarray(0, len);
    views[len] = v;
  }
  return v;
}

function writeHead(m: Uint8Array, p: number, major: number, n: number): number {
  const mt = major << 5;
  if (n < 24) {
    m[p] = mt | n;
    return p + 1;
  }
  if (n < 0x100) {
    m[p] = mt | 24;
    m[p + 1] = n;
    return p + 2;
  }
  if (n < 0x10000) {
    m[p] = mt | 25;
    m[p + 1] = n >>> 8;
    m[p + 2] = n & 0xff;
    return p + 3;
  }
  if (n <= 0xffffffff) {
    m[p] = mt | 26;
    m[p + 1] = n >>> 24;
    m[p + 2] = (n >>> 16) & 0xff;
    m[p + 3] = (n >>> 8) & 0xff;
    m[p + 4] = n & 0xff;
    return p + 5;
  }
  const hi = Math.floor(n / 0x100000000);
  const lo = n >>> 0;
  m[p] = mt | 27;
  m[p + 1] = hi >>> 24;
  m[p + 2] = (hi >>> 16) & 0xff;
  m[p + 3] = (hi >>> 8) & 0xff;
  m[p + 4] = hi & 0xff;
  m[p + 5] = lo >>> 24;
  m[p + 6] = (lo >>> 16) & 0xff;
  m[p + 7] = (lo >>> 8) & 0xff;
  m[p + 8] = lo & 0xff;
  return p + 9;
}

function writeInt(m: Uint8Array, p: number, v: number): number {
  if (!Number.isSafeInteger(v)) {
    throw new LlmgwError('LLMGW_HASH_INPUT', `${String(v)} is not an integer vLLM could hash; token ids and offsets must be safe integers`);
  }
  return v >= 0 ? writeHead(m, p, 0, v) : writeHead(m, p, 1, -1 - v);
}

/** Upper bound of the CBOR size of an extra key (strings are sized by their UTF-8 length). */
export function cborSize(v: ExtraKey): number {
  if (typeof v === 'string') return 9 + Buffer.byteLength(v, 'utf8');
  if (typeof v === 'number') return 9;
  if (v instanceof Uint8Array) return 9 + v.length;
  let n = 9;
  for (const x of v) n += cborSize(x);
  return n;
}

/** An extra key's CBOR into `m` at `p`; returns where it ends. */
export function writeCbor(m: Buffer, p: number, v: ExtraKey): number {
  if (typeof v === 'string') {
    const n = Buffer.byteLength(v, 'utf8');
    const q = writeHead(m, p, 3, n);
    m.write(v, q, n, 'utf8');
    return q + n;
  }
  if (typeof v === 'number') return writeInt(m, p, v);
  if (v instanceof Uint8Array) {
    const q = writeHead(m, p, 2, v.length);
    m.set(v, q);
    return q + v.length;
  }
  let q = writeHead(m, p, 4, v.length);
  for (const x of v) q = writeCbor(m, q, x);
  return q;
}

/** Canonical CBOR of an extra-keys tuple or None, as cbor2.dumps(x, canonical=True) writes it. */
export function cborOfExtraKeys(keys: readonly ExtraKey[] | null): Uint8Array {
  if (keys === null) return Uint8Array.of(0xf6);
  const out = Buffer.alloc(cborSize(keys));
  return out.subarray(0, writeCbor(out, 0, keys));
}

/** The tokens' CBOR array into `m` at `p`; a slow path only for ids above 2^32 or bad values. */
export function writeTokens(m: Buffer, p: number, tokens: ArrayLike<number>, start: number, end: number): number {
  p = writeHead(m, p, 4, end - start);
  for (let k = start; k < end; k++) {
    const v = tokens[k] as number;
    if (v >>> 0 !== v) {
      if (!(v >= 0)) {
        throw new LlmgwError('LLMGW_HASH_INPUT', `token id ${String(v)} at position ${k} is not a non-negative integer; token ids come from the tokenizer`);
      }
      p = writeInt(m, p, v);
    } else if (v < 24) {
      m[p++] = v;
    } else if (v < 0x100) {
      m[p++] = 0x18;
      m[p++] = v;
    } else {
      // 2-byte (19) or 4-byte (1a) argument without a branch on the width: a real vocabulary mixes
      // both at random, so that branch mispredicts about every other token. A 2-byte argument is
      // shifted up so its bytes come first; the two spare bytes after it are overwritten by what
      // follows, and every buffer written here has room for them. `wide` is 0 or 1 by arithmetic
      // because V8 turns a ternary into a branch; on random token ids this measured 17% faster.
      const wide = ((v >>> 16) + 0xffff) >>> 16;
      const x = v << (16 - (wide << 4));
      m[p] = 0x19 + wide;
      m[p + 1] = x >>> 24;
      m[p + 2] = (x >>> 16) & 0xff;
      m[p + 3] = (x >>> 8) & 0xff;
      m[p + 4] = x & 0xff;
      p += 3 + (wide << 1);
    }
  }
  return p;
}

/** Canonical CBOR of one string: the input NONE_HASH is the hash of. */
export function cborOfString(s: string): Uint8Array {
  const out = Buffer.alloc(9 + Buffer.byteLength(s, 'utf8'));
  return out.subarray(0, writeCbor(out, 0, s));
}

/** A block's message in canonical CBOR, (parent, tokens, extra keys), in a buffer of its own. */
export function cborBlockMessage(parent: Uint8Array, blockTokens: ArrayLike<number>, extraKeys: readonly ExtraKey[] | null): Uint8Array {
  const extra = cborOfExtraKeys(extraKeys);
  const out = Buffer.alloc(TOKENS_AT + 9 + blockTokens.length * 9 + extra.length);
  out[0] = 0x83;
  let p = writeHead(out, 1, 2, parent.length);
  out.set(parent, p);
  p = writeTokens(out, p + parent.length, blockTokens, 0, blockTokens.length);
  out.set(extra, p);
  return out.subarray(0, p + extra.length);
}
