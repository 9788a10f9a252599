// A stream restored from a previous stream's state (an agent restarted beside a running engine):
// the blocks are held again before any event, the verdict on the engine's hashes is kept, and the
// batches published while nobody listened come back by replay from the last sequence number seen.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { blockRemoved, blockStored, EngineEventStream, hashBlocks, KvEventPublisher, type BlockKey, type KvStatus, type StreamState } from '../../src/kv/index.js';
import { probeUntilHeard } from '../support/kv-probe.js';
import { freePort, waitFor } from '../support/wait.js';

const BS = 16;
const tokens = (n: number, salt: number): number[] => Array.from({ length: n }, (_, i) => (i * 7919 + salt * 104729 + 128000) % 151000);
const sorted = (keys: Iterable<bigint>): bigint[] => [...keys].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));

void test('restore: blocks and verdict come back at once, and replay fills what was published while the agent was down', async (t) => {
  const [port, replayPort] = [await freePort(), await freePort()];
  const open = (restore: StreamState | undefined, statuses: KvStatus[]) =>
    new EngineEventStream({
      engineId: 'e',
      port,
      replayPort,
      topic: 'kv',
      blockSizeTokens: BS,
      seed: '0',
      capacityBlocks: 10_000,
      restore,
      onDelta: () => undefined,
      onStatus: (s) => statuses.push(s),
    });
  const pub = new KvEventPublisher({ endpoint: `tcp://127.0.0.1:${port}`, replayEndpoint: `tcp://127.0.0.1:${replayPort}`, topic: 'kv' });
  t.after(() => pub.close());
  await pub.ready();
  const conversation = (salt: number) => {
    const toks = tokens(2 * BS, salt);
    const keys = hashBlocks(toks, { blockSizeTokens: BS, seed: '0' }).keys as bigint[];
    return { keys, event: blockStored({ blockHashes: keys, parentBlockHash: null, tokenIds: toks, blockSize: BS }) };
  };

  const first = open(undefined, []);
  await first.start();
  await probeUntilHeard(pub, first);
  const before = [conversation(1), conversation(2), conversation(3)];
  for (const c of before) await pub.publish([c.event]);
  await waitFor(() => first.stats().ranks[0]?.lastSeq === pub.seq - 1, { what: 'the first stream to apply every batch' });
  await first.whenIdle();
  assert.equal(first.verification, 'verified');
  const saved = first.state();
  await first.close();

  // The agent is down: these reach nobody live, but stay in the engine's replay buffer.
  const during = [conversation(4), conversation(5)];
  for (const c of during) await pub.publish([c.event]);

  const statuses: KvStatus[] = [];
  const second = open(saved, statuses);
  t.after(() => second.close());
  assert.deepEqual(sorted(second.keys()), sorted(before.flatMap((c) => c.keys)), 'held again before any event');
  assert.equal(second.verification, 'verified', 'the verdict is kept');
  assert.deepEqual(second.snapshot('requested')[0]?.added.length, 6, 'a new upstream stream gets them at once');
  await waitFor(
    async () => {
      try {
        await second.start();
        return true;
      } catch {
        return false; // the first stream's port may take a moment to be released
      }
    },
    { what: 'the second stream to bind the same port' },
  );
  const after = conversation(6);
  const target = pub.seq;
  // Published again until heard: the first may reach a socket that is not connected yet.
  await waitFor(
    async () => {
      if ((second.stats().ranks[0]?.lastSeq ?? -1) >= target) return true;
      await pub.publish([after.event]);
      return false;
    },
    { what: 'the second stream to catch up' },
  );
  await second.whenIdle();
  assert.deepEqual(sorted(second.keys()), sorted([...before, ...during, after].flatMap((c) => c.keys)), 'replay filled the batches published meanwhile');
  const lastSeen = saved.ranks[0]?.lastSeq ?? -1;
  // ZeroMQ may have queued them on the engine's side and sent them live on reconnect; if not, replay
  // was asked from the last sequence number seen, never from 0.
  for (const s of statuses) if (s.type === 'stream.replaying') assert.equal(s.from, lastSeen + 1);
  assert.deepEqual(statuses.filter((s) => s.type === 'stream.reset' || s.type === 'mirror.reset'), []);
});

void test('restore: an engine that restarted meanwhile (its seq went back) resets instead of trusting the saved blocks', async (t) => {
  const port = await freePort();
  const statuses: KvStatus[] = [];
  const saved: StreamState = {
    ranks: [{ lastSeq: 50, mirror: { verification: 'verified', parts: [{ rank: 0, medium: 'GPU', group: 0, hashes: [7n], refs: [1], keys: [7n as BlockKey] }] } }],
  };
  const stream = new EngineEventStream({ engineId: 'e', port, topic: 'kv', blockSizeTokens: BS, seed: '0', capacityBlocks: 100, restore: saved, onDelta: () => undefined, onStatus: (s) => statuses.push(s) });
  t.after(() => stream.close());
  assert.deepEqual(stream.keys(), [7n]);
  await stream.start();
  const pub = new KvEventPublisher({ endpoint: `tcp://127.0.0.1:${port}`, topic: 'kv' });
  t.after(() => pub.close());
  await pub.ready();
  await waitFor(
    async () => {
      await pub.publish([blockRemoved({ blockHashes: [1n] })]);
      return statuses.some((s) => s.type === 'stream.reset' && s.reason === 'engine-restart');
    },
    { what: 'the restart to be noticed' },
  );
  await stream.whenIdle();
  assert.deepEqual(stream.keys(), []);
});
