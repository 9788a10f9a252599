import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import { encode } from '@msgpack/msgpack';
import {
  blockRemoved,
  blockStored,
  decodeEventBatch,
  encodeEventBatch,
  type EventBatch,
  type EventFormat,
  type KvEvent,
  type WireBlockHash,
} from '../../src/kv/index.js';
import { hex, readVector, toHex } from './golden.js';

interface Frames {
  versions: Record<
    string,
    {
      encode_only: { i: number | string; what: string; payload_hex: string; decoded: unknown }[];
      zmq: {
        live: { what: string; frames_hex: string[]; seq: number; decoded_payload: unknown }[];
        replay_dealer: { responses: { frames_hex: string[] }[] };
        dp_rank1: { frames_hex: string[]; decoded_payload: unknown };
      };
    }
  >;
}
const frames = readVector('vllm-kv-events-frames.json') as Frames;
const formatOf: Record<string, EventFormat> = { main: 'map', 'v0.23.0': 'array' };

// --- an independent oracle: the capture's JSON (msgspec.decode output) in our shape ---
function hashFromJson(h: unknown): WireBlockHash {
  if (typeof h === 'number' || typeof h === 'string') return BigInt(h);
  if (typeof h === 'object' && h !== null && 'bytes_hex' in h && typeof h.bytes_hex === 'string') return hex(h.bytes_hex);
  throw new Error(`not a hash: ${JSON.stringify(h)}`);
}
const orNull = <T>(x: unknown): T | null => (x === undefined || x === null ? null : (x as T));
function eventFromJson(e: unknown): KvEvent {
  let m: Record<string, unknown>;
  if (Array.isArray(e)) {
    const [tag, ...rest] = e as unknown[];
    const names =
      tag === 'BlockStored'
        ? ['block_hashes', 'parent_block_hash', 'token_ids', 'block_size', 'lora_id', 'medium', 'lora_name', 'extra_keys', 'group_idx', 'kv_cache_spec_kind', 'kv_cache_spec_sliding_window']
        : ['block_hashes', 'medium', 'group_idx'];
    m = { type: tag };
    names.forEach((n, i) => (m[n] = rest[i]));
  } else m = e as Record<string, unknown>;
  if (m.type === 'AllBlocksCleared') return { type: 'AllBlocksCleared' };
  const hashes = (m.block_hashes as unknown[]).map(hashFromJson);
  if (m.type === 'BlockRemoved') {
    return { type: 'BlockRemoved', blockHashes: hashes, medium: orNull(m.medium), groupIdx: orNull(m.group_idx), locality: orNull(m.locality) };
  }
  return {
    type: 'BlockStored',
    blockHashes: hashes,
    parentBlockHash: m.parent_block_hash === null ? null : hashFromJson(m.parent_block_hash),
    tokenIds: m.token_ids as number[],
    blockSize: m.block_size as number,
    loraId: orNull(m.lora_id),
    medium: orNull(m.medium),
    loraName: orNull(m.lora_name),
    extraKeys: orNull(m.extra_keys),
    groupIdx: orNull(m.group_idx),
    kvCacheSpecKind: orNull(m.kv_cache_spec_kind),
    kvCacheSpecSlidingWindow: orNull(m.kv_cache_spec_sliding_window),
    locality: orNull(m.locality),
  };
}
function batchFromJson(d: unknown): EventBatch {
  const [ts, events, rank] = d as [number, unknown[], number | null];
  return { ts, events: events.map(eventFromJson), dataParallelRank: rank };
}

function decodeOk(bytes: Uint8Array): { batch: EventBatch; skipped: number } {
  const r = decodeEventBatch(bytes);
  assert.ok(r.ok, r.ok ? '' : r.reason);
  return r;
}

for (const [version, v] of Object.entries(frames.versions)) {
  const eventFormat = formatOf[version];
  assert.ok(eventFormat, `no format for captured version ${version}`);
  for (const c of v.encode_only) {
    void test(`captured ${version} #${c.i} (${c.what}): decodes to what msgspec decoded, re-encodes to the same bytes`, () => {
      const payload = hex(c.payload_hex);
      const r = decodeOk(payload);
      assert.equal(r.skipped, 0);
      assert.deepEqual(r.batch, batchFromJson(c.decoded));
      assert.equal(toHex(encodeEventBatch(r.batch, { eventFormat })), c.payload_hex);
    });
  }
  void test(`captured ${version} live, replay and DP-rank-1 frames: every payload round-trips byte for byte`, () => {
    const payloads = [
      ...v.zmq.live.map((l) => l.frames_hex[2]),
      ...v.zmq.replay_dealer.responses.map((r) => r.frames_hex[r.frames_hex.length - 1]).filter((p) => p !== ''),
      v.zmq.dp_rank1.frames_hex[2],
    ];
    for (const p of payloads) {
      assert.ok(p !== undefined);
      const r = decodeOk(hex(p));
      assert.equal(toHex(encodeEventBatch(r.batch, { eventFormat })), p);
    }
    for (const l of v.zmq.live) assert.deepEqual(decodeOk(hex(l.frames_hex[2] ?? '')).batch, batchFromJson(l.decoded_payload));
  });
}

