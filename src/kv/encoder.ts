// Encoder of vLLM's KV event batches, byte-exact with msgspec 0.21: what the sim publishes and the
// tests feed the decoder. Apart from the decoder because it trusts its input and the decoder must not.
import { BLOCK_STORED_FIELDS, REMOVED_ARITY_MAX, STORED_ARITY_MAX } from './events.js';
import type { BlockRemoved, BlockStored, EventBatch, EventFormat, WireBlockHash } from './events.js';

const STORED_KEYS = ['type', ...BLOCK_STORED_FIELDS];
class Writer {
  buf: Buffer;
  view: DataView;
  len = 0;

  constructor(size: number) {
    this.buf = Buffer.alloc(size);
    this.view = new DataView(this.buf.buffer, this.buf.byteOffset, this.buf.byteLength);
  }

  room(n: number): void {
    if (this.len + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.len + n) size *= 2;
    const next = Buffer.alloc(size);
    next.set(this.buf.subarray(0, this.len));
    this.buf = next;
    this.view = new DataView(next.buffer, next.byteOffset, next.byteLength);
  }

  u8(b: number): void {
    this.room(1);
    this.buf[this.len++] = b;
  }

  head(fix: number, fixMax: number, c8: number | null, c16: number, c32: number, n: number): void {
    this.room(5);
    if (n < fixMax) this.buf[this.len++] = fix | n;
    else if (c8 !== null && n < 0x100) {
      this.buf[this.len++] = c8;
      this.buf[this.len++] = n;
    } else if (n < 0x10000) {
      this.buf[this.len++] = c16;
      this.view.setUint16(this.len, n);
      this.len += 2;
    } else {
      this.buf[this.len++] = c32;
      this.view.setUint32(this.len, n);
      this.len += 4;
    }
  }

  array(n: number): void {
    this.head(0x90, 16, null, 0xdc, 0xdd, n);
  }

  map(n: number): void {
    this.head(0x80, 16, null, 0xde, 0xdf, n);
  }

  nil(): void {
    this.u8(0xc0);
  }

  str(s: string): void {
    const known = knownStrings.get(s);
    if (known !== undefined) {
      this.room(known.length);
      this.buf.set(known, this.len);
      this.len += known.length;
      return;
    }
    const n = Buffer.byteLength(s, 'utf8');
    this.head(0xa0, 32, 0xd9, 0xda, 0xdb, n);
    this.room(n);
    this.len += this.buf.write(s, this.len, n, 'utf8');
  }

  bin(b: Uint8Array): void {
    this.room(5 + b.length);
    const n = b.length;
    if (n < 0x100) {
      this.buf[this.len++] = 0xc4;
      this.buf[this.len++] = n;
    } else if (n < 0x10000) {
      this.buf[this.len++] = 0xc5;
      this.view.setUint16(this.len, n);
      this.len += 2;
    } else {
      this.buf[this.len++] = 0xc6;
      this.view.setUint32(this.len, n);
      this.len += 4;
    }
    this.buf.set(b, this.len);
    this.len += n;
  }

  float(x: number): void {
    this.room(9);
    this.buf[this.len++] = 0xcb;
    this.view.setFloat64(this.len, x);
    this.len += 8;
  }

  /** Smallest msgpack int form, unsigned forms for non-negative values, as msgspec writes them. */
  int(x: number): void {
    this.room(9);
    const b = this.buf;
    if (x >= 0) {
      if (x < 0x80) b[this.len++] = x;
      else if (x < 0x100) {
        b[this.len++] = 0xcc;
        b[this.len++] = x;
      } else if (x < 0x10000) {
        b[this.len++] = 0xcd;
        this.view.setUint16(this.len, x);
        this.len += 2;
      } else if (x < 0x100000000) {
        b[this.len++] = 0xce;
        this.view.setUint32(this.len, x);
        this.len += 4;
      } else {
        b[this.len++] = 0xcf;
        this.view.setBigUint64(this.len, BigInt(x));
        this.len += 8;
      }
    } else if (x >= -32) b[this.len++] = x & 0xff;
    else if (x >= -0x80) {
      b[this.len++] = 0xd0;
      this.view.setInt8(this.len++, x);
    } else if (x >= -0x8000) {
      b[this.len++] = 0xd1;
      this.view.setInt16(this.len, x);
      this.len += 2;
    } else if (x >= -0x80000000) {
      b[this.len++] = 0xd2;
      this.view.setInt32(this.len, x);
      this.len += 4;
    } else {
      b[this.len++] = 0xd3;
      this.view.setBigInt64(this.len, BigInt(x));
      this.len += 8;
    }
  }

  bigint(x: bigint): void {
    if (x >= -0x80000000n && x < 0x100000000n) {
      this.int(Number(x));
      return;
    }
    this.room(9);
    this.buf[this.len++] = x >= 0n ? 0xcf : 0xd3;
    if (x >= 0n) this.view.setBigUint64(this.len, x);
    else this.view.setBigInt64(this.len, x);
    this.len += 8;
  }

  any(v: unknown): void {
    if (v === null || v === undefined) this.nil();
    else if (typeof v === 'string') this.str(v);
    else if (typeof v === 'number') {
      if (Number.isSafeInteger(v)) this.int(v);
      else this.float(v);
    } else if (typeof v === 'bigint') this.bigint(v);
    else if (typeof v === 'boolean') this.u8(v ? 0xc3 : 0xc2);
    else if (v instanceof Uint8Array) this.bin(v);
    else if (Array.isArray(v)) {
      this.array(v.length);
      for (const x of v) this.any(x);
    } else throw new TypeError(`cannot msgpack-encode a ${typeof v} as vLLM would`);
  }

