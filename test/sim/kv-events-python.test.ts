// The sim's KV events, decoded by an independent implementation: Debian's python3-zmq and
// python3-msgpack read the wire, and python3-cbor2 + hashlib recompute every block hash from the
// token ids. Our own codec never touches what is checked here, so a byte that differs from what
// vLLM sends fails this test, not just a round-trip through our code.
import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { startSim } from '../../src/sim/index.js';
import type { SimHandle } from '../../src/sim/index.js';
import { freePort, waitFor } from '../support/wait.js';

const subscriber = String.raw`
import sys, json, hashlib, zmq, msgpack, cbor2
sub_ep, replay_ep, seed, topic = sys.argv[1:5]
ctx = zmq.Context()
sub = ctx.socket(zmq.SUB)
sub.setsockopt(zmq.SUBSCRIBE, topic.encode())
sub.bind(sub_ep)
print(json.dumps({"ready": True}), flush=True)
live = []
poller = zmq.Poller()
poller.register(sub, zmq.POLLIN)
poller.register(sys.stdin, zmq.POLLIN)
while True:
    got = dict(poller.poll(20000))
    if not got:
        sys.exit("no instruction within 20 s")
    if sub in got:
        live.append(sub.recv_multipart())
    elif sys.stdin in got or sys.stdin.fileno() in got:
        sys.stdin.readline()
        break
while sub.poll(200):
    live.append(sub.recv_multipart())
dealer = ctx.socket(zmq.DEALER)
dealer.connect(replay_ep)
dealer.send_multipart([b"", (0).to_bytes(8, "big")])
replay = []
end = None
while end is None:
    if not dealer.poll(5000):
        sys.exit("replay timed out")
    f = dealer.recv_multipart()
    if f[-2] == b"\xff" * 8:
        end = f
    else:
        replay.append(f)

STORED = ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name",
          "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window", "locality"]
REMOVED = ["block_hashes", "medium", "group_idx", "locality"]
def as_map(ev):
    # vLLM <= v0.23 sends events as positional arrays, tag first; name the fields to check them alike.
    if isinstance(ev, dict):
        return ev
    names = {"BlockStored": STORED, "BlockRemoved": REMOVED, "AllBlocksCleared": []}[ev[0]]
    return {"type": ev[0], **dict(zip(names, ev[1:]))}

def jsonable(v):
    if isinstance(v, bytes):
        return {"bytes": v.hex()}
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: jsonable(x) for k, x in v.items()}
    return v

none_hash = hashlib.sha256(cbor2.dumps(seed, canonical=True)).digest()
digests = {}
problems = []
batches = []
for f in replay:
    if len(f) == 4:
        _, t, seq, payload = f
    else:
        t = b""
        _, seq, payload = f
    batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    ts, raw_events, rank = batch
    events = [as_map(e) for e in raw_events]
    for ev in events:
        if ev["type"] != "BlockStored":
            continue
        p = ev["parent_block_hash"]
        parent = none_hash if p is None else digests.get(p)
        if parent is None:
            problems.append("unknown parent %d" % p)
            continue
        bs = ev["block_size"]
        extra = ev.get("extra_keys") or [None] * len(ev["block_hashes"])
        for i, h in enumerate(ev["block_hashes"]):
            toks = tuple(ev["token_ids"][i * bs:(i + 1) * bs])
            ek = extra[i]
            d = hashlib.sha256(cbor2.dumps((parent, toks, None if ek is None else tuple(ek)), canonical=True)).digest()
            if int.from_bytes(d[-8:], "big") != h:
                problems.append("block %d of seq %d: hash %d is not sha256_cbor of its tokens" % (i, int.from_bytes(seq, "big"), h))
            digests[h] = d
            parent = d
    batches.append({"topic": t.decode(), "seq": int.from_bytes(seq, "big"), "ts_is_float": isinstance(ts, float), "rank": rank,
                    "positional": [len(e) for e in raw_events if isinstance(e, list)], "events": jsonable(events)})
print(json.dumps({
    "batches": batches,
    "problems": problems,
    "live": [{"frames": len(f), "topic": f[0].decode(), "seq": int.from_bytes(f[1], "big"), "payload": f[2].hex()} for f in live],
    "replay_payloads": {str(int.from_bytes(f[-2], "big")): f[-1].hex() for f in replay},
    "end": [x.hex() for x in end],
}), flush=True)
`;

