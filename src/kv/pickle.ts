// pickle.dumps(obj, protocol=5) for the few types vLLM's default `sha256` block hash serialises
// (bytes, int, str, None, tuples of them). An engine started by someone else without
// `--prefix-caching-hash-algo sha256_cbor` but with a fixed PYTHONHASHSEED hashes this way; matching
// it byte for byte is the only way to route to it precisely.
//
// Limits (stated, not guessed): Python memoizes by object identity, so an object that appears twice
// in one tuple is written the second time as a memo GET. We cannot see identity, so we write every
// object afresh, which matches whenever the objects are distinct (always, for vLLM's block tuples:
// one parent, fresh token ints, distinct extra keys). Small ints are never memoized in pickle.
import { LlmgwError } from '../errors/index.js';
import type { ExtraKey } from './extra-key.js';

const PROTO = 0x80;
const FRAME = 0x95;
const STOP = 0x2e;
const MARK = 0x28;
const TUPLE = 0x74;
const EMPTY_TUPLE = 0x29;
const TUPLE_N = [0, 0x85, 0x86, 0x87] as const;
const MEMOIZE = 0x94;
const NONE = 0x4e;
const BININT1 = 0x4b;
const BININT2 = 0x4d;
const BININT = 0x4a;
const LONG1 = 0x8a;
const SHORT_BINBYTES = 0x43;
const BINBYTES = 0x42;
const BINBYTES8 = 0x8e;
const SHORT_BINUNICODE = 0x8c;
const BINUNICODE = 0x58;
const BINUNICODE8 = 0x8d;
/** CPython's _pickle: a frame shorter than this loses its header; one this long is closed. */
const FRAME_SIZE_MIN = 4;
const FRAME_SIZE_TARGET = 64 * 1024;
const FRAME_HEADER = 9;

class PickleWriter {
  buf: Uint8Array = new Uint8Array(256);
  len = 0;
  frameStart = -1;

  private room(n: number): void {
    if (this.len + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.len + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.buf.subarray(0, this.len));
    this.buf = next;
  }

  byte(b: number): void {
    this.room(1);
    this.buf[this.len++] = b;
  }

  bytes(b: Uint8Array): void {
    this.room(b.length);
    this.buf.set(b, this.len);
    this.len += b.length;
  }

  le(v: number, width: number): void {
    this.room(width);
    for (let i = 0; i < width; i++) this.buf[this.len++] = Number((BigInt(v) >> BigInt(8 * i)) & 0xffn);
  }

  startFrame(): void {
    this.room(FRAME_HEADER);
    this.frameStart = this.len;
    this.len += FRAME_HEADER;
  }

  commitFrame(): void {
    if (this.frameStart < 0) return;
    const n = this.len - this.frameStart - FRAME_HEADER;
    if (n >= FRAME_SIZE_MIN) {
      this.buf[this.frameStart] = FRAME;
      for (let i = 0; i < 8; i++) this.buf[this.frameStart + 1 + i] = Number((BigInt(n) >> BigInt(8 * i)) & 0xffn);
    } else {
      this.buf.copyWithin(this.frameStart, this.frameStart + FRAME_HEADER, this.len);
      this.len -= FRAME_HEADER;
    }
    this.frameStart = -1;
  }

  /** CPython checks after every saved object whether the frame reached its target size. */
  boundary(): void {
    if (this.frameStart >= 0 && this.len - this.frameStart - FRAME_HEADER >= FRAME_SIZE_TARGET) {
      this.commitFrame();
      this.startFrame();
    }
  }
}

function saveInt(w: PickleWriter, v: number): void {
  if (!Number.isSafeInteger(v)) {
    throw new LlmgwError('LLMGW_HASH_INPUT', `${String(v)} is not an integer vLLM could hash; token ids and offsets must be safe integers`);
  }
  if (v >= 0 && v <= 0xff) {
    w.byte(BININT1);
    w.byte(v);
  } else if (v >= 0 && v <= 0xffff) {
    w.byte(BININT2);
    w.le(v, 2);
  } else if (v >= -0x80000000 && v <= 0x7fffffff) {
    w.byte(BININT);
    w.le(v >>> 0, 4);
  } else {
    // LONG1: little-endian two's complement, shortest that keeps the sign bit right.
    let big = BigInt(v);
    const out: number[] = [];
    for (;;) {
      const b = Number(big & 0xffn);
      out.push(b);
      big >>= 8n;
      if ((big === 0n && (b & 0x80) === 0) || (big === -1n && (b & 0x80) !== 0)) break;
    }
    w.byte(LONG1);
    w.byte(out.length);
    for (const b of out) w.byte(b);
  }
}

function saveBytes(w: PickleWriter, b: Uint8Array): void {
  if (b.length < 0x100) {
    w.byte(SHORT_BINBYTES);
    w.byte(b.length);
  } else if (b.length <= 0xffffffff) {
    w.byte(BINBYTES);
    w.le(b.length, 4);
  } else {
    w.byte(BINBYTES8);
    w.le(b.length, 8);
  }
  w.bytes(b);
  w.byte(MEMOIZE);
}

function saveStr(w: PickleWriter, s: string): void {
  const b = Buffer.from(s, 'utf8');
  if (b.length < 0x100) {
    w.byte(SHORT_BINUNICODE);
    w.byte(b.length);
  } else if (b.length <= 0xffffffff) {
    w.byte(BINUNICODE);
    w.le(b.length, 4);
  } else {
    w.byte(BINUNICODE8);
    w.le(b.length, 8);
  }
  w.bytes(b);
  w.byte(MEMOIZE);
}

type PickleValue = ExtraKey | null | readonly PickleValue[];

function save(w: PickleWriter, v: PickleValue): void {
  if (v === null) w.byte(NONE);
  else if (typeof v === 'number') saveInt(w, v);
  else if (typeof v === 'string') saveStr(w, v);
  else if (v instanceof Uint8Array) saveBytes(w, v);
  else saveTuple(w, v.length, (i) => v[i] as PickleValue);
  w.boundary();
}

function saveTuple(w: PickleWriter, n: number, at: (i: number) => PickleValue): void {
  if (n === 0) {
    w.byte(EMPTY_TUPLE);
    return;
  }
  if (n <= 3) {
    for (let i = 0; i < n; i++) save(w, at(i));
    w.byte(TUPLE_N[n] as number);
  } else {
    w.byte(MARK);
    for (let i = 0; i < n; i++) save(w, at(i));
    w.byte(TUPLE);
  }
  w.byte(MEMOIZE);
}

function dumps(body: (w: PickleWriter) => void): Uint8Array {
  const w = new PickleWriter();
  w.byte(PROTO);
  w.byte(5);
  w.startFrame();
  body(w);
  w.byte(STOP);
  w.commitFrame();
  return w.buf.slice(0, w.len);
}

/** pickle.dumps(seed, protocol=5): what vLLM hashes for NONE_HASH under `sha256`. */
export function picklePrefix(seed: string): Uint8Array {
  return dumps((w) => {
    saveStr(w, seed);
    w.boundary();
  });
}

/** pickle.dumps((parent, tuple(tokens[start:end]), extra_keys), protocol=5). */
export function pickleBlock(
  parent: Uint8Array,
  tokens: ArrayLike<number>,
  start: number,
  end: number,
  extraKeys: readonly ExtraKey[] | null,
): Uint8Array {
  const blockTokens: number[] = [];
  for (let k = start; k < end; k++) blockTokens.push(tokens[k] as number);
  return dumps((w) => save(w, [parent, blockTokens, extraKeys]));
}
