// The sequencing rules of the KV-event intake, one row per rule, without sockets: a scripted
// replay stands in for vLLM's ROUTER so every path (gap, late join, restart, lost history, slow
// replay) is exercised deterministically.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { RankSequencer, type ReplayFn, type ReplayResult, type SeqFrame } from '../../src/kv/sequencer.js';

const f = (seq: number): SeqFrame => ({ seq, payload: Uint8Array.of(seq & 0xff) });
const range = (a: number, b: number): SeqFrame[] => Array.from({ length: b - a + 1 }, (_, i) => f(a + i));

interface Harness {
  seq: RankSequencer;
  log: string[];
  delivered: number[];
  asks: number[];
  answer: (r: ReplayResult) => void;
}

// A sequencer whose replay requests wait until the test answers them, so batches can be pushed
// while a replay is "in flight".
function harness(o: { replay?: boolean; maxBuffered?: number } = {}): Harness {
  const log: string[] = [];
  const delivered: number[] = [];
  const asks: number[] = [];
  const answers: ((r: ReplayResult) => void)[] = [];
  const replay: ReplayFn = (from) => {
    asks.push(from);
    log.push(`replay ${from}`);
    return new Promise((resolve) => answers.push(resolve));
  };
  const seq = new RankSequencer(0, {
    replay: o.replay === false ? undefined : replay,
    maxBuffered: o.maxBuffered ?? 1000,
    deliver: (fr, replayed) => {
      delivered.push(fr.seq);
      log.push(`${replayed ? 'replayed' : 'live'} ${fr.seq}`);
    },
    report: (e) => {
      if (e.type === 'stream.reset') log.push(`reset ${e.reason}`);
      else if (e.type === 'stream.gapped') log.push(`gap ${e.expected}..${e.got}`);
      else if (e.type === 'stream.resynced') log.push(`resynced ${e.from}..${e.to}`);
    },
  });
  return {
    seq,
    log,
    delivered,
    asks,
    answer: (r) => {
      const a = answers.shift();
      if (a === undefined) assert.fail('no replay was asked for');
      a(r);
    },
  };
}

void test('in order from seq 0: every batch applied once, no replay', () => {
  const h = harness();
  for (const fr of range(0, 4)) h.seq.push(fr);
  assert.deepEqual(h.delivered, [0, 1, 2, 3, 4]);
  assert.deepEqual(h.asks, []);
  assert.equal(h.seq.stats.lastSeq, 4);
});

void test('joining mid-stream asks replay from 0: PUB drops what it sent before the subscription arrived', async () => {
  const h = harness();
  h.seq.push(f(3));
  assert.deepEqual(h.asks, [0]);
  h.seq.push(f(4));
  h.answer({ ok: true, frames: range(0, 4) });
  await h.seq.whenIdle();
  assert.deepEqual(h.delivered, [0, 1, 2, 3, 4], 'replayed 0..4, then live 3 and 4 skipped as duplicates');
  assert.equal(h.seq.stats.duplicates, 2);
  assert.ok(!h.log.some((l) => l.startsWith('reset')));
});

void test('joining after the replay buffer moved past seq 0 resets: what came before is lost', async () => {
  const h = harness();
  h.seq.push(f(12));
  h.answer({ ok: true, frames: range(5, 12) });
  await h.seq.whenIdle();
  assert.deepEqual(h.log.slice(0, 2), ['replay 0', 'reset late-join']);
  assert.deepEqual(h.delivered, range(5, 12).map((x) => x.seq));
});

void test('a gap is filled by replay: no reset, nothing applied twice, nothing lost', async () => {
  const h = harness();
  for (const fr of range(0, 2)) h.seq.push(fr);
  h.seq.push(f(5));
  assert.deepEqual(h.asks, [3]);
  h.seq.push(f(6));
  h.seq.push(f(7));
  h.answer({ ok: true, frames: range(3, 6) });
  await h.seq.whenIdle();
  assert.deepEqual(h.delivered, [0, 1, 2, 3, 4, 5, 6, 7]);
  assert.deepEqual(h.log.filter((l) => !l.startsWith('live') && !l.startsWith('replayed')), ['gap 3..5', 'replay 3', 'resynced 3..6']);
});

void test('a gap the replay buffer no longer reaches resets, then applies what is known', async () => {
  const h = harness();
  for (const fr of range(0, 1)) h.seq.push(fr);
  h.seq.push(f(30));
  h.answer({ ok: true, frames: range(20, 30) });
  await h.seq.whenIdle();
  assert.ok(h.log.includes('reset replay-gap'));
  assert.deepEqual(h.delivered, [0, 1, ...range(20, 30).map((x) => x.seq)]);
});

void test('a replay that never answers resets within its bound and applies the waiting batches', async () => {
  const h = harness();
  h.seq.push(f(0));
  h.seq.push(f(4));
  h.seq.push(f(5));
  h.answer({ ok: false, reason: 'replay-timeout', detail: 'no answer within 50 ms' });
  await h.seq.whenIdle();
  assert.ok(h.log.includes('reset replay-timeout'));
  assert.deepEqual(h.delivered, [0, 4, 5]);
  h.seq.push(f(6));
  assert.deepEqual(h.delivered, [0, 4, 5, 6]);
});

void test('without a replay endpoint a gap resets at once', () => {
  const h = harness({ replay: false });
  h.seq.push(f(0));
  h.seq.push(f(3));
  assert.deepEqual(h.log, ['live 0', 'gap 1..3', 'reset replay-unavailable', 'live 3']);
});

