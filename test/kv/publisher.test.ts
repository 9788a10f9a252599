import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { Dealer, Subscriber } from 'zeromq';
import {
  decodeEventBatch,
  KvEventPublisher,
  offsetEndpointPort,
  publisherBinds,
  type EventBatch,
  type EventFormat,
  type KvEventPublisherOptions,
  type ReplayFraming,
} from '../../src/kv/index.js';
import { hasCode } from '../../src/errors/index.js';
import { hex, readVector, toHex } from './golden.js';

interface Frames {
  versions: Record<
    string,
    {
      encode_only: { i: number | string; payload_hex: string }[];
      zmq: {
        publisher: { topic: string };
        live: { frames_hex: string[]; seq: number }[];
        replay_dealer: { request_frames_hex: string[]; start_seq: number; responses: { frames_hex: string[] }[] };
        dp_rank1: { frames_hex: string[] };
      };
    }
  >;
}
const captured = readVector('vllm-kv-events-frames.json') as Frames;
const shapes: Record<string, { eventFormat: EventFormat; replayFraming: ReplayFraming }> = {
  main: { eventFormat: 'map', replayFraming: 'topic' },
  'v0.23.0': { eventFormat: 'array', replayFraming: 'legacy' },
};

function batchOf(payloadHex: string): EventBatch {
  const r = decodeEventBatch(hex(payloadHex));
  assert.ok(r.ok, r.ok ? '' : r.reason);
  return r.batch;
}

const seq8 = (n: number): string => n.toString(16).padStart(16, '0');
const framesHex = (frames: Buffer[]): string[] => frames.map((f) => toHex(f));

/** A publisher whose batch timestamps come from `clock.ts`, closed when the test ends. */
function publisher(t: { after(fn: () => Promise<void>): void }, o: Partial<KvEventPublisherOptions> = {}) {
  const clock = { ts: 0 };
  const p = new KvEventPublisher({ endpoint: 'tcp://127.0.0.1:*', now: () => clock.ts, ...o });
  t.after(() => p.close());
  return { p, clock };
}

async function dealerTo(t: { after(fn: () => void): void }, endpoint: string): Promise<Dealer> {
  const d = new Dealer({ linger: 0, receiveTimeout: 5000 });
  t.after(() => d.close());
  d.connect(endpoint);
  return d;
}

/** Reads replay replies until the end marker (bounded by the dealer's receive timeout). */
async function replayFrom(d: Dealer, start: number): Promise<string[][]> {
  await d.send(['', Buffer.from(seq8(start), 'hex')]);
  const got: string[][] = [];
  for (let i = 0; i < 100; i++) {
    const f = framesHex(await d.receive());
    got.push(f);
    if (f.includes('ffffffffffffffff')) return got;
  }
  throw new Error('no end marker after 100 replies');
}

/**
 * Publishes `warm` until the subscriber receives one: PUB drops what it sends before a
 * subscription arrives (the slow joiner), so the first batches of any real stream may be lost.
 * Returns the seq the next batch will carry; everything from it on is delivered.
 */
async function warmUp(p: KvEventPublisher, sub: Subscriber, send: () => Promise<void>): Promise<number> {
  for (let attempt = 0; attempt < 100; attempt++) {
    await send();
    try {
      await sub.receive();
      return p.seq;
    } catch (e) {
      if ((e as { code?: string }).code !== 'EAGAIN') throw e;
    }
  }
  throw new Error('subscriber never received a batch');
}

async function receiveFrom(sub: Subscriber, firstSeq: number): Promise<string[]> {
  for (let i = 0; i < 200; i++) {
    const f = framesHex(await sub.receive());
    // A warm-up batch still in flight is older than the ones under test.
    if (BigInt(`0x${f[1] ?? '0'}`) >= BigInt(firstSeq)) return f;
  }
  throw new Error('no frame at or after the expected seq');
}

