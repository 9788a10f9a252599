// The llmgw_kv_* metrics as an operator reads them on the gateway's /metrics: a real sim engine
// whose KV publisher skips a sequence number (recovered by replay), restarts (its numbering starts
// over), and then goes silent while the router has a request on it. Each effect is read back from
// the scrape, not from the stream's own counters.
import { strict as assert } from 'node:assert';
import { test, type TestContext } from 'node:test';
import { Publisher } from 'zeromq';
import { Registry } from 'prom-client';
import { gatewayDefaults, startGateway } from '../../src/gateway/index.js';
import { ClusterIndex, KvMetrics, MAX_SLOTS } from '../../src/kv/index.js';
import { eventSim } from '../support/event-sim.js';
import { freePort, waitFor } from '../support/wait.js';

const SILENT_MS = 30_000;

async function scrape(url: URL): Promise<string> {
  const r = await fetch(new URL('/metrics', url), { signal: AbortSignal.timeout(10_000) });
  assert.equal(r.status, 200);
  return r.text();
}

// The value of one series, or undefined when the scrape does not have it.
function value(text: string, name: string, labels: Record<string, string>): number | undefined {
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    const close = line.indexOf('}');
    const have = line.slice(name.length + 1, close).split(',');
    if (want.every((w) => have.includes(w))) return Number(line.slice(close + 2));
  }
  return undefined;
}

async function setup(t: TestContext) {
  const [events, replay] = [await freePort(), await freePort()];
  const registry = new Registry();
  const index = new ClusterIndex({ capacityBlocks: 10_000 });
  const gw = await startGateway({
    config: { ...gatewayDefaults, port: 0, router: { ...gatewayDefaults.router, loadPollIntervalMs: 0 } },
    registry,
    directory: { ready: () => [], models: () => [] },
    index: { index, slotCount: MAX_SLOTS },
    ownerOf: () => 'local',
  });
  t.after(() => gw.close());
  // The router's in-flight count for the engine, and a clock the test moves past the silence bound.
  const flight = { n: 0 };
  const skew = { ms: 0 };
  const kv = new KvMetrics({ registry, inFlight: () => flight.n, silentAfterMs: SILENT_MS, now: () => Date.now() + skew.ms });
  const stream = kv.open({
    engineId: 'r0',
    port: events,
    replayPort: replay,
    topic: 'kv-events',
    blockSizeTokens: 16,
    seed: '0',
    capacityBlocks: 4096,
    onDelta: (d) => void gw.writer?.apply('local', 'r0', d),
  });
  await stream.start();
  t.after(() => stream.close());
  const sim = await eventSim(t, {
    model: 'm',
    events,
    replay,
    topic: 'kv-events',
    faults: { loadTimeMs: 0, failHealthAfterMs: undefined, crashAfterRequests: undefined, dropEventBatches: [2], restartEventsAfterBatches: 5, hang: false },
  });
  let n = 0;
  const complete = async (): Promise<void> => {
    const r = await fetch(`${sim.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', prompt: `prompt ${n++}: long enough to fill a few blocks of sixteen tokens each`, max_tokens: 1 }),
      signal: AbortSignal.timeout(10_000),
    });
    await r.arrayBuffer();
    await sim.eventsIdle();
    await stream.whenIdle();
  };
  return { gw, stream, sim, flight, skew, complete, events };
}

void test('kv metrics on /metrics: a skipped seq, an engine restart and a silent engine each show', async (t) => {
  const { gw, flight, skew, complete, events } = await setup(t);
  const engine = { engine: 'r0' };
  let text = await scrape(gw.url);
  assert.equal(value(text, 'llmgw_kv_batches_received_total', engine), 0, 'every series shows from the first scrape');
  assert.equal(value(text, 'llmgw_kv_resets_total', { ...engine, reason: 'engine-restart' }), 0);

  await waitFor(
    async () => {
      await complete();
      text = await scrape(gw.url);
      return (value(text, 'llmgw_kv_resets_total', { ...engine, reason: 'engine-restart' }) ?? 0) >= 1;
    },
    { timeoutMs: 30_000, what: 'the sim to skip seq 2 and restart its publisher' },
  );
  await complete();
  text = await scrape(gw.url);
  assert.ok((value(text, 'llmgw_kv_gaps_total', engine) ?? 0) >= 1, 'the skipped seq is a gap');
  assert.ok((value(text, 'llmgw_kv_replays_requested_total', engine) ?? 0) >= 1, 'the gap asked for a replay');
  assert.ok((value(text, 'llmgw_kv_replays_filled_total', engine) ?? 0) >= 1, 'the replay filled it');
  assert.ok((value(text, 'llmgw_kv_batches_received_total', engine) ?? 0) >= 5);
  assert.ok((value(text, 'llmgw_kv_events_received_total', engine) ?? 0) >= 5);
  assert.ok((value(text, 'llmgw_kv_held_blocks', engine) ?? 0) > 0, 'blocks stored after the restart are held');
  assert.ok(value(text, 'llmgw_kv_last_sequence', { ...engine, rank: '0' }) !== undefined);
  assert.equal(value(text, 'llmgw_kv_hash_verification', { ...engine, outcome: 'verified' }), 1);
  assert.ok((value(text, 'llmgw_kv_apply_lag_seconds_count', engine) ?? 0) >= 5, 'every applied batch is a lag sample');
  assert.equal(value(text, 'llmgw_kv_engine_silent', engine), 0);

  // Garbage on the engine's socket is counted, not fatal (two frames: it never reaches the sequencer).
  const rogue = new Publisher({ linger: 0 });
  t.after(() => rogue.close());
  rogue.connect(`tcp://127.0.0.1:${events}`);
  await waitFor(
    async () => {
      await rogue.send(['kv-events', Buffer.from('not a sequence frame')]);
      return (value(await scrape(gw.url), 'llmgw_kv_decode_failures_total', engine) ?? 0) >= 1;
    },
    { what: 'a malformed batch to be counted' },
  );

  // The router has a request on the engine and nothing arrives: the first scrape starts the clock,
  // one past the bound says the engine is silent.
  flight.n = 1;
  assert.equal(value(await scrape(gw.url), 'llmgw_kv_engine_silent', engine), 0);
  skew.ms += SILENT_MS;
  assert.equal(value(await scrape(gw.url), 'llmgw_kv_engine_silent', engine), 1, 'requests in flight and no event for the bound');
  flight.n = 0;
  assert.equal(value(await scrape(gw.url), 'llmgw_kv_engine_silent', engine), 0, 'an idle engine is not expected to publish');
});
