// Decoder of vLLM's KV event batches (untrusted input off the wire), both wire formats.
//
// The batch is always a positional array [ts, events, data_parallel_rank] (2 elements in v0.9.0).
// Events are tagged maps since v0.24 and positional arrays before, with one more field per
// release (arity table in shared/specs/vllm-kv-events.md §2.4). A decoder that assumed one shape
// would drop every event of the other silently, so we read both and treat a missing field as None.
// Input is untrusted: anything malformed is a {ok:false, reason}, never an exception, because the
// subscriber must keep reading the stream after a bad batch.
import { DecodeError, Decoder } from '@msgpack/msgpack';
import { BLOCK_REMOVED_FIELDS, BLOCK_STORED_FIELDS, REMOVED_ARITY_MAX, STORED_ARITY_MAX } from './events.js';
import type { BlockRemoved, BlockStored, EventBatch, KvEvent, WireBlockHash } from './events.js';
import { msgpackShapeProblem } from './msgpack-shape.js';

/** The outcome of decoding one payload; `skipped` counts unknown event types and unknown fields. */
export type DecodeResult = { ok: true; batch: EventBatch; skipped: number } | { ok: false; reason: string };

// Bounds well above anything vLLM sends (a batch is one engine step), so garbage cannot make the
// decoder allocate for a length header it will never fill.
const decoder = new Decoder({
  useBigInt64: true,
  maxStrLength: 1 << 20,
  maxBinLength: 1 << 20,
  maxArrayLength: 1 << 24,
  maxMapLength: 1 << 10,
  maxExtLength: 0,
});

class Malformed extends Error {}

function fail(reason: string): never {
  throw new Malformed(reason);
}

const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array);

function hashOf(v: unknown, where: string): WireBlockHash {
  // Hashes of v0.9-v0.10.1 (Python's builtin hash()) can be negative int64: keep them as the same
  // 64 bits unsigned, so one engine's keys always live in one key space.
  if (typeof v === 'bigint') return BigInt.asUintN(64, v);
  if (typeof v === 'number' && Number.isSafeInteger(v)) return BigInt.asUintN(64, BigInt(v));
  // The decoder hands out views into the frame; copy so a 32-byte hash does not pin the payload.
  if (v instanceof Uint8Array) return new Uint8Array(v);
  return fail(`${where}: ${describe(v)} is not a block hash (uint64 or bytes)`);
}

function hashesOf(v: unknown, where: string): WireBlockHash[] {
  if (!Array.isArray(v)) return fail(`${where}: ${describe(v)} is not a list of block hashes`);
  const out: WireBlockHash[] = new Array<WireBlockHash>(v.length);
  for (let i = 0; i < v.length; i++) out[i] = hashOf(v[i], `${where}[${i}]`);
  return out;
}

function tokensOf(v: unknown, where: string): number[] {
  if (!Array.isArray(v)) return fail(`${where}: ${describe(v)} is not a list of token ids`);
  for (let i = 0; i < v.length; i++) {
    const t: unknown = v[i];
    if (typeof t !== 'number' || t >>> 0 !== t) fail(`${where}[${i}]: ${describe(t)} is not a token id`);
  }
  return v as number[];
}

function intOrNull(v: unknown, where: string): number | null {
  if (v === null || v === undefined) return null;
  if (typeof v === 'number' && Number.isSafeInteger(v)) return v;
  return fail(`${where}: ${describe(v)} is not an int or None`);
}

function strOrNull(v: unknown, where: string): string | null {
  if (v === null || v === undefined) return null;
  if (typeof v === 'string') return v;
  return fail(`${where}: ${describe(v)} is not a str or None`);
}

function extraKeysOf(v: unknown, where: string): (unknown[] | null)[] | null {
  if (v === null || v === undefined) return null;
  if (!Array.isArray(v)) return fail(`${where}: ${describe(v)} is not a list of extra-key tuples`);
  for (let i = 0; i < v.length; i++) {
    const e: unknown = v[i];
    if (e !== null && !Array.isArray(e)) fail(`${where}[${i}]: ${describe(e)} is not a tuple or None`);
  }
  return v as (unknown[] | null)[];
}

