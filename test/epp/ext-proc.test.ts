// llmgw epp driven as Envoy drives it: a gRPC client over Envoy's own .proto files sends the
// request phases byte for byte, against two sim pods listed in a file in llm-d-router's
// file-discovery format. The decision is the gateway's (precise from the pods' KV events), the
// answers are the endpoint picker protocol's, and every bad input gets a clear answer without
// stopping other streams.
import { strict as assert } from 'node:assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { protoPath as healthProto } from 'grpc-health-check';
import { parse } from 'yaml';
import { extProcService, fileDiscovery, parseEppConfig, startEpp, type Epp } from '../../src/epp/index.js';
import { createLogger, loggedEvents } from '../../src/log/index.js';
import { waitFor } from '../support/wait.js';
import { endpointsFile, Exchange, extProcClient, forward, headerOf, pickFor, requestHeaders, respond, startSimPod, type SimPod } from './envoy.js';

const model = 'm';
const system = 'You are the assistant of a pool behind Envoy; answer briefly. '.repeat(40);
const chat = (turns: readonly { role: string; content: string }[], extra: Record<string, unknown> = {}): string =>
  JSON.stringify({ model, messages: [{ role: 'system', content: system }, ...turns], max_tokens: 8, ...extra });

async function counter(epp: Epp, name: string, labels: Record<string, string> = {}): Promise<number> {
  const m = await epp.registry.getSingleMetric(name)?.get();
  return (m?.values ?? []).filter((v) => Object.entries(labels).every(([k, x]) => v.labels[k] === x)).reduce((n, v) => n + v.value, 0);
}

const addr = (p: SimPod): string => `${p.host}:${p.port}`;