interface Decoded {
  batches: { topic: string; seq: number; ts_is_float: boolean; rank: number; positional: number[]; events: Record<string, unknown>[] }[];
  problems: string[];
  live: { frames: number; topic: string; seq: number; payload: string }[];
  replay_payloads: Record<string, string>;
  end: string[];
}

const range = (from: number, n: number): number[] => Array.from({ length: n }, (_, i) => from + i);

async function pythonSubscriber(t: { after(fn: () => void): void }, topic: string) {
  const [subPort, replayPort] = [await freePort(), await freePort()];
  const py = spawn('/usr/bin/python3', ['-c', subscriber, `tcp://127.0.0.1:${subPort}`, `tcp://127.0.0.1:${replayPort}`, '0', topic], { stdio: ['pipe', 'pipe', 'inherit'] });
  t.after(() => {
    py.kill('SIGKILL');
  });
  const lines = createInterface({ input: py.stdout });
  const out: string[] = [];
  lines.on('line', (l) => out.push(l));
  await waitFor(() => out.length > 0, { what: 'the Python subscriber to bind', timeoutMs: 15_000 });
  return {
    subPort,
    replayPort,
    /** Tells Python the session is over; it replays from seq 0 and prints what it decoded. */
    finish: async (): Promise<Decoded> => {
      py.stdin.write('replay\n');
      await waitFor(() => out.length > 1, { what: 'the Python decode', timeoutMs: 15_000 });
      const [code] = (await Promise.race([once(py, 'exit'), waitFor(() => py.exitCode !== null).then(() => [py.exitCode])])) as [number | null];
      assert.equal(code, 0);
      return JSON.parse(out[1] ?? '{}') as Decoded;
    },
  };
}