void test('uint64 hashes decode as BigInt without losing bits; token ids stay Numbers', () => {
  const big = 0xffff_ffff_ffff_fff1n;
  const bytes = encodeEventBatch(
    { ts: 1, events: [blockStored({ blockHashes: [big, 5n], parentBlockHash: 2n ** 53n + 1n, tokenIds: [70000, 1], blockSize: 1 })], dataParallelRank: 0 },
    { eventFormat: 'map' },
  );
  const e = decodeOk(bytes).batch.events[0];
  assert.ok(e?.type === 'BlockStored');
  assert.deepEqual(e.blockHashes, [big, 5n], 'a small hash int is a BigInt too');
  assert.equal(e.parentBlockHash, 2n ** 53n + 1n);
  assert.deepEqual(e.tokenIds, [70000, 1]);
});

// Positional arities by version (spec §2.4): each one decodes, missing fields are None.
const ts = 1767225600.5;
const stored = ['BlockStored', [7n], 6n, [1, 2], 2, 3, 'GPU', 'lora', [['lora']], 1, 'sliding_window', 512];
const storedArities = [
  { arity: 6, versions: 'v0.9.0-v0.10.1' },
  { arity: 7, versions: 'v0.10.2-v0.13' },
  { arity: 8, versions: 'v0.14-v0.16' },
  { arity: 9, versions: 'v0.17-v0.19' },
  { arity: 10, versions: 'v0.20-v0.21' },
  { arity: 12, versions: 'v0.22-v0.23' },
];
for (const a of storedArities) {
  void test(`positional BlockStored of ${a.versions} (${a.arity} elements) decodes, later fields None`, () => {
    const e = decodeOk(encode([ts, [stored.slice(0, a.arity)], 0], { useBigInt64: true })).batch.events[0];
    const full = [7n, 6n, [1, 2], 2, 3, 'GPU', 'lora', [['lora']], 1, 'sliding_window', 512];
    const want = full.map((x, i) => (i < a.arity - 1 ? x : null));
    assert.deepEqual(e, {
      type: 'BlockStored',
      blockHashes: [want[0]],
      parentBlockHash: want[1],
      tokenIds: want[2],
      blockSize: want[3],
      loraId: want[4],
      medium: want[5],
      loraName: want[6],
      extraKeys: want[7],
      groupIdx: want[8],
      kvCacheSpecKind: want[9],
      kvCacheSpecSlidingWindow: want[10],
      locality: null,
    });
  });
}
for (const a of [
  { arity: 2, versions: '<= v0.10.1' },
  { arity: 3, versions: 'v0.10.2-v0.19' },
  { arity: 4, versions: 'v0.20-v0.23' },
]) {
  void test(`positional BlockRemoved of ${a.versions} (${a.arity} elements) decodes`, () => {
    const e = decodeOk(encode([ts, [['BlockRemoved', [9n], 'GPU', 0].slice(0, a.arity)], 0], { useBigInt64: true })).batch.events[0];
    assert.deepEqual(e, { type: 'BlockRemoved', blockHashes: [9n], medium: a.arity > 2 ? 'GPU' : null, groupIdx: a.arity > 3 ? 0 : null, locality: null });
  });
}

void test("v0.9.0's 2-element batch [ts, events] decodes with no rank", () => {
  const r = decodeOk(encode([ts, [['AllBlocksCleared']]]));
  assert.deepEqual(r.batch, { ts, events: [{ type: 'AllBlocksCleared' }], dataParallelRank: null });
});

void test('offload placeholder: token_ids [] and block_size 0 with medium CPU and locality', () => {
  const b: EventBatch = {
    ts,
    events: [blockStored({ blockHashes: [3n], parentBlockHash: null, tokenIds: [], blockSize: 0, medium: 'CPU', locality: 'LOCAL', groupIdx: 0 })],
    dataParallelRank: 0,
  };
  assert.deepEqual(decodeOk(encodeEventBatch(b, { eventFormat: 'map' })).batch, b);
});