for (const [version, v] of Object.entries(captured.versions)) {
  const shape = shapes[version];
  assert.ok(shape);
  const batches = v.encode_only.slice(0, v.zmq.live.length).map((e) => batchOf(e.payload_hex));

  void test(`replay as vLLM ${version} replays it: DEALER ["", seq8] gets each buffered batch >= start, then the end marker`, async (t) => {
    const { p, clock } = publisher(t, { replayEndpoint: 'tcp://127.0.0.1:*', topic: v.zmq.publisher.topic, ...shape });
    const { replayEndpoint } = await p.ready();
    assert.ok(replayEndpoint);
    for (const b of batches) {
      clock.ts = b.ts;
      await p.publish(b.events);
    }
    const d = await dealerTo(t, replayEndpoint);
    assert.deepEqual(
      await replayFrom(d, v.zmq.replay_dealer.start_seq),
      v.zmq.replay_dealer.responses.map((r) => r.frames_hex),
    );
  });

  void test(`live frames as vLLM ${version} sends them: [topic, 8-byte big-endian seq, payload]`, async (t) => {
    const { p, clock } = publisher(t, { topic: v.zmq.publisher.topic, ...shape });
    const { endpoint } = await p.ready();
    const sub = new Subscriber({ linger: 0, receiveTimeout: 100 });
    t.after(() => sub.close());
    sub.subscribe(v.zmq.publisher.topic);
    sub.connect(endpoint);
    const first = batches[0];
    assert.ok(first);
    clock.ts = first.ts;
    const firstSeq = await warmUp(p, sub, () => p.publish(first.events));
    sub.receiveTimeout = 5000;
    for (const [i, b] of batches.entries()) {
      clock.ts = b.ts;
      await p.publish(b.events);
      const want = v.zmq.live[i]?.frames_hex;
      assert.ok(want);
      assert.deepEqual(await receiveFrom(sub, firstSeq + i), [want[0], seq8(firstSeq + i), want[2]]);
    }
  });

  void test(`DP rank 1 in connect mode (${version}): tcp://127.0.0.1:P publishes on P+1 to a bound SUB`, async (t) => {
    const sub = new Subscriber({ linger: 0, receiveTimeout: 100 });
    t.after(() => sub.close());
    sub.subscribe();
    await sub.bind('tcp://127.0.0.1:*');
    const port = Number(sub.lastEndpoint?.split(':').pop());
    const want = v.zmq.dp_rank1.frames_hex;
    const b = batchOf(want[2] ?? '');
    const { p, clock } = publisher(t, { endpoint: `tcp://127.0.0.1:${port - 1}`, dataParallelRank: 1, eventFormat: shape.eventFormat });
    clock.ts = b.ts;
    assert.equal((await p.ready()).endpoint, `tcp://127.0.0.1:${port}`);
    const firstSeq = await warmUp(p, sub, () => p.publish(b.events));
    sub.receiveTimeout = 5000;
    await p.publish(b.events);
    assert.deepEqual(await receiveFrom(sub, firstSeq), [want[0], seq8(firstSeq), want[2]]);
  });
}

for (const replayFraming of ['topic', 'legacy'] as const) {
  void test(`replay buffer is bounded by buffer_steps (${replayFraming}): a request older than the buffer starts at the oldest kept`, async (t) => {
    const { p } = publisher(t, { replayEndpoint: 'tcp://127.0.0.1:*', bufferSteps: 3, replayFraming, topic: 't' });
    const { replayEndpoint } = await p.ready();
    assert.ok(replayEndpoint);
    for (let i = 0; i < 5; i++) await p.publish([{ type: 'AllBlocksCleared' }]);
    assert.equal(p.seq, 5);
    const d = await dealerTo(t, replayEndpoint);
    const seqs = (await replayFrom(d, 0)).map((f) => f[replayFraming === 'topic' ? 2 : 1]);
    assert.deepEqual(seqs, [seq8(2), seq8(3), seq8(4), 'ffffffffffffffff']);
    const end = (await replayFrom(d, 9)).map((f) => f.join('|'));
    assert.deepEqual(end, [replayFraming === 'topic' ? '||ffffffffffffffff|' : '|ffffffffffffffff|'], 'nothing at or after 9: only the end marker');
  });
}

void test('a replay request without the empty delimiter frame gets no reply at all, as in vLLM', async (t) => {
  const { p } = publisher(t, { replayEndpoint: 'tcp://127.0.0.1:*', replayFraming: 'legacy' });
  const { replayEndpoint } = await p.ready();
  assert.ok(replayEndpoint);
  await p.publish([{ type: 'AllBlocksCleared' }]);
  const d = await dealerTo(t, replayEndpoint);
  await d.send([Buffer.from(seq8(0), 'hex')]);
  // Had the bad request been answered, its reply would arrive before this one's.
  assert.deepEqual(
    (await replayFrom(d, 0)).map((f) => f[1]),
    [seq8(0), 'ffffffffffffffff'],
  );
});

