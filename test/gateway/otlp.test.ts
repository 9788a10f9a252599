// Traces as a collector receives them: a real gateway exporting over OTLP/HTTP to an in-test
// receiver, with its resource from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, the GenAI
// request and response attributes on the request span, and spans a missing collector lost counted.
import { strict as assert } from 'node:assert';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test, type TestContext } from 'node:test';
import { Registry } from 'prom-client';
import { gatewayDefaults, startGateway, type GatewayConfig } from '../../src/gateway/index.js';
import { resourceAttributesOf } from '../../src/gateway/tracing.js';
import { hasCode } from '../../src/errors/index.js';
import { freePort, waitFor } from '../support/wait.js';
import { startFakeEngine } from './fake-engine.js';
import { replicaView } from './replica-view.js';

// OTLP/JSON (what @opentelemetry/exporter-trace-otlp-http sends): attribute values are tagged unions.
interface OtlpValue { stringValue?: string; intValue?: string | number; arrayValue?: { values: OtlpValue[] } }
interface OtlpAttr { key: string; value: OtlpValue }
interface OtlpSpan { name: string; attributes: OtlpAttr[] }
interface OtlpExport { resourceSpans: { resource: { attributes: OtlpAttr[] }; scopeSpans: { spans: OtlpSpan[] }[] }[] }

const plain = (v: OtlpValue): unknown =>
  v.arrayValue !== undefined ? v.arrayValue.values.map(plain) : v.intValue !== undefined ? Number(v.intValue) : v.stringValue;
const attrsOf = (a: readonly OtlpAttr[]): Record<string, unknown> => Object.fromEntries(a.map((x) => [x.key, plain(x.value)]));

async function receiver(t: TestContext): Promise<{ url: string; exports: OtlpExport[] }> {
  const exports: OtlpExport[] = [];
  const server = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      exports.push(JSON.parse(Buffer.concat(chunks).toString('utf8')) as OtlpExport);
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`, exports };
}

async function gateway(t: TestContext, endpoint: string, env: Record<string, string>) {
  const engine = await startFakeEngine({ id: 'a' });
  t.after(() => engine.close());
  const config: GatewayConfig = { ...gatewayDefaults, port: 0, tracing: { otlpEndpoint: endpoint }, router: { ...gatewayDefaults.router, loadPollIntervalMs: 0 } };
  const registry = new Registry();
  const views = [replicaView('a', { url: engine.url, kvEvents: false })];
  const gw = await startGateway({ config, registry, env, directory: { ready: () => views, models: () => ['m'] } });
  const ask = async (stream: boolean): Promise<void> => {
    const r = await fetch(new URL('/v1/chat/completions', gw.url), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'trace me' }], max_tokens: 7, stream }),
      signal: AbortSignal.timeout(10_000),
    });
    assert.equal(r.status, 200);
    await r.text();
  };
  return { gw, ask, registry, engine };
}

void test('otlp: the collector gets the resource from the environment and the GenAI attributes of each request', { timeout: 30_000 }, async (t) => {
  const rx = await receiver(t);
  const env = { OTEL_SERVICE_NAME: 'gw-eu-1', OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment.name=ci,team=infra%20ops,service.name=ignored' };
  const { gw, ask, engine } = await gateway(t, rx.url, env);
  await ask(false);
  await ask(true);
  // close() shuts the provider down, which flushes the batch.
  await gw.close();
  const got = rx.exports.flatMap((e) => e.resourceSpans);
  assert.ok(got.length > 0, 'the collector received spans');
  for (const rs of got) {
    const r = attrsOf(rs.resource.attributes);
    assert.equal(r['service.name'], 'gw-eu-1', 'OTEL_SERVICE_NAME wins over the attribute list');
    assert.equal(r['deployment.environment.name'], 'ci');
    assert.equal(r['team'], 'infra ops', 'values are percent-decoded');
    assert.equal(r['telemetry.sdk.language'], 'nodejs');
  }
  const spans = got.flatMap((rs) => rs.scopeSpans.flatMap((s) => s.spans));
  const roots = spans.filter((s) => s.name === 'chat').map((s) => attrsOf(s.attributes));
  assert.equal(roots.length, 2);
  for (const a of roots) {
    assert.equal(a['gen_ai.operation.name'], 'chat');
    assert.equal(a['gen_ai.provider.name'], 'llmgw');
    assert.equal(a['gen_ai.request.model'], 'm');
    assert.equal(a['gen_ai.request.max_tokens'], 7);
    assert.equal(a['gen_ai.response.id'], 'x1');
    assert.equal(a['gen_ai.response.model'], 'm');
    assert.deepEqual(a['gen_ai.response.finish_reasons'], ['stop']);
    assert.equal(a['gen_ai.usage.output_tokens'], 3);
    assert.equal(a['server.address'], '127.0.0.1');
    assert.equal(a['server.port'], Number(gw.url.port));
  }
  const upstream = spans.filter((s) => s.name === 'upstream').map((s) => attrsOf(s.attributes));
  assert.equal(upstream.length, 2);
  for (const a of upstream) assert.equal(a['server.port'], Number(engine.url.port), 'the upstream span names the engine it called');
});

void test('otlp: spans a collector that is away never took are counted, and requests do not notice', { timeout: 60_000 }, async (t) => {
  const nobody = `http://127.0.0.1:${await freePort()}/v1/traces`;
  const { gw, ask, registry } = await gateway(t, nobody, {});
  await ask(false);
  await ask(true);
  await gw.close();
  const dropped = async (): Promise<number> => {
    const m = (await registry.getSingleMetric('llmgw_gateway_trace_spans_dropped_total')?.get())?.values ?? [];
    return m.find((v) => v.labels.reason === 'export-failed')?.value ?? 0;
  };
  // Each request has at least its own span, auth, route, upstream and stream.
  await waitFor(async () => (await dropped()) >= 10, { timeoutMs: 30_000, what: 'the lost spans counted' });
});

void test('otlp: the resource names llmgw by default, and a malformed OTEL_RESOURCE_ATTRIBUTES is an error naming the entry', () => {
  assert.equal(resourceAttributesOf({})['service.name'], 'llmgw');
  assert.deepEqual(resourceAttributesOf({ OTEL_RESOURCE_ATTRIBUTES: 'service.name=billing, k=a%2Cb' }), { 'service.name': 'billing', k: 'a,b' });
  for (const bad of ['novalue', '=x', 'k=%zz']) {
    assert.throws(() => resourceAttributesOf({ OTEL_RESOURCE_ATTRIBUTES: bad }), (e: unknown) => hasCode(e, 'LLMGW_OTEL_RESOURCE') && e.message.includes(JSON.stringify(bad)));
  }
});