function describe(v: unknown): string {
  if (v === null) return 'None';
  if (v instanceof Uint8Array) return `bytes(${v.length})`;
  if (Array.isArray(v)) return `a list of ${v.length}`;
  if (typeof v === 'object') return 'a map';
  if (typeof v === 'string') return JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v);
  return `${typeof v} ${String(v)}`;
}

function required(v: unknown, field: string, where: string): unknown {
  if (v === undefined) fail(`${where}: required field ${field} is missing`);
  return v;
}

function blockSizeOf(v: unknown, where: string): number {
  if (typeof v === 'number' && v >>> 0 === v) return v;
  return fail(`${where}.block_size: ${describe(v)} is not a non-negative int`);
}

// Positional: [tag, block_hashes, parent, token_ids, block_size, lora_id, medium, lora_name,
// extra_keys, group_idx, kv_cache_spec_kind, kv_cache_spec_sliding_window]; 6 to 12 elements by version.
const STORED_ARITY_MIN = 6;
const REMOVED_ARITY_MIN = 2;

function storedFromArray(a: unknown[], where: string): BlockStored {
  if (a.length < STORED_ARITY_MIN) fail(`${where}: BlockStored has ${a.length} elements; want ${STORED_ARITY_MIN} to ${STORED_ARITY_MAX}`);
  return {
    type: 'BlockStored',
    blockHashes: hashesOf(a[1], `${where}.block_hashes`),
    parentBlockHash: a[2] === null ? null : hashOf(a[2], `${where}.parent_block_hash`),
    tokenIds: tokensOf(a[3], `${where}.token_ids`),
    blockSize: blockSizeOf(a[4], where),
    loraId: intOrNull(a[5], `${where}.lora_id`),
    medium: strOrNull(a[6], `${where}.medium`),
    loraName: strOrNull(a[7], `${where}.lora_name`),
    extraKeys: extraKeysOf(a[8], `${where}.extra_keys`),
    groupIdx: intOrNull(a[9], `${where}.group_idx`),
    kvCacheSpecKind: strOrNull(a[10], `${where}.kv_cache_spec_kind`),
    kvCacheSpecSlidingWindow: intOrNull(a[11], `${where}.kv_cache_spec_sliding_window`),
    locality: null,
  };
}

function removedFromArray(a: unknown[], where: string): BlockRemoved {
  if (a.length < REMOVED_ARITY_MIN) fail(`${where}: BlockRemoved has ${a.length} elements; want ${REMOVED_ARITY_MIN} to ${REMOVED_ARITY_MAX}`);
  return {
    type: 'BlockRemoved',
    blockHashes: hashesOf(a[1], `${where}.block_hashes`),
    medium: strOrNull(a[2], `${where}.medium`),
    groupIdx: intOrNull(a[3], `${where}.group_idx`),
    locality: null,
  };
}

const STORED_KEYS = new Set<string>(['type', ...BLOCK_STORED_FIELDS]);
const REMOVED_KEYS = new Set<string>(['type', ...BLOCK_REMOVED_FIELDS]);

function unknownKeys(m: Record<string, unknown>, known: ReadonlySet<string>): number {
  let n = 0;
  for (const k in m) if (!known.has(k)) n++;
  return n;
}

function storedFromMap(m: Record<string, unknown>, where: string): BlockStored {
  const parent = m.parent_block_hash;
  return {
    type: 'BlockStored',
    blockHashes: hashesOf(required(m.block_hashes, 'block_hashes', where), `${where}.block_hashes`),
    parentBlockHash: parent === null || parent === undefined ? null : hashOf(parent, `${where}.parent_block_hash`),
    tokenIds: tokensOf(required(m.token_ids, 'token_ids', where), `${where}.token_ids`),
    blockSize: blockSizeOf(required(m.block_size, 'block_size', where), where),
    loraId: intOrNull(m.lora_id, `${where}.lora_id`),
    medium: strOrNull(m.medium, `${where}.medium`),
    loraName: strOrNull(m.lora_name, `${where}.lora_name`),
    extraKeys: extraKeysOf(m.extra_keys, `${where}.extra_keys`),
    groupIdx: intOrNull(m.group_idx, `${where}.group_idx`),
    kvCacheSpecKind: strOrNull(m.kv_cache_spec_kind, `${where}.kv_cache_spec_kind`),
    kvCacheSpecSlidingWindow: intOrNull(m.kv_cache_spec_sliding_window, `${where}.kv_cache_spec_sliding_window`),
    locality: strOrNull(m.locality, `${where}.locality`),
  };
}

