// The transport seam: bound SUB sockets, one per rank, handing on [seq, payload] frames and
// counting, never throwing on, anything that is not a message of ours.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { Publisher } from 'zeromq';
import { seqFrame } from '../../src/kv/replay.js';
import type { SeqFrame } from '../../src/kv/sequencer.js';
import { SubTransport } from '../../src/kv/transport.js';
import { freePort, waitFor } from '../support/wait.js';

void test('SubTransport: frames of each rank arrive with their rank; bad framing, a neighbour\'s topic and a bad seq frame are reported', async (t) => {
  const ports = [await freePort(), await freePort()];
  const frames: [number, SeqFrame][] = [];
  const malformed: [number, string][] = [];
  const tr = new SubTransport({
    endpoints: ports.map((p) => `tcp://127.0.0.1:${p}`),
    topic: 'kv',
    onFrame: (rank, f) => frames.push([rank, f]),
    onMalformed: (rank, reason) => malformed.push([rank, reason]),
    onFailure: (rank, e) => assert.fail(`rank ${rank} failed: ${String(e)}`),
  });
  await tr.start();
  t.after(() => tr.close());
  const pubs = ports.map((p) => {
    const pub = new Publisher({ linger: 0 });
    pub.connect(`tcp://127.0.0.1:${p}`);
    return pub;
  });
  t.after(() => pubs.forEach((p) => p.close()));
  // PUB drops what it sends before the subscription reaches it: send until heard.
  for (const [rank, pub] of pubs.entries()) {
    await waitFor(
      async () => {
        await pub.send(['kv', seqFrame(7), Buffer.from([rank])]);
        return frames.some(([r]) => r === rank);
      },
      { what: `rank ${rank} heard` },
    );
  }
  const [rank1] = frames.filter(([r]) => r === 1);
  assert.deepEqual(rank1?.[1].seq, 7);
  assert.deepEqual([...(rank1?.[1].payload ?? [])], [1]);
  const pub0 = pubs[0];
  assert.ok(pub0);
  await pub0.send(['kv', seqFrame(8)]);
  await pub0.send(['kv-events', seqFrame(9), Buffer.from([0])]);
  await pub0.send(['kv', Buffer.from([0, 1]), Buffer.from([0])]);
  await waitFor(() => malformed.length >= 3, { what: 'three malformed messages reported' });
  assert.deepEqual(
    malformed.map(([r, why]) => [r, why.split(' ')[0]]),
    [
      [0, 'message'],
      [0, 'topic'],
      [0, 'sequence'],
    ],
  );
  assert.ok(!frames.some(([, f]) => f.seq === 9), 'a topic that only starts with ours is not ours');
});

void test('SubTransport: close() ends the read loops and is safe to call twice', async () => {
  const tr = new SubTransport({ endpoints: [`tcp://127.0.0.1:${await freePort()}`], topic: '', onFrame: () => undefined, onMalformed: () => undefined, onFailure: () => undefined });
  await tr.start();
  const a = tr.close();
  assert.equal(tr.close(), a);
  await a;
});

void test('SubTransport: a port held by someone else fails start, releases the ranks it bound, and a later start binds once the port is free', async (t) => {
  const [free, held] = [await freePort(), await freePort()];
  const holder = new Publisher({ linger: 0 });
  await holder.bind(`tcp://127.0.0.1:${held}`);
  const tr = new SubTransport({
    endpoints: [`tcp://127.0.0.1:${free}`, `tcp://127.0.0.1:${held}`],
    topic: 'kv',
    onFrame: () => undefined,
    onMalformed: () => undefined,
    onFailure: (rank, e) => assert.fail(`rank ${rank} failed: ${String(e)}`),
  });
  t.after(() => tr.close());
  await assert.rejects(tr.start(), (e: unknown) => e instanceof Error && 'code' in e && e.code === 'EADDRINUSE');
  holder.close();
  // Rank 0's port was released by the failed start, and rank 1's is now free: the retry binds both.
  await tr.start();
});

void test('SubTransport: a port this process closed a moment ago binds again (ZeroMQ frees it after close returns)', async (t) => {
  const port = await freePort();
  for (let life = 0; life < 5; life++) {
    const tr = new SubTransport({
      endpoints: [`tcp://127.0.0.1:${port}`],
      topic: 'kv',
      onFrame: () => undefined,
      onMalformed: () => undefined,
      onFailure: (rank, e) => assert.fail(`rank ${rank} failed: ${String(e)}`),
    });
    t.after(() => tr.close());
    await tr.start();
    await tr.close();
  }
});
