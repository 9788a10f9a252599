// The replay client: reading the frames a DEALER receives from vLLM's replay ROUTER (both
// framings), and asking a real ROUTER (our publisher, framed as vLLM's) over a socket, with the two
// ways it can fail bounded.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { KvEventPublisher, blockRemoved } from '../../src/kv/index.js';
import { parseReplayReply, readSeq, requestReplay, seqFrame } from '../../src/kv/replay.js';
import { freePort } from '../support/wait.js';

const hex = (s: string): Uint8Array => Uint8Array.from(Buffer.from(s, 'hex'));
const empty = new Uint8Array(0);

const replies = [
  { why: 'legacy 3-frame reply (<= v0.25)', frames: [empty, hex('0000000000000002'), hex('93')], want: { seq: 2, payload: hex('93') } },
  {
    why: 'v0.26 reply carries the topic',
    frames: [empty, Buffer.from('kv-events'), hex('0000000000000003'), hex('93')],
    want: { seq: 3, payload: hex('93') },
  },
  { why: 'legacy end marker', frames: [empty, hex('ffffffffffffffff'), empty], want: 'end' as const },
  { why: 'v0.26 end marker has an empty topic frame', frames: [empty, empty, hex('ffffffffffffffff'), empty], want: 'end' as const },
];
for (const r of replies) {
  void test(`parseReplayReply: ${r.why}`, () => {
    const got = parseReplayReply(r.frames);
    if (r.want === 'end') assert.equal(got, 'end');
    else assert.deepEqual(got, { seq: r.want.seq, payload: r.want.payload });
  });
}

const bad = [
  { why: 'two frames', frames: [empty, hex('00')] },
  { why: 'no empty delimiter', frames: [hex('01'), hex('0000000000000001'), hex('93')] },
  { why: 'a 4-byte sequence', frames: [empty, hex('00000001'), hex('93')] },
];
for (const r of bad) {
  void test(`parseReplayReply rejects ${r.why} without throwing`, () => {
    const got = parseReplayReply(r.frames);
    assert.ok(typeof got === 'object' && 'malformed' in got);
  });
}

void test('sequence frames are 8-byte big-endian and round-trip', () => {
  assert.deepEqual([...seqFrame(258)], [0, 0, 0, 0, 0, 0, 1, 2]);
  assert.equal(readSeq(seqFrame(2 ** 40 + 5)), 2 ** 40 + 5);
  assert.equal(readSeq(hex('ffffffffffffffff')), 'end');
  assert.equal(readSeq(hex('0001')), undefined);
});

for (const framing of ['topic', 'legacy'] as const) {
  void test(`requestReplay reads every batch from the asked seq on, then the end marker (${framing} framing)`, async (t) => {
    const replayPort = await freePort();
    const pub = new KvEventPublisher({ endpoint: 'tcp://127.0.0.1:*', replayEndpoint: `tcp://127.0.0.1:${replayPort}`, topic: 'kv', replayFraming: framing });
    t.after(() => pub.close());
    await pub.ready();
    for (let i = 0; i < 5; i++) await pub.publish([blockRemoved({ blockHashes: [BigInt(i + 1)] })]);
    const r = await requestReplay(`tcp://127.0.0.1:${replayPort}`, 2, { timeoutMs: 5000, signal: new AbortController().signal });
    assert.ok(r.ok);
    assert.deepEqual(r.frames.map((f) => f.seq), [2, 3, 4]);
  });
}

void test('requestReplay: no answer within the bound is replay-timeout, not a hang', async () => {
  // A port nobody listens on: ZeroMQ connects lazily, so the wait is what bounds it.
  const r = await requestReplay(`tcp://127.0.0.1:${await freePort()}`, 0, { timeoutMs: 200, signal: new AbortController().signal });
  assert.deepEqual(r.ok ? 'ok' : r.reason, 'replay-timeout');
});

void test('requestReplay: closing the stream (its signal) ends a wait at once as replay-unavailable', async () => {
  const ac = new AbortController();
  const asked = requestReplay(`tcp://127.0.0.1:${await freePort()}`, 0, { timeoutMs: 60_000, signal: ac.signal });
  ac.abort();
  const r = await asked;
  assert.deepEqual(r.ok ? 'ok' : r.reason, 'replay-unavailable');
});