function removedFromMap(m: Record<string, unknown>, where: string): BlockRemoved {
  return {
    type: 'BlockRemoved',
    blockHashes: hashesOf(required(m.block_hashes, 'block_hashes', where), `${where}.block_hashes`),
    medium: strOrNull(m.medium, `${where}.medium`),
    groupIdx: intOrNull(m.group_idx, `${where}.group_idx`),
    locality: strOrNull(m.locality, `${where}.locality`),
  };
}

/** One event, or null for an event type we do not know (newer vLLM): skipped, counted by the caller. */
function eventOf(e: unknown, where: string, skipped: { n: number }): KvEvent | null {
  if (Array.isArray(e)) {
    const tag: unknown = e[0];
    if (typeof tag !== 'string') return fail(`${where}: event tag ${describe(tag)} is not a str`);
    switch (tag) {
      case 'BlockStored':
        skipped.n += Math.max(0, e.length - STORED_ARITY_MAX);
        return storedFromArray(e, where);
      case 'BlockRemoved':
        skipped.n += Math.max(0, e.length - REMOVED_ARITY_MAX);
        return removedFromArray(e, where);
      case 'AllBlocksCleared':
        skipped.n += Math.max(0, e.length - 1);
        return { type: 'AllBlocksCleared' };
      default:
        return null;
    }
  }
  if (isRecord(e)) {
    const tag = e.type;
    if (typeof tag !== 'string') return fail(`${where}: event "type" ${describe(tag)} is not a str`);
    switch (tag) {
      case 'BlockStored':
        skipped.n += unknownKeys(e, STORED_KEYS);
        return storedFromMap(e, where);
      case 'BlockRemoved':
        skipped.n += unknownKeys(e, REMOVED_KEYS);
        return removedFromMap(e, where);
      case 'AllBlocksCleared':
        skipped.n += unknownKeys(e, new Set(['type']));
        return { type: 'AllBlocksCleared' };
      default:
        return null;
    }
  }
  return fail(`${where}: ${describe(e)} is neither a tagged map nor a tagged array`);
}

/** Decodes one KV event payload of any vLLM version; never throws. */
export function decodeEventBatch(bytes: Uint8Array): DecodeResult {
  try {
    const shape = msgpackShapeProblem(bytes);
    if (shape !== undefined) return { ok: false, reason: `not msgpack: ${shape}` };
    let top: unknown;
    try {
      top = decoder.decode(bytes);
    } catch (e) {
      // DecodeError (bad type byte, limits) and RangeError (truncated, trailing bytes) are the
      // decoder's ways of saying "not msgpack"; anything else is a bug worth seeing.
      if (e instanceof DecodeError || e instanceof RangeError) return { ok: false, reason: `not msgpack: ${e.message}` };
      throw e;
    }
    if (!Array.isArray(top)) return { ok: false, reason: `batch: ${describe(top)} is not [ts, events, data_parallel_rank]` };
    if (top.length < 2) return { ok: false, reason: `batch: ${top.length} elements; want 2 or 3 [ts, events, data_parallel_rank]` };
    const ts: unknown = top[0];
    if (typeof ts !== 'number') return { ok: false, reason: `batch.ts: ${describe(ts)} is not a float` };
    const events: unknown = top[1];
    if (!Array.isArray(events)) return { ok: false, reason: `batch.events: ${describe(events)} is not a list` };
    const skipped = { n: Math.max(0, top.length - 3) };
    const rank = intOrNull(top[2], 'batch.data_parallel_rank');
    const out: KvEvent[] = [];
    for (let i = 0; i < events.length; i++) {
      const ev = eventOf(events[i], `events[${i}]`, skipped);
      if (ev === null) skipped.n++;
      else out.push(ev);
    }
    return { ok: true, batch: { ts, events: out, dataParallelRank: rank }, skipped: skipped.n };
  } catch (e) {
    if (e instanceof Malformed) return { ok: false, reason: e.message };
    throw e;
  }
}