  hash(h: WireBlockHash): void {
    if (typeof h === 'bigint') this.bigint(h);
    else this.bin(h);
  }

  hashes(hs: readonly WireBlockHash[]): void {
    this.array(hs.length);
    for (const h of hs) this.hash(h);
  }

  intOrNil(x: number | null): void {
    if (x === null) this.nil();
    else this.int(x);
  }

  strOrNil(s: string | null): void {
    if (s === null) this.nil();
    else this.str(s);
  }
}

// Field names, tags and common values, encoded once: most of a batch's strings are these.
const knownStrings = new Map<string, Uint8Array>();
{
  const w = new Writer(64);
  for (const s of ['type', 'BlockStored', 'BlockRemoved', 'AllBlocksCleared', 'GPU', 'CPU', 'full_attention', ...STORED_KEYS]) {
    w.len = 0;
    w.str(s);
    knownStrings.set(s, new Uint8Array(w.buf.subarray(0, w.len)));
  }
}

function storedAsMap(w: Writer, e: BlockStored): void {
  // omit_defaults: a None in a field that has a default is left out; fields without one always appear.
  const n =
    8 +
    (e.extraKeys !== null ? 1 : 0) +
    (e.groupIdx !== null ? 1 : 0) +
    (e.kvCacheSpecKind !== null ? 1 : 0) +
    (e.kvCacheSpecSlidingWindow !== null ? 1 : 0) +
    (e.locality !== null ? 1 : 0);
  w.map(n);
  w.str('type');
  w.str('BlockStored');
  w.str('block_hashes');
  w.hashes(e.blockHashes);
  w.str('parent_block_hash');
  if (e.parentBlockHash === null) w.nil();
  else w.hash(e.parentBlockHash);
  w.str('token_ids');
  w.any(e.tokenIds);
  w.str('block_size');
  w.int(e.blockSize);
  w.str('lora_id');
  w.intOrNil(e.loraId);
  w.str('medium');
  w.strOrNil(e.medium);
  w.str('lora_name');
  w.strOrNil(e.loraName);
  if (e.extraKeys !== null) {
    w.str('extra_keys');
    w.any(e.extraKeys);
  }
  if (e.groupIdx !== null) {
    w.str('group_idx');
    w.int(e.groupIdx);
  }
  if (e.kvCacheSpecKind !== null) {
    w.str('kv_cache_spec_kind');
    w.str(e.kvCacheSpecKind);
  }
  if (e.kvCacheSpecSlidingWindow !== null) {
    w.str('kv_cache_spec_sliding_window');
    w.int(e.kvCacheSpecSlidingWindow);
  }
  if (e.locality !== null) {
    w.str('locality');
    w.str(e.locality);
  }
}

function removedAsMap(w: Writer, e: BlockRemoved): void {
  w.map(3 + (e.groupIdx !== null ? 1 : 0) + (e.locality !== null ? 1 : 0));
  w.str('type');
  w.str('BlockRemoved');
  w.str('block_hashes');
  w.hashes(e.blockHashes);
  w.str('medium');
  w.strOrNil(e.medium);
  if (e.groupIdx !== null) {
    w.str('group_idx');
    w.int(e.groupIdx);
  }
  if (e.locality !== null) {
    w.str('locality');
    w.str(e.locality);
  }
}

// Array mode is v0.22/v0.23's layout (the last positional one): every field, trailing nils too.
// It has no locality field; that arrived with the map format.
function storedAsArray(w: Writer, e: BlockStored): void {
  w.array(STORED_ARITY_MAX);
  w.str('BlockStored');
  w.hashes(e.blockHashes);
  if (e.parentBlockHash === null) w.nil();
  else w.hash(e.parentBlockHash);
  w.any(e.tokenIds);
  w.int(e.blockSize);
  w.intOrNil(e.loraId);
  w.strOrNil(e.medium);
  w.strOrNil(e.loraName);
  w.any(e.extraKeys);
  w.intOrNil(e.groupIdx);
  w.strOrNil(e.kvCacheSpecKind);
  w.intOrNil(e.kvCacheSpecSlidingWindow);
}

function removedAsArray(w: Writer, e: BlockRemoved): void {
  w.array(REMOVED_ARITY_MAX);
  w.str('BlockRemoved');
  w.hashes(e.blockHashes);
  w.strOrNil(e.medium);
  w.intOrNil(e.groupIdx);
}

// One writer for every batch (encoding is synchronous), so a batch costs one copy-out, not a new
// buffer per call.
const writer = new Writer(4096);

/** Encodes a batch exactly as vLLM's msgspec does: 'map' = v0.24 and later, 'array' = v0.22-v0.23. */
export function encodeEventBatch(b: EventBatch, o: { eventFormat: EventFormat }): Uint8Array {
  const w = writer;
  w.len = 0;
  w.array(3);
  w.float(b.ts);
  w.array(b.events.length);
  for (const e of b.events) {
    switch (e.type) {
      case 'BlockStored':
        if (o.eventFormat === 'map') storedAsMap(w, e);
        else storedAsArray(w, e);
        break;
      case 'BlockRemoved':
        if (o.eventFormat === 'map') removedAsMap(w, e);
        else removedAsArray(w, e);
        break;
      case 'AllBlocksCleared':
        if (o.eventFormat === 'map') {
          w.map(1);
          w.str('type');
        } else w.array(1);
        w.str('AllBlocksCleared');
        break;
    }
  }
  w.intOrNil(b.dataParallelRank);
  return new Uint8Array(w.buf.subarray(0, w.len));
}