void test('kv events: a scripted session (fill, hit, evict, reset, LoRA + salt) decodes in Python to exactly the expected events', async (t) => {
  const { subPort, replayPort, finish } = await pythonSubscriber(t, 'kv');
  const sim: SimHandle = await startSim({
    model: 'sim-model',
    port: 0,
    tokenizer: 'bytes',
    hashSeed: '0',
    hashAlgo: 'sha256_cbor',
    blockSizeTokens: 4,
    kvCapacityBlocks: 6,
    maxModelLen: 24,
    prefillTokensPerS: 1e6,
    decodeTokensPerS: 1e4,
    loraModules: [{ name: 'sql', path: '/models/sql-lora' }],
    kvEvents: {
      enableKvCacheEvents: true,
      publisher: 'zmq',
      endpoint: `tcp://127.0.0.1:${subPort}`,
      replayEndpoint: `tcp://127.0.0.1:${replayPort}`,
      bufferSteps: 100,
      hwm: 100_000,
      maxQueueSize: 100_000,
      topic: 'kv',
    },
  });
  t.after(() => sim.close());
  await sim.ready;
  const complete = async (prompt: number[], extra: Record<string, unknown> = {}): Promise<void> => {
    const r = await fetch(`${sim.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt, max_tokens: 1, ...extra }),
      signal: AbortSignal.timeout(10_000),
    });
    assert.equal(r.status, 200, await r.text());
  };
  const a = range(1, 10);
  await complete(a); // fill: blocks A0, A1 stored
  await complete([...a.slice(0, 8), 11, 12, 13, 14, 15]); // hit A0, A1; store B2
  await complete(range(100, 20)); // needs 5 of 6 blocks: evicts B2 then A1 (LRU, tail first), stores C0..C4
  const reset = await fetch(`${sim.url}/reset_prefix_cache`, { method: 'POST', signal: AbortSignal.timeout(5000) });
  assert.equal(reset.headers.get('x-llmgw-sim-reset'), 'ok');
  await complete(range(1, 8), { model: 'sql', cache_salt: 'tenant-a' });
  await sim.eventsIdle();
  const got = await finish();

  assert.deepEqual(got.problems, [], 'every block hash is sha256 over canonical CBOR of (parent, tokens, extra keys), chained from NONE_HASH("0")');
  assert.deepEqual(got.batches.map((b) => b.seq), [0, 1, 2, 3, 4], 'one batch per step, seq from 0');
  assert.ok(got.batches.every((b) => b.topic === 'kv' && b.rank === 0 && b.ts_is_float), 'topic frame, DP rank 0 and a float ts on every batch');
  const [b0, b1, b2, b3, b4] = got.batches.map((b) => b.events);
  const stored = (e: Record<string, unknown> | undefined) => (e?.block_hashes ?? []) as string[];
  const h0 = stored(b0?.[0]);
  const h1 = stored(b1?.[0]);
  const common = { block_size: '4', lora_id: null, medium: 'GPU', lora_name: null, group_idx: '0', kv_cache_spec_kind: 'full_attention' };
  assert.deepEqual(b0, [{ type: 'BlockStored', block_hashes: h0, parent_block_hash: null, token_ids: a.slice(0, 8).map(String), ...common, extra_keys: [null, null] }]);
  assert.equal(h0.length, 2, 'only the 2 full blocks of a 10-token prompt');
  assert.deepEqual(b1, [{ type: 'BlockStored', block_hashes: h1, parent_block_hash: h0[1], token_ids: ['11', '12', '13', '14'], ...common, extra_keys: [null] }]);
  const removed = { type: 'BlockRemoved', medium: 'GPU', group_idx: '0' };
  assert.deepEqual(b2?.slice(0, 2), [
    { ...removed, block_hashes: [h1[0]] },
    { ...removed, block_hashes: [h0[1]] },
  ], 'one BlockRemoved per evicted block, the least recently freed tail first');
  assert.deepEqual(b2?.[2], { type: 'BlockStored', block_hashes: stored(b2[2]), parent_block_hash: null, token_ids: range(100, 20).map(String), ...common, extra_keys: [null, null, null, null, null] });
  assert.deepEqual(b3, [{ type: 'AllBlocksCleared' }]);
  assert.deepEqual(b4, [
    { type: 'BlockStored', block_hashes: stored(b4?.[0]), parent_block_hash: null, token_ids: range(1, 8).map(String), ...common, lora_id: '1', lora_name: 'sql', extra_keys: [['sql', 'tenant-a'], ['sql']] },
  ]);
  assert.notDeepEqual(stored(b4?.[0]), h0, 'adapter and salt make a different prefix from the same tokens');

  assert.ok(got.live.some((l) => l.seq === 4), 'the live stream carried the batches once connected');
  for (const l of got.live) {
    assert.equal(l.frames, 3, 'live messages are [topic, seq, payload]');
    assert.equal(l.topic, 'kv');
    assert.equal(l.payload, got.replay_payloads[String(l.seq)], 'a live batch and its replay are the same bytes');
  }
  assert.deepEqual(got.end, ['', '', 'ffffffffffffffff', ''], 'replay ends with vLLM v0.26 framing: empty topic, seq -1, empty payload');
});

void test('kv events: with the v0.23 encoding and legacy replay framing, Python reads positional events of 12 and 4 fields', async (t) => {
  const { subPort, replayPort, finish } = await pythonSubscriber(t, '');
  const sim = await startSim({
    model: 'sim-model',
    port: 0,
    tokenizer: 'bytes',
    hashSeed: '0',
    hashAlgo: 'sha256_cbor',
    blockSizeTokens: 4,
    kvCapacityBlocks: 3,
    maxModelLen: 12,
    prefillTokensPerS: 1e6,
    decodeTokensPerS: 1e4,
    kvEventsFormat: 'array',
    kvReplayFraming: 'legacy',
    kvEvents: { enableKvCacheEvents: true, publisher: 'zmq', endpoint: `tcp://127.0.0.1:${subPort}`, replayEndpoint: `tcp://127.0.0.1:${replayPort}`, bufferSteps: 100, hwm: 100_000, maxQueueSize: 100_000, topic: '' },
  });
  t.after(() => sim.close());
  await sim.ready;
  for (const prompt of [range(1, 9), range(50, 9)]) {
    const r = await fetch(`${sim.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt, max_tokens: 1 }), signal: AbortSignal.timeout(10_000) });
    assert.equal(r.status, 200);
  }
  await sim.eventsIdle();
  const got = await finish();
  assert.deepEqual(got.problems, []);
  assert.deepEqual(got.batches.map((b) => b.positional), [[12], [4, 4, 12]], 'BlockStored has 12 fields and BlockRemoved 4 with the tag, as in v0.22-v0.23');
  assert.deepEqual(got.batches[1]?.events.map((e) => e.type), ['BlockRemoved', 'BlockRemoved', 'BlockStored'], 'the second prompt needs all 3 blocks: both cached blocks of the first are evicted');
  assert.deepEqual(got.end, ['', 'ffffffffffffffff', ''], 'legacy replay end marker: no topic frame');
});
