// Request traces through a real gateway and a sim engine with KV events, spans captured by an
// in-memory exporter: one trace per request, with auth, route (tokenize and score under it),
// upstream and stream, and the GenAI attributes (model, tokens, cached tokens) plus tier and replica.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider, type ReadableSpan } from '@opentelemetry/sdk-trace';
import { Registry } from 'prom-client';
import { gatewayDefaults, parseGatewayConfig, startGateway } from '../../src/gateway/index.js';
import { ClusterIndex, EngineEventStream, MAX_SLOTS, type KvDelta } from '../../src/kv/index.js';
import { HashPool } from '../../src/workers/index.js';
import { hasCode } from '../../src/errors/index.js';
import { eventSim, eventSimView } from '../support/event-sim.js';
import { freePort, waitFor } from '../support/wait.js';

const parentOf = (s: ReadableSpan): string | undefined => s.parentSpanContext?.spanId;

void test('tracing: one trace per request with auth, route > tokenize and score, upstream, stream, and GenAI attributes', async (t) => {
  const exporter = new InMemorySpanExporter();
  const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
  t.after(() => provider.shutdown());
  const index = new ClusterIndex({ capacityBlocks: 10_000 });
  const pool = new HashPool({ indexBuffer: index.buffer, maxThreads: 1 });
  t.after(() => pool.close());
  const [events, replay] = [await freePort(), await freePort()];
  let applyDelta: (d: KvDelta) => void = () => undefined;
  const stream = new EngineEventStream({
    engineId: 'a',
    port: events,
    replayPort: replay,
    topic: 'kv',
    blockSizeTokens: 16,
    seed: '0',
    capacityBlocks: 4096,
    onDelta: (d) => applyDelta(d),
  });
  await stream.start();
  t.after(() => stream.close());
  const sim = await eventSim(t, { model: 'qwen3', events, replay, topic: 'kv' });
  const view = eventSimView(sim.url);
  const gw = await startGateway({
    // Generous bounds: the test is about spans, not about falling back on a loaded machine.
    config: { ...gatewayDefaults, port: 0, router: { ...gatewayDefaults.router, tokenizeTimeoutMs: 10_000, scoreTimeoutMs: 10_000, loadPollIntervalMs: 0 } },
    registry: new Registry(),
    directory: { ready: () => [view], models: () => ['qwen3'] },
    index: { index, slotCount: MAX_SLOTS },
    scorer: pool,
    ownerOf: () => 'local',
    tracer: provider.getTracer('test'),
  });
  t.after(() => gw.close());
  applyDelta = (d) => void gw.writer?.apply('local', 'a', d);

  const messages = [{ role: 'user', content: 'a long question about tracing, repeated so it fills blocks. '.repeat(8) }];
  const ask = async (stream: boolean): Promise<void> => {
    const r = await fetch(new URL('/v1/chat/completions', gw.url), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'qwen3', messages, max_tokens: 3, stream }),
      signal: AbortSignal.timeout(20_000),
    });
    assert.equal(r.status, 200);
    await r.text();
  };
  await ask(false);
  await sim.eventsIdle();
  await stream.whenIdle();
  await waitFor(() => (gw.writer?.size ?? 0) > 0, { what: 'the first request\'s blocks in the index' });
  await ask(true);

  const spans = await waitFor(() => {
    const all = exporter.getFinishedSpans();
    return all.filter((s) => s.name === 'chat').length === 2 ? all : undefined;
  }, { what: 'two finished request spans' });
  const traces = new Map<string, ReadableSpan[]>();
  for (const s of spans) traces.set(s.spanContext().traceId, [...(traces.get(s.spanContext().traceId) ?? []), s]);
  assert.equal(traces.size, 2, 'one trace per request');
  const cached: number[] = [];
  for (const group of traces.values()) {
    const by = new Map(group.map((s) => [s.name, s]));
    const root = by.get('chat');
    assert.ok(root !== undefined && parentOf(root) === undefined, 'the request span is the root');
    assert.deepEqual([...by.keys()].sort(), ['auth', 'chat', 'route', 'score', 'stream', 'tokenize', 'upstream']);
    const rootId = root.spanContext().spanId;
    for (const name of ['auth', 'route', 'upstream', 'stream']) assert.equal(parentOf(by.get(name) as ReadableSpan), rootId, `${name} is a phase of the request`);
    const routeId = by.get('route')?.spanContext().spanId;
    for (const name of ['tokenize', 'score']) assert.equal(parentOf(by.get(name) as ReadableSpan), routeId, `${name} happens while routing`);
    const a = root.attributes;
    assert.equal(a['gen_ai.operation.name'], 'chat');
    assert.equal(a['gen_ai.request.model'], 'qwen3');
    assert.ok(Number(a['gen_ai.usage.input_tokens']) > 0);
    assert.equal(a['gen_ai.usage.output_tokens'], 3);
    assert.equal(a['llmgw.replica'], 'a');
    assert.equal(a['http.response.status_code'], 200);
    assert.equal(by.get('route')?.attributes['llmgw.route.tier'], a['llmgw.route.tier']);
    cached.push(Number(a['gen_ai.usage.cache_read.input_tokens'] ?? 0));
  }
  assert.ok(cached.some((n) => n > 0), 'the follow-up\'s cached tokens are on its span');
  const tiers = [...traces.values()].map((g) => g.find((s) => s.name === 'chat')?.attributes['llmgw.route.tier']).sort();
  assert.ok(tiers.includes('precise'), `the second request routes precise (tiers ${tiers.join(', ')})`);
});

void test('tracing is off unless gateway.tracing.otlp_endpoint is set, and a bad endpoint is a config error', () => {
  assert.equal(parseGatewayConfig(undefined).tracing.otlpEndpoint, '');
  assert.equal(parseGatewayConfig({ tracing: { otlp_endpoint: 'http://127.0.0.1:4318/v1/traces' } }).tracing.otlpEndpoint, 'http://127.0.0.1:4318/v1/traces');
  assert.throws(() => parseGatewayConfig({ tracing: { otlp_endpoint: 'collector:4318' } }), (e: unknown) => hasCode(e, 'LLMGW_CONFIG') && /gateway\.tracing\.otlp_endpoint/.test(e.message));
});