const bindRules = [
  { why: 'a wildcard host binds (vLLM default tcp://*:5557)', endpoint: 'tcp://*:5557', binds: true },
  { why: 'an IPv6 wildcard binds', endpoint: 'tcp://:::5557', binds: true },
  { why: 'ipc binds', endpoint: 'ipc:///tmp/kv.ipc', binds: true },
  { why: 'inproc binds', endpoint: 'inproc://cache', binds: true },
  { why: 'a concrete host connects, so the gateway must bind', endpoint: 'tcp://127.0.0.1:5557', binds: false },
  { why: 'a remote host connects', endpoint: 'tcp://10.0.0.5:5557', binds: false },
];
for (const r of bindRules) {
  void test(`bind or connect: ${r.why}`, () => assert.equal(publisherBinds(r.endpoint), r.binds));
}

const offsetRules = [
  { why: 'rank 0 is never changed', endpoint: 'ipc:///tmp/kv.ipc', rank: 0, want: 'ipc:///tmp/kv.ipc' },
  { why: 'tcp: port + rank', endpoint: 'tcp://*:5557', rank: 3, want: 'tcp://*:5560' },
  { why: 'tcp connect endpoint: port + rank', endpoint: 'tcp://127.0.0.1:27557', rank: 1, want: 'tcp://127.0.0.1:27558' },
  { why: 'inproc: _dp{rank} appended', endpoint: 'inproc://cache', rank: 2, want: 'inproc://cache_dp2' },
];
for (const r of offsetRules) {
  void test(`data-parallel endpoint: ${r.why}`, () => assert.equal(offsetEndpointPort(r.endpoint, r.rank), r.want));
}

void test('data-parallel endpoint: ipc with rank > 0 fails as vLLM does', () => {
  assert.throws(() => offsetEndpointPort('ipc:///tmp/kv.ipc', 1), (e: unknown) => hasCode(e, 'LLMGW_KV_ENDPOINT') && /must contain 'inproc' or 'tcp'/.test(e.message));
});

void test('close() is idempotent and publish after close is refused', async (t) => {
  const { p } = publisher(t, { replayEndpoint: 'tcp://127.0.0.1:*' });
  await p.ready();
  await p.publish([{ type: 'AllBlocksCleared' }]);
  const a = p.close();
  assert.equal(p.close(), a);
  await a;
  await assert.rejects(p.publish([]), (e: unknown) => hasCode(e, 'LLMGW_KV_PUBLISHER_CLOSED'));
});

void test('seq starts at 0 and grows by one per batch, in call order even when calls overlap', async (t) => {
  const { p } = publisher(t, { replayEndpoint: 'tcp://127.0.0.1:*', replayFraming: 'legacy' });
  const { replayEndpoint } = await p.ready();
  assert.ok(replayEndpoint);
  assert.equal(p.seq, 0);
  await Promise.all([0, 1, 2].map((i) => p.publish([{ type: 'BlockRemoved', blockHashes: [BigInt(i)], medium: 'GPU', groupIdx: null, locality: null }])));
  assert.equal(p.seq, 3);
  const d = await dealerTo(t, replayEndpoint);
  const replies = (await replayFrom(d, 0)).slice(0, 3);
  const hashes = replies.map((f) => {
    const r = decodeEventBatch(hex(f[2] ?? ''));
    assert.ok(r.ok);
    const e = r.batch.events[0];
    return e?.type === 'BlockRemoved' ? e.blockHashes[0] : undefined;
  });
  assert.deepEqual(hashes, [0n, 1n, 2n]);
});

void test('an endpoint that cannot be bound is reported with the config field and the fix', async (t) => {
  const { p: first } = publisher(t, { endpoint: 'tcp://127.0.0.1:*' });
  const { endpoint } = await first.ready();
  const { p } = publisher(t, { endpoint: endpoint.replace('127.0.0.1', '*') });
  await assert.rejects(p.ready(), (e: unknown) => hasCode(e, 'LLMGW_KV_BIND') && /kv_events_config.endpoint/.test(e.message));
  await assert.rejects(p.publish([]), (e: unknown) => hasCode(e, 'LLMGW_KV_BIND'));
});
