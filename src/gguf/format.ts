// GGUF version 3, the file llama.cpp loads: a header, typed key/value metadata, one descriptor per
// tensor, then the tensors' bytes, each at an aligned offset. Written so the project can make its own
// test model, read so the gateway can take a model's tokenizer from the file the engine serves.
// Layout as ggml/include/gguf.h states it; every integer is little-endian.
import { LlmgwError } from '../errors/index.js';

/** A metadata value, tagged with the GGUF type it is stored as. */
export type GgufValue =
  | { readonly type: 'u8' | 'i8' | 'u16' | 'i16' | 'u32' | 'i32' | 'f32' | 'f64'; readonly value: number }
  | { readonly type: 'u64' | 'i64'; readonly value: bigint }
  | { readonly type: 'bool'; readonly value: boolean }
  | { readonly type: 'string'; readonly value: string }
  | { readonly type: 'array'; readonly of: 'string'; readonly value: readonly string[] }
  | { readonly type: 'array'; readonly of: 'i32'; readonly value: Int32Array }
  | { readonly type: 'array'; readonly of: 'other'; readonly count: number };

/** The element types a tensor may have here: what a small f16 model needs. */
export type TensorType = 'f32' | 'f16';

/** A tensor to write: dims in ggml's order (the fastest-varying first), its bytes already encoded. */
export interface GgufTensor {
  readonly name: string;
  readonly dims: readonly number[];
  readonly type: TensorType;
  readonly data: Uint8Array;
}

/** A tensor as the file describes it. */
export interface GgufTensorInfo {
  readonly name: string;
  readonly dims: readonly bigint[];
  readonly ggmlType: number;
  readonly offset: bigint;
}

/** A file's metadata and tensor descriptors, without the tensor data. */
export interface GgufHeader {
  readonly version: number;
  readonly metadata: ReadonlyMap<string, GgufValue>;
  readonly tensors: readonly GgufTensorInfo[];
  /** Where the data section starts: tensor offsets count from here. */
  readonly dataOffset: number;
}

const MAGIC = 0x46554747; // "GGUF" read as a little-endian u32
const VERSION = 3;
const DEFAULT_ALIGNMENT = 32;
const MAX_DIMS = 4; // GGML_MAX_DIMS
const typeIds = { u8: 0, i8: 1, u16: 2, i16: 3, u32: 4, i32: 5, f32: 6, bool: 7, string: 8, array: 9, u64: 10, i64: 11, f64: 12 } as const;
const scalarSize: Readonly<Record<number, number>> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
const ggmlTypeIds: Readonly<Record<TensorType, number>> = { f32: 0, f16: 1 };
const bytesPerElement: Readonly<Record<TensorType, number>> = { f32: 4, f16: 2 };

// Grows as it writes: the header of a 151k-token vocabulary is a few megabytes of short strings.
class Sink {
  #buf = new Uint8Array(1 << 16);
  #view = new DataView(this.#buf.buffer);
  #len = 0;

