// An agent (and its gateway) restarting beside a running engine: the engine's KV stream, saved in
// the state directory, is taken back at once, so the first request of a cached conversation after
// the restart routes precise instead of waiting for the engine to publish again.
import { strict as assert } from 'node:assert';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { Registry } from 'prom-client';
import { StateDir } from '../../src/actors/state-dir.js';
import { gatewayDefaults, startGateway } from '../../src/gateway/index.js';
import { type ReplicaView } from '../../src/routing/index.js';
import { ClusterIndex, EngineEventStream, MAX_SLOTS, type BlockKey, type KvDelta, type StreamState } from '../../src/kv/index.js';
import { HashPool } from '../../src/workers/index.js';
import { eventSim, eventSimView } from '../support/event-sim.js';
import { freePort, waitFor } from '../support/wait.js';

// One agent-and-gateway life: a stream bound to the engine's ports, restored from `saved` if given,
// its full copy handed to a fresh gateway's index as the agent's publisher does at bind.
async function life(t: TestContext, o: { events: number; replay: number; view: ReplicaView; saved?: StreamState }) {
  const index = new ClusterIndex({ capacityBlocks: 10_000 });
  const pool = new HashPool({ indexBuffer: index.buffer, maxThreads: 1 });
  t.after(() => pool.close());
  let apply: (d: KvDelta) => void = () => undefined;
  const stream = new EngineEventStream({
    engineId: 'a',
    port: o.events,
    replayPort: o.replay,
    topic: 'kv',
    blockSizeTokens: 16,
    seed: '0',
    capacityBlocks: 4096,
    restore: o.saved,
    onDelta: (d) => apply(d),
  });
  t.after(() => stream.close());
  await waitFor(
    () =>
      stream.start().then(
        () => true,
        () => false, // the previous life's port may take a moment to be released
      ),
    { what: 'the stream bound' },
  );
  const gw = await startGateway({
    config: { ...gatewayDefaults, port: 0, router: { ...gatewayDefaults.router, tokenizeTimeoutMs: 10_000, scoreTimeoutMs: 10_000, loadPollIntervalMs: 0 } },
    registry: new Registry(),
    directory: { ready: () => [o.view], models: () => ['qwen3'] },
    index: { index, slotCount: MAX_SLOTS },
    scorer: pool,
    ownerOf: () => 'local',
  });
  t.after(() => gw.close());
  apply = (d) => void gw.writer?.apply('local', 'a', d);
  for (const d of stream.snapshot('requested')) apply(d);
  return { stream, gw };
}

async function chat(url: URL, content: string): Promise<string> {
  const r = await fetch(new URL('/v1/chat/completions', url), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'qwen3', messages: [{ role: 'user', content }], max_tokens: 2 }),
    signal: AbortSignal.timeout(20_000),
  });
  assert.equal(r.status, 200);
  await r.text();
  return r.headers.get('x-llmgw-route') ?? '';
}

void test('after an agent restart the first request of a cached conversation routes precise, from the saved stream', async (t) => {
  const [events, replay] = [await freePort(), await freePort()];
  const sim = await eventSim(t, { model: 'qwen3', events, replay, topic: 'kv' });
  const view = eventSimView(sim.url);
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-kv-restart-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const conversation = 'the long conversation about restarts, told again and again. '.repeat(10);

  const first = await life(t, { events, replay, view });
  await chat(first.gw.url, conversation);
  await sim.eventsIdle();
  await waitFor(() => first.stream.keys().length > 0, { what: 'the engine\'s blocks in the first stream' });
  await first.stream.whenIdle();
  new StateDir(dir).writeKv('a', first.stream.state());
  await first.gw.close();
  await first.stream.close();

  const saved = new StateDir(dir).readKv('a');
  assert.ok(saved !== undefined, 'the state directory gives the stream back');
  const second = await life(t, { events, replay, view, saved });
  assert.equal(await chat(second.gw.url, conversation), 'precise', 'routed by the blocks taken back, before the engine said anything');
});

void test('a fresh agent without a saved stream routes the same conversation by load: the saved stream is what made it precise', async (t) => {
  const [events, replay] = [await freePort(), await freePort()];
  const sim = await eventSim(t, { model: 'qwen3', events, replay, topic: 'kv' });
  const view = eventSimView(sim.url);
  const cold = await life(t, { events, replay, view });
  assert.notEqual(await chat(cold.gw.url, 'a conversation nobody has seen, long enough for blocks. '.repeat(10)), 'precise');
});

void test('StateDir: a torn or foreign KV file is dropped, and only adopted replicas keep theirs', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-kv-state-'));
  try {
    const s = new StateDir(dir);
    const state: StreamState = { ranks: [{ lastSeq: 3, mirror: { verification: 'verified', parts: [{ rank: 0, medium: 'GPU', group: 0, hashes: [2n ** 63n + 5n], refs: [1], keys: [(2n ** 63n + 5n) as BlockKey] }] } }] };
    s.writeKv('a', state);
    s.writeKv('b', state);
    assert.deepEqual(s.readKv('a'), state, '64-bit keys survive the file');
    writeFileSync(join(dir, 'torn.kv'), Buffer.from([0x82, 0xa5]));
    assert.equal(s.readKv('torn'), undefined);
    assert.ok(!existsSync(join(dir, 'torn.kv')), 'an unreadable file is removed');
    s.keepKvOnly(new Set(['a']));
    assert.equal(s.readKv('b'), undefined);
    assert.deepEqual(s.readKv('a'), state);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