void test('a sequence going back means the engine restarted (vLLM sends no AllBlocksCleared): reset', () => {
  const h = harness();
  for (const fr of range(0, 5)) h.seq.push(fr);
  h.seq.push(f(0));
  h.seq.push(f(1));
  assert.deepEqual(h.log.slice(6), ['reset engine-restart', 'live 0', 'live 1']);
});

void test('a restart whose seq 0 we missed resets and asks the new engine to replay from 0', async () => {
  const h = harness();
  for (const fr of range(0, 5)) h.seq.push(fr);
  h.seq.push(f(2));
  assert.deepEqual(h.asks, [0]);
  h.answer({ ok: true, frames: range(0, 2) });
  await h.seq.whenIdle();
  assert.deepEqual(h.log.slice(6), ['reset engine-restart', 'replay 0', 'replayed 0', 'replayed 1', 'replayed 2', 'resynced 0..2']);
});

void test('a restart during a replay is seen in the waiting batches and resets', async () => {
  const h = harness();
  for (const fr of range(0, 3)) h.seq.push(fr);
  h.seq.push(f(6));
  h.seq.push(f(0));
  h.answer({ ok: true, frames: range(4, 6) });
  await h.seq.whenIdle();
  assert.deepEqual(h.log.slice(-3), ['resynced 4..6', 'reset engine-restart', 'live 0']);
});

void test('a second gap among the waiting batches starts a second replay, in order', async () => {
  const h = harness();
  h.seq.push(f(0));
  h.seq.push(f(2));
  h.seq.push(f(5));
  h.seq.push(f(6));
  h.answer({ ok: true, frames: range(1, 2) });
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(h.asks, [1, 3]);
  h.seq.push(f(7));
  h.answer({ ok: true, frames: range(3, 5) });
  await h.seq.whenIdle();
  assert.deepEqual(h.delivered, [0, 1, 2, 3, 4, 5, 6, 7]);
});

void test('batches past the buffer bound are dropped, counted, and recovered by the next replay', async () => {
  const h = harness({ maxBuffered: 2 });
  h.seq.push(f(0));
  h.seq.push(f(2));
  h.seq.push(f(3));
  h.seq.push(f(4));
  h.answer({ ok: true, frames: range(1, 2) });
  await new Promise((r) => setImmediate(r));
  assert.equal(h.seq.stats.dropped, 1);
  h.seq.push(f(5));
  assert.deepEqual(h.asks, [1, 4]);
  h.answer({ ok: true, frames: range(4, 5) });
  await h.seq.whenIdle();
  assert.deepEqual(h.delivered, [0, 1, 2, 3, 4, 5]);
});

void test('after close nothing is applied, even a replay answered late', async () => {
  const h = harness();
  h.seq.push(f(0));
  h.seq.push(f(2));
  h.seq.close();
  h.answer({ ok: true, frames: range(1, 2) });
  await new Promise((r) => setImmediate(r));
  h.seq.push(f(3));
  assert.deepEqual(h.delivered, [0]);
});

void test('each replay asked for is reported, the gap before it and the resync after it', async () => {
  const told: string[] = [];
  const seq = new RankSequencer(0, {
    replay: () => Promise.resolve({ ok: true, frames: range(1, 2) }),
    maxBuffered: 10,
    deliver: () => undefined,
    report: (e) => told.push(e.type),
  });
  seq.push(f(0));
  seq.push(f(2));
  await seq.whenIdle();
  assert.deepEqual(told, ['stream.gapped', 'stream.replaying', 'stream.resynced']);
});

void test('a resumed position (an agent restarted beside the engine) replays from the seq after it, not from 0', async () => {
  const h = harness();
  h.seq.resume(5);
  h.seq.push(f(8));
  assert.deepEqual(h.asks, [6]);
  h.answer({ ok: true, frames: range(6, 8) });
  await h.seq.whenIdle();
  assert.deepEqual(h.delivered, [6, 7, 8]);
});

void test('catch-up on connecting to an engine that binds (ipc://): what it published before the subscription is replayed', async () => {
  const h = harness();
  h.seq.catchUp();
  assert.deepEqual(h.asks, [0]);
  h.seq.push(f(2));
  h.answer({ ok: true, frames: range(0, 1) });
  await h.seq.whenIdle();
  assert.deepEqual(h.delivered, [0, 1, 2], 'batches 0 and 1 reached no subscriber live; 2 waited behind the replay');
  assert.ok(!h.log.some((l) => l.startsWith('reset')));
});

void test('catch-up that finds nothing new (a fresh engine, a reconnect with nothing missed) is quiet: no reset', async () => {
  const h = harness();
  h.seq.catchUp();
  h.answer({ ok: true, frames: [] });
  await h.seq.whenIdle();
  h.seq.push(f(0));
  for (const fr of range(1, 2)) h.seq.push(fr);
  h.seq.catchUp();
  assert.deepEqual(h.asks, [0, 3], 'a reconnect asks from the next expected batch');
  h.answer({ ok: true, frames: [] });
  await h.seq.whenIdle();
  assert.deepEqual(h.delivered, [0, 1, 2]);
  assert.ok(!h.log.some((l) => l.startsWith('reset')));
  assert.deepEqual(h.log.filter((l) => l.startsWith('resynced')), ['resynced 0..-1', 'resynced 3..2'], 'each says the rank holds all the engine published');
});