  #room(n: number): void {
    if (this.#len + n <= this.#buf.length) return;
    let size = this.#buf.length * 2;
    while (size < this.#len + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.#buf.subarray(0, this.#len));
    this.#buf = next;
    this.#view = new DataView(next.buffer);
  }
  u32(v: number): void {
    this.#room(4);
    this.#view.setUint32(this.#len, v, true);
    this.#len += 4;
  }
  i32(v: number): void {
    this.#room(4);
    this.#view.setInt32(this.#len, v, true);
    this.#len += 4;
  }
  f32(v: number): void {
    this.#room(4);
    this.#view.setFloat32(this.#len, v, true);
    this.#len += 4;
  }
  u64(v: bigint): void {
    this.#room(8);
    this.#view.setBigUint64(this.#len, v, true);
    this.#len += 8;
  }
  bytes(b: Uint8Array): void {
    this.#room(b.length);
    this.#buf.set(b, this.#len);
    this.#len += b.length;
  }
  string(s: string): void {
    const b = Buffer.from(s, 'utf8');
    this.u64(BigInt(b.length));
    this.bytes(b);
  }
  padTo(alignment: number): void {
    const pad = (alignment - (this.#len % alignment)) % alignment;
    this.bytes(new Uint8Array(pad));
  }
  get length(): number {
    return this.#len;
  }
  done(): Uint8Array {
    return this.#buf.subarray(0, this.#len);
  }
}

function writeValue(s: Sink, v: GgufValue): void {
  switch (v.type) {
    case 'u32':
      s.u32(v.value);
      return;
    case 'i32':
      s.i32(v.value);
      return;
    case 'f32':
      s.f32(v.value);
      return;
    case 'bool':
      s.bytes(Uint8Array.of(v.value ? 1 : 0));
      return;
    case 'string':
      s.string(v.value);
      return;
    case 'u64':
      s.u64(v.value);
      return;
    case 'array':
      if (v.of === 'string') {
        s.u32(typeIds.string);
        s.u64(BigInt(v.value.length));
        for (const x of v.value) s.string(x);
        return;
      }
      if (v.of === 'i32') {
        s.u32(typeIds.i32);
        s.u64(BigInt(v.value.length));
        for (const x of v.value) s.i32(x);
        return;
      }
      break;
    case 'u8':
    case 'i8':
    case 'u16':
    case 'i16':
    case 'i64':
    case 'f64':
      break;
  }
  throw new LlmgwError('LLMGW_GGUF_FORMAT', `a GGUF value of type ${v.type}${v.type === 'array' ? ` of ${v.of}` : ''} cannot be written here; write u32, i32, f32, bool, string, u64, or an array of string or i32`);
}

/**
 * The whole file as chunks in order: the header (metadata and tensor descriptors, padded to the
 * alignment) and each tensor's bytes with the padding that puts the next one at an aligned offset.
 * Offsets count from the start of the data section, as the loader reads them.
 */
export function encodeGguf(metadata: ReadonlyMap<string, GgufValue>, tensors: readonly GgufTensor[]): Uint8Array[] {
  const align = metadata.get('general.alignment');
  const alignment = align?.type === 'u32' ? align.value : DEFAULT_ALIGNMENT;
  const s = new Sink();
  s.u32(MAGIC);
  s.u32(VERSION);
  s.u64(BigInt(tensors.length));
  s.u64(BigInt(metadata.size));
  for (const [key, value] of metadata) {
    s.string(key);
    s.u32(typeIds[value.type]);
    writeValue(s, value);
  }
  const chunks: Uint8Array[] = [];
  let offset = 0;
  for (const t of tensors) {
    const elements = t.dims.reduce((n, d) => n * d, 1);
    if (t.data.length !== elements * bytesPerElement[t.type]) {
      throw new LlmgwError('LLMGW_GGUF_FORMAT', `tensor ${t.name}: ${t.data.length} bytes for dims [${t.dims.join(', ')}] of ${t.type}; want ${elements * bytesPerElement[t.type]}`);
    }
    s.string(t.name);
    s.u32(t.dims.length);
    for (const d of t.dims) s.u64(BigInt(d));
    s.u32(ggmlTypeIds[t.type]);
    s.u64(BigInt(offset));
    const pad = (alignment - (t.data.length % alignment)) % alignment;
    chunks.push(t.data, new Uint8Array(pad));
    offset += t.data.length + pad;
  }
  s.padTo(alignment);
  return [s.done(), ...chunks];
}

// Reads what a GGUF's header says, refusing anything that runs past the bytes given: the file may be
// truncated, or not a GGUF at all, and the gateway reads files an operator pointed it at.
class Source {
  readonly #view: DataView;
  readonly #bytes: Uint8Array;
  #at = 0;

  constructor(bytes: Uint8Array) {
    this.#bytes = bytes;
    this.#view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }
  #need(n: number): number {
    if (this.#at + n > this.#bytes.length) throw new HeaderTooShort(this.#at + n);
    const at = this.#at;
    this.#at += n;
    return at;
  }
  u8(): number {
    return this.#view.getUint8(this.#need(1));
  }
  u32(): number {
    return this.#view.getUint32(this.#need(4), true);
  }
  i32(): number {
    return this.#view.getInt32(this.#need(4), true);
  }
  u64(): bigint {
    return this.#view.getBigUint64(this.#need(8), true);
  }
  count(what: string, bytesEach = 1): number {
    const n = this.u64();
    // Every element takes at least `bytesEach`, so the header reaches at least this far: a caller
    // reading a file's first bytes reads that much more, and a count past the file is a corrupt one
    // (checked before anything is allocated for it: a hostile count must not size an array).
    const end = BigInt(this.#at) + n * BigInt(bytesEach);
    if (end > BigInt(this.#bytes.length)) throw new HeaderTooShort(end > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(end), what);
    return Number(n);
  }
  string(): string {
    const n = this.count('a string');
    const at = this.#need(n);
    return Buffer.from(this.#bytes.buffer, this.#bytes.byteOffset + at, n).toString('utf8');
  }
  get position(): number {
    return this.#at;
  }
  skip(n: number): void {
    this.#need(n);
  }
  scalar(type: number): GgufValue {
    const at = this.#need(scalarSize[type] ?? 0);
    const v = this.#view;
    switch (type) {
      case 0: return { type: 'u8', value: v.getUint8(at) };
      case 1: return { type: 'i8', value: v.getInt8(at) };
      case 2: return { type: 'u16', value: v.getUint16(at, true) };
      case 3: return { type: 'i16', value: v.getInt16(at, true) };
      case 4: return { type: 'u32', value: v.getUint32(at, true) };
      case 5: return { type: 'i32', value: v.getInt32(at, true) };
      case 6: return { type: 'f32', value: v.getFloat32(at, true) };
      case 7: return { type: 'bool', value: v.getUint8(at) !== 0 };
      case 10: return { type: 'u64', value: v.getBigUint64(at, true) };
      case 11: return { type: 'i64', value: v.getBigInt64(at, true) };
      case 12: return { type: 'f64', value: v.getFloat64(at, true) };
      default: throw new LlmgwError('LLMGW_GGUF_FORMAT', `GGUF value type ${type} is not one gguf.h defines (0-12)`);
    }
  }
}

/** The bytes given end inside the header; `needBytes` says how far a caller should read to retry. */
export class HeaderTooShort extends LlmgwError {
  readonly needBytes: number;
  constructor(needBytes: number, what = 'the header') {
    super('LLMGW_GGUF_FORMAT', `the GGUF ends inside ${what} (needs at least ${needBytes} bytes)`);
    this.needBytes = needBytes;
  }
}

function readValue(src: Source, type: number): GgufValue {
  if (type === typeIds.string) return { type: 'string', value: src.string() };
  if (type !== typeIds.array) return src.scalar(type);
  const of = src.u32();
  // gguf.cpp refuses arrays of arrays too; refusing them here also bounds the recursion, which a
  // file of nested array headers would otherwise drive until the stack overflows.
  if (of === typeIds.array) throw new LlmgwError('LLMGW_GGUF_FORMAT', 'a GGUF metadata value is an array of arrays, which gguf.h does not allow');
  const size = scalarSize[of];
  if (of !== typeIds.string && size === undefined) throw new LlmgwError('LLMGW_GGUF_FORMAT', `a GGUF array holds value type ${of}, not one gguf.h defines (0-12)`);
  // A string is at least its 8-byte length.
  const n = src.count('an array', of === typeIds.string ? 8 : (size ?? 1));
  if (of === typeIds.string) {
    const out: string[] = new Array<string>(n);
    for (let i = 0; i < n; i++) out[i] = src.string();
    return { type: 'array', of: 'string', value: out };
  }
  if (of === typeIds.i32) {
    const out = new Int32Array(n);
    for (let i = 0; i < n; i++) out[i] = src.i32();
    return { type: 'array', of: 'i32', value: out };
  }
  // Arrays the tokenizer does not need (scores, per-layer counts) are stepped over, not kept.
  src.skip(n * (size ?? 1));
  return { type: 'array', of: 'other', count: n };
}

/** Reads a GGUF's header from its first bytes; throws HeaderTooShort when they end before it does. */
export function readGgufHeader(bytes: Uint8Array): GgufHeader {
  const src = new Source(bytes);
  const magic = src.u32();
  if (magic !== MAGIC) throw new LlmgwError('LLMGW_GGUF_FORMAT', `not a GGUF file: it starts with 0x${magic.toString(16).padStart(8, '0')}, not "GGUF"`);
  const version = src.u32();
  if (version !== 2 && version !== VERSION) throw new LlmgwError('LLMGW_GGUF_FORMAT', `GGUF version ${version}; this reader knows 2 and 3`);
  const tensorCount = src.count('the tensor count', 24); // name length, dimension count, type, offset
  const kvCount = src.count('the metadata count', 13); // key length, value type, a byte of value
  const metadata = new Map<string, GgufValue>();
  for (let i = 0; i < kvCount; i++) {
    const key = src.string();
    // The engine refuses a file with a key twice; which of the two we kept would be a guess.
    if (metadata.has(key)) throw new LlmgwError('LLMGW_GGUF_FORMAT', `GGUF metadata key ${JSON.stringify(key)} appears twice; the file is corrupt`);
    metadata.set(key, readValue(src, src.u32()));
  }
  const tensors: GgufTensorInfo[] = [];
  for (let i = 0; i < tensorCount; i++) {
    const name = src.string();
    const n = src.u32();
    if (n > MAX_DIMS) throw new LlmgwError('LLMGW_GGUF_FORMAT', `GGUF tensor ${JSON.stringify(name)} has ${n} dimensions; ggml allows at most ${MAX_DIMS}`);
    const dims: bigint[] = [];
    for (let d = 0; d < n; d++) dims.push(src.u64());
    tensors.push({ name, dims, ggmlType: src.u32(), offset: src.u64() });
  }
  const align = metadata.get('general.alignment');
  const alignment = align?.type === 'u32' ? align.value : DEFAULT_ALIGNMENT;
  if (alignment === 0 || (alignment & (alignment - 1)) !== 0) throw new LlmgwError('LLMGW_GGUF_FORMAT', `GGUF general.alignment is ${alignment}, not a power of two`);
  return { version, metadata, tensors, dataOffset: Math.ceil(src.position / alignment) * alignment };
}