void test('epp: Envoy\'s ext_proc conversation against sim pods from a discovery file', { timeout: 240_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-epp-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  // Two loopback addresses, because Envoy's subset hint names pods by address, not port.
  const [a, b] = [await startSimPod(t, 'pod-a', model, '127.0.0.1'), await startSimPod(t, 'pod-b', model, '127.0.0.2')];
  const file = join(dir, 'endpoints.yaml');
  // A bad entry beside the good ones: logged, counted and skipped; the others load.
  writeFileSync(file, endpointsFile([a, b], '  - name: broken\n    address: not-an-ip\n    port: "80"\n'));
  const config = parseEppConfig(
    parse(`
discovery: { file: ${JSON.stringify(file)}, poll_ms: 50 }
pool:
  models: [${model}]
  kv_events: "tcp://{address}:{labels.kv_port}"
  replay: "tcp://{address}:{labels.replay_port}"
  hash_seed: "7"
  block_size: 16
  tokenizer: bytes
  health_interval_ms: 100
listen: { host: 127.0.0.1, ext_proc_port: 0, health_port: 0, metrics_port: 0 }
gateway:
  max_body_bytes: 200000
  router: { prediction_ttl_ms: 0 }
`),
  );
  const lines: string[] = [];
  const epp = await startEpp(config, fileDiscovery({ path: file, pollMs: 50 }), { log: createLogger({ sink: (l) => lines.push(l) }) });
  t.after(() => epp.close());
  const client = extProcClient(t, epp.extProcPort);
  await waitFor(() => epp.pool.ready(model).length === 2, { timeoutMs: 20_000, what: 'both pods healthy' });
  assert.equal(await counter(epp, 'llmgw_epp_discovery_skipped_total', { reason: 'address' }), 1, 'the bad entry is counted as skipped');
  const skippedLine = loggedEvents(`${lines.join('\n')}\n`, 'epp.discovery_skipped')[0];
  assert.equal(skippedLine?.reason, 'address', 'and logged, saying why');
  assert.match(String(skippedLine?.why), /address "not-an-ip" is not an IP address/);

  await t.test('the second turn of a conversation goes to the pod that cached the first, by its KV events', async () => {
    const turn1 = [{ role: 'user', content: 'Which pod holds this conversation? '.repeat(10) }];
    const p1 = await pickFor(client, chat(turn1), { chunkBytes: 1000 });
    assert.ok(p1.destination !== undefined, 'a destination header');
    assert.equal(p1.first.request_headers?.response?.clear_route_cache, true, 'the header answer clears the route cache');
    const meta = p1.first.dynamic_metadata?.fields?.['envoy.lb']?.structValue?.fields?.['x-gateway-destination-endpoint']?.stringValue;
    assert.equal(meta, p1.destination, 'envoy.lb metadata carries the same value as the header');
    assert.equal(p1.destination.split(',').length, 2, 'the chosen endpoint, then the other as a fallback');
    assert.equal(p1.forwarded.toString(), chat(turn1), 'the body comes back whole');
    const chosen = p1.destination.split(',')[0] ?? '';
    const answer = await forward(p1.destination, '/v1/chat/completions', p1.forwarded);
    const back = await respond(p1.x, chosen, answer);
    assert.deepEqual(back, answer, 'the answer goes back to the client as the pod sent it');
    await waitFor(async () => (await counter(epp, 'llmgw_gateway_index_events_applied_total')) > 0, { timeoutMs: 15_000, what: "the pod's stored blocks indexed" });
    const text = (JSON.parse(answer.toString()) as { choices: { message: { content: string } }[] }).choices[0]?.message.content ?? '';
    const turn2 = [...turn1, { role: 'assistant', content: text }, { role: 'user', content: 'And the second turn?' }];
    const before = await counter(epp, 'llmgw_epp_picks_total', { tier: 'precise' });
    const p2 = await waitFor(
      async () => {
        const p = await pickFor(client, chat(turn2));
        p.x.close();
        return (await counter(epp, 'llmgw_epp_picks_total', { tier: 'precise' })) > before ? p : undefined;
      },
      { timeoutMs: 15_000, intervalMs: 100, what: 'a precise decision for the second turn' },
    );
    assert.equal(p2.destination?.split(',')[0], chosen);
  });

  await t.test('the subset hint narrows the choice to the addresses Envoy names', async () => {
    for (const pod of [a, b]) {
      const p = await pickFor(client, chat([{ role: 'user', content: 'narrowed' }]), { subset: [addr(pod)] });
      p.x.close();
      assert.equal(p.destination, addr(pod));
    }
    const none = await pickFor(client, chat([{ role: 'user', content: 'nowhere' }]), { subset: [] });
    assert.equal(none.first.immediate_response?.status?.code, 'ServiceUnavailable', 'an empty hint matched nothing: 503');
  });

  await t.test('a GET without a body goes to a ready endpoint at once', async () => {
    const x = new Exchange(client);
    x.send(requestHeaders({ method: 'GET', path: '/v1/models', eos: true }));
    const h = await x.next();
    x.close();
    assert.ok([addr(a), addr(b)].includes(headerOf(h.request_headers?.response, 'x-gateway-destination-endpoint') ?? ''));
  });

  await t.test('BUFFERED mode: headers let through at once, the destination on the body answer', async () => {
    const x = new Exchange(client);
    x.send(requestHeaders({ mode: 'BUFFERED' }));
    const h = await x.next();
    assert.deepEqual(h.request_headers?.response ?? {}, {}, 'an empty header answer, so Envoy sends the body');
    x.send({ request_body: { body: Buffer.from(chat([{ role: 'user', content: 'buffered' }])), end_of_stream: true } });
    const body = await x.next();
    x.close();
    const dest = headerOf(body.request_body?.response, 'x-gateway-destination-endpoint');
    assert.ok(dest !== undefined && dest.split(',').length === 2);
    assert.equal(body.request_body?.response?.clear_route_cache, true);
    assert.equal(body.request_body?.response?.body_mutation, undefined, 'the body is not sent back when unchanged');
  });

  await t.test('a model rewrite changes the body sent on and the model named in the answer', async () => {
    const p = await pickFor(client, JSON.stringify({ model: 'alias', messages: [{ role: 'user', content: 'rewrite me' }] }), { headers: { 'x-gateway-model-name-rewrite': model } });
    assert.equal((JSON.parse(p.forwarded.toString()) as { model: string }).model, model);
    assert.equal(headerOf(p.first.request_headers?.response, 'content-length'), String(p.forwarded.length));
    const back = await respond(p.x, p.destination?.split(',')[0] ?? '', Buffer.from(`{"model":"${model}","choices":[]}`));
    assert.equal(back.toString(), '{"model":"alias","choices":[]}');
  });

  await t.test('a body over 62,000 bytes comes back in chunks no larger', async () => {
    const p = await pickFor(client, chat([{ role: 'user', content: 'long '.repeat(30_000) }]));
    p.x.close();
    assert.ok((p.chunks ?? 0) >= 3);
    assert.equal(p.forwarded.toString(), chat([{ role: 'user', content: 'long '.repeat(30_000) }]));
  });

  await t.test('bad requests get an ImmediateResponse with an OpenAI-style body, and other streams carry on', async () => {
    // A stream left open mid-body the whole time: nothing waits on it.
    const stalled = new Exchange(client);
    stalled.send(requestHeaders({}));
    stalled.send({ request_body: { body: Buffer.from('{"model":"m","mess'), end_of_stream: false } });
    const cases = [
      { why: 'malformed JSON is a 400', body: '{"model": "m", "messages": [', status: 'BadRequest', code: 'bad_json' },
      { why: 'an unknown model is a 404 naming the served ones', body: JSON.stringify({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }), status: 'NotFound', code: 'model_not_found' },
      { why: 'a body over gateway.max_body_bytes is a 413', body: chat([{ role: 'user', content: 'x'.repeat(250_000) }]), status: 'PayloadTooLarge', code: 'body_too_large' },
    ];
    for (const c of cases) {
      const p = await pickFor(client, c.body);
      const ir = p.first.immediate_response;
      assert.equal(ir?.status?.code, c.status, c.why);
      const err = (JSON.parse(ir?.body?.toString() ?? '{}') as { error?: { code?: string; message?: string } }).error;
      assert.equal(err?.code, c.code, c.why);
      assert.ok((err?.message ?? '').length > 0, c.why);
    }
    // A stream closed mid-body is dropped without an answer; the next one is served.
    const cut = new Exchange(client);
    cut.send(requestHeaders({}));
    cut.send({ request_body: { body: Buffer.from('{"model":'), end_of_stream: false } });
    cut.call.cancel();
    const after = await pickFor(client, chat([{ role: 'user', content: 'after the cut' }]));
    after.x.close();
    assert.ok(after.destination !== undefined);
    assert.ok(await counter(epp, 'llmgw_epp_immediate_responses_total') >= 3);
    stalled.close();
  });

  await t.test('gRPC health answers SERVING for the ext_proc service, liveness and readiness', async () => {
    const def = loadSync(healthProto, { keepCase: true, enums: String });
    const pkg = grpc.loadPackageDefinition(def) as unknown as { grpc: { health: { v1: { Health: grpc.ServiceClientConstructor } } } };
    const h = new pkg.grpc.health.v1.Health(`127.0.0.1:${epp.healthPort}`, grpc.credentials.createInsecure()) as unknown as grpc.Client & { Check(r: unknown, cb: (e: Error | null, r?: { status: string }) => void): void };
    t.after(() => h.close());
    for (const service of [extProcService, 'liveness', 'readiness', '']) {
      const r = await new Promise<{ status: string } | undefined>((resolve, reject) => h.Check({ service }, (e, res) => (e === null ? resolve(res) : reject(e))));
      assert.equal(r?.status, 'SERVING', service);
    }
    const text = await (await fetch(`http://127.0.0.1:${epp.metricsPort}/metrics`)).text();
    assert.match(text, /^llmgw_epp_picks_total\{tier="precise"\} \d+/m);
  });

  await t.test('a killed pod drops out of the answers; a pod removed from the file drops out too', async () => {
    await b.kill();
    await waitFor(() => epp.pool.ready(model).length === 1, { timeoutMs: 15_000, what: 'the killed pod out of the ready endpoints' });
    for (let i = 0; i < 3; i++) {
      const p = await pickFor(client, chat([{ role: 'user', content: `after the kill ${i}` }]));
      p.x.close();
      assert.equal(p.destination, addr(a));
    }
    writeFileSync(file, 'endpoints: []\n');
    await waitFor(() => epp.pool.size() === 0, { timeoutMs: 10_000, what: 'the file reloaded without the pods' });
    const p = await pickFor(client, chat([{ role: 'user', content: 'nobody home' }]));
    assert.equal(p.first.immediate_response?.status?.code, 'ServiceUnavailable');
  });
});