void test('an unknown event type is skipped and counted; the known events still decode', () => {
  const r = decodeOk(encode([ts, [{ type: 'BlockPinned', block_hashes: [1] }, ['FutureThing', 1], ['AllBlocksCleared']], 0]));
  assert.equal(r.skipped, 2);
  assert.deepEqual(r.batch.events, [{ type: 'AllBlocksCleared' }]);
});

void test('unknown map fields and extra positional fields are skipped and counted', () => {
  const r = decodeOk(
    encode([ts, [{ type: 'BlockRemoved', block_hashes: [1], medium: 'GPU', pinned: true, owner: 'x' }, ['BlockRemoved', [2], 'GPU', 0, 'extra']], 0]),
  );
  assert.equal(r.skipped, 3);
  assert.deepEqual(
    r.batch.events.map((e) => (e.type === 'BlockRemoved' ? e.blockHashes : [])),
    [[1n], [2n]],
  );
});

const good = hex(frames.versions.main?.encode_only[0]?.payload_hex ?? '');
const malformed: { why: string; bytes: Uint8Array; reason: RegExp }[] = [
  { why: 'empty payload', bytes: new Uint8Array(0), reason: /not msgpack/ },
  { why: 'truncated msgpack', bytes: good.subarray(0, good.length - 7), reason: /not msgpack/ },
  { why: 'trailing bytes after the batch', bytes: Uint8Array.of(...good, 0xc0), reason: /not msgpack/ },
  { why: 'batch is a map', bytes: encode({ ts: 1 }), reason: /not \[ts, events/ },
  { why: 'batch of one element', bytes: encode([1.5]), reason: /1 elements/ },
  { why: 'ts is a string', bytes: encode(['now', [], 0]), reason: /batch.ts/ },
  { why: 'events is not a list', bytes: encode([1.5, 7, 0]), reason: /batch.events/ },
  { why: 'rank is a string', bytes: encode([1.5, [], 'zero']), reason: /data_parallel_rank/ },
  { why: 'event is a number', bytes: encode([1.5, [5], 0]), reason: /neither a tagged map/ },
  { why: 'tag is a number', bytes: encode([1.5, [[5]], 0]), reason: /tag/ },
  { why: 'hash is a string', bytes: encode([1.5, [['BlockRemoved', ['abc'], 'GPU']], 0]), reason: /block_hashes\[0\]/ },
  { why: 'hash is a float', bytes: encode([1.5, [['BlockRemoved', [1.5], 'GPU']], 0]), reason: /block_hashes\[0\]/ },
  { why: 'token id negative', bytes: encode([1.5, [['BlockStored', [1], null, [-1], 1, null]], 0]), reason: /token_ids\[0\]/ },
  { why: 'block_size a string', bytes: encode([1.5, [{ type: 'BlockStored', block_hashes: [1], token_ids: [], block_size: '16' }], 0]), reason: /block_size/ },
  { why: 'required block_hashes missing in a map', bytes: encode([1.5, [{ type: 'BlockRemoved', medium: 'GPU' }], 0]), reason: /block_hashes is missing/ },
  { why: 'BlockStored array too short', bytes: encode([1.5, [['BlockStored', [1], null]], 0]), reason: /3 elements/ },
  { why: 'medium an int', bytes: encode([1.5, [['BlockRemoved', [1], 5]], 0]), reason: /medium/ },
  { why: 'extra_keys entry a str', bytes: encode([1.5, [{ type: 'BlockStored', block_hashes: [1], token_ids: [1], block_size: 1, extra_keys: ['x'] }], 0]), reason: /extra_keys\[0\]/ },
  { why: 'msgpack ext type', bytes: Uint8Array.of(0x93, 0xd4, 0x01, 0x00, 0x90, 0x00), reason: /not msgpack/ },
  { why: 'reserved byte 0xc1', bytes: Uint8Array.of(0xc1), reason: /not msgpack/ },
  { why: 'array header claiming 4 billion elements', bytes: Uint8Array.of(0xdd, 0xff, 0xff, 0xff, 0xff), reason: /not msgpack/ },
];
for (const m of malformed) {
  void test(`malformed payload rejected with a reason, not thrown: ${m.why}`, () => {
    const r = decodeEventBatch(m.bytes);
    assert.equal(r.ok, false);
    assert.match(r.ok ? '' : r.reason, m.reason);
  });
}

void test('every truncation of a real payload is rejected, none throws', () => {
  for (let n = 0; n < good.length; n++) assert.equal(decodeEventBatch(good.subarray(0, n)).ok, false, `prefix of ${n} bytes`);
});

void test('10 MB of garbage is rejected without throwing', () => {
  let x = 0x2545f491;
  const garbage = new Uint8Array(10 * 1024 * 1024);
  for (let i = 0; i < garbage.length; i++) {
    // xorshift32: deterministic, so a failure reproduces
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    garbage[i] = x & 0xff;
  }
  for (const start of [0x93, 0x92, 0xdd, 0x00]) {
    garbage[0] = start;
    assert.equal(decodeEventBatch(garbage).ok, false);
  }
});

// Repeated container headers nest millions deep: the decoder's own stack took 12 s on 0x93 and
// ran out of heap on 0xdc, which would have killed the agent. Each is refused by the pre-scan.
for (const byte of [0x93, 0x9f, 0xdc, 0xdd, 0xde, 0x81]) {
  void test(`10 MB of 0x${byte.toString(16)} (nested container headers) is refused, not decoded`, () => {
    const r = decodeEventBatch(new Uint8Array(10 * 1024 * 1024).fill(byte));
    assert.equal(r.ok, false);
    assert.match(r.ok ? '' : r.reason, /nested deeper|claims \d+ items/);
  });
}

void test('trailing bytes after a batch are refused', () => {
  const r = decodeEventBatch(Uint8Array.from([...good, 0xc0]));
  assert.equal(r.ok, false);
});

const everything: EventBatch = {
  ts: 1767225600.25,
  events: [
    blockStored({
      blockHashes: [0xd98074b16d61bb6en, 1n, hex('a0270dfc9091359e8cbe481316ad4451f8e8a72f3e3876b1d98074b16d61bb6e')],
      parentBlockHash: 300n,
      tokenIds: [0, 127, 128, 255, 256, 65535, 65536, 151_000],
      blockSize: 16,
      loraId: 1,
      loraName: 'sql-lora',
      extraKeys: [['sql-lora', 'tenant-a'], null, [['img', -11]]],
      groupIdx: 0,
      kvCacheSpecKind: 'sliding_window',
      kvCacheSpecSlidingWindow: 4096,
      locality: 'REMOTE',
    }),
    blockRemoved({ blockHashes: [2n ** 64n - 1n, 2n ** 32n], medium: 'CPU', groupIdx: 1 }),
    { type: 'AllBlocksCleared' },
  ],
  dataParallelRank: 3,
};

const python = '/usr/bin/python3';
void test("cross-check: Debian's python3-msgpack reads our encoding as the same structure", { skip: !existsSync(python) }, () => {
  for (const eventFormat of ['map', 'array'] as const) {
    const bytes = encodeEventBatch(everything, { eventFormat });
    const script = [
      'import sys, json, msgpack',
      'def conv(x):',
      '    if isinstance(x, bytes): return {"bytes_hex": x.hex()}',
      '    if isinstance(x, int) and not isinstance(x, bool) and abs(x) >= 2**53: return str(x)',
      '    if isinstance(x, list): return [conv(y) for y in x]',
      '    if isinstance(x, dict): return {k: conv(v) for k, v in x.items()}',
      '    return x',
      'print(json.dumps(conv(msgpack.unpackb(sys.stdin.buffer.read(), raw=False))))',
    ].join('\n');
    const r = spawnSync(python, ['-c', script], { input: bytes, timeout: 10_000, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    const want = structuredClone(everything);
    if (eventFormat === 'array') (want.events[0] as { locality: string | null }).locality = null;
    assert.deepEqual(batchFromJson(JSON.parse(r.stdout)), want);
  }
});

void test('encoding writes ts as float64 even when integral, and smallest int forms', () => {
  const bytes = encodeEventBatch({ ts: 5, events: [blockRemoved({ blockHashes: [0x80n, 0x100n, 0x10000n, 0x100000000n] })], dataParallelRank: 0 }, { eventFormat: 'array' });
  assert.equal(
    toHex(bytes),
    '93' + 'cb4014000000000000' + '91' + '94' + 'ac' + Buffer.from('BlockRemoved').toString('hex') + '94cc80cd0100ce00010000cf0000000100000000' + 'a3475055' + 'c0' + '00',
  );
});

void test('mutated real payloads (random byte flips) are decoded or rejected, never thrown', () => {
  const payloads = Object.values(frames.versions).flatMap((v) => v.encode_only.map((e) => hex(e.payload_hex)));
  let x = 0x1234567;
  const rnd = (n: number): number => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) % n;
  };
  for (let i = 0; i < 5000; i++) {
    const p = new Uint8Array(payloads[rnd(payloads.length)] ?? []);
    for (let j = 0, flips = 1 + rnd(4); j < flips; j++) p[rnd(p.length)] = rnd(256);
    const r = decodeEventBatch(p);
    assert.equal(typeof r.ok, 'boolean');
  }
});
