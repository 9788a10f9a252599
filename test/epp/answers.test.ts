// What the EPP answers besides a destination, against one sim pod: 429 when admission sheds a
// tenant's excess (tenants told apart by x-gateway-inference-fairness-id), 503 when no endpoint is
// ready (a GET too), the client's own headers set back in full duplex without the EPP's control
// headers, Envoy's fallback to another endpoint counted, a path not routed by prompt sent on as is,
// and Messages and Responses bodies routed by the chat they become; a queued stream Envoy cancels
// leaves the queue, an oversize body is refused at the bound, a subset hint matches by address, and
// a rewritten model split across two answer messages is still rewritten.
import { strict as assert } from 'node:assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { parse } from 'yaml';
import { fileDiscovery, parseEppConfig, startEpp, type Epp } from '../../src/epp/index.js';
import { waitFor } from '../support/wait.js';
import { endpointsFile, Exchange, extProcClient, headerOf, pickFor, requestHeaders, respond, startSimPod, type Answer } from './envoy.js';

const model = 'm';
const ask = (content: string): string => JSON.stringify({ model, messages: [{ role: 'user', content }], max_tokens: 4 });

async function metric(epp: Epp, name: string, labels: Record<string, string> = {}): Promise<number> {
  const m = await epp.registry.getSingleMetric(name)?.get();
  return (m?.values ?? []).filter((v) => Object.entries(labels).every(([k, x]) => v.labels[k] === x)).reduce((n, v) => n + v.value, 0);
}

void test('epp answers: shedding, no endpoint, headers, fallbacks, unrouted paths', { timeout: 180_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-epp-answers-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const pod = await startSimPod(t, 'pod-a', model);
  const file = join(dir, 'endpoints.yaml');
  writeFileSync(file, endpointsFile([pod]));
  // One request waiting for its first byte saturates the pod; the queue holds one more.
  const config = parseEppConfig(
    parse(`
discovery: { file: ${JSON.stringify(file)}, poll_ms: 50 }
pool: { models: [${model}], tokenizer: bytes, health_interval_ms: 100 }
listen: { host: 127.0.0.1, ext_proc_port: 0, health_port: 0, metrics_port: 0 }
gateway:
  max_body_bytes: 100000
  admission: { max_waiting_per_replica: 1, max_queued_requests: 1, reserved_per_class: 0, reserved_replicas: 0 }
`),
  );
  const epp = await startEpp(config, fileDiscovery({ path: file, pollMs: 50 }));
  t.after(() => epp.close());
  await epp.whenReady();
  const client = extProcClient(t, epp.extProcPort);
  await waitFor(() => epp.pool.ready(model).length === 1, { timeoutMs: 20_000, what: 'the pod healthy' });
  const dest = `${pod.host}:${pod.port}`;

  await t.test('429 when admission sheds: a tenant under its share displaces the excess of one over it', async () => {
    const first = await pickFor(client, ask('first of A'), { headers: { 'x-gateway-inference-fairness-id': 'tenant-a' } });
    assert.equal(first.destination, dest, 'A takes the only waiting place');
    const queuedA = new Exchange(client);
    queuedA.send(requestHeaders({ headers: { 'x-gateway-inference-fairness-id': 'tenant-a' } }));
    queuedA.send({ request_body: { body: Buffer.from(ask('second of A')), end_of_stream: true } });
    await waitFor(async () => (await metric(epp, 'llmgw_admission_queue_depth')) === 1, { what: "A's second request queued" });
    const queuedB = new Exchange(client);
    queuedB.send(requestHeaders({ headers: { 'x-gateway-inference-fairness-id': 'tenant-b' } }));
    queuedB.send({ request_body: { body: Buffer.from(ask('first of B')), end_of_stream: true } });
    const shed: Answer = await queuedA.next();
    assert.equal(shed.immediate_response?.status?.code, 'TooManyRequests', "A's excess is shed for B, a tenant with nothing queued");
    const err = (JSON.parse(shed.immediate_response?.body?.toString() ?? '{}') as { error?: { code?: string; message?: string } }).error;
    assert.equal(err?.code, 'rate_limit_exceeded');
    assert.match(err?.message ?? '', /displaced from the full admission queue/);
    assert.ok(shed.immediate_response?.headers?.set_headers?.some((h) => h.header?.key === 'retry-after'), 'Retry-After tells Envoy when to come back');
    // A's first answer starting frees the waiting place: B's request is dispatched.
    await respond(first.x, dest, Buffer.from('{"choices":[]}'));
    const b = await queuedB.next();
    assert.equal(headerOf(b.request_headers?.response, 'x-gateway-destination-endpoint'), dest);
    queuedB.close();
    assert.equal(await metric(epp, 'llmgw_epp_immediate_responses_total', { status: '429' }), 1);
  });

  await t.test('a stream Envoy cancels while its request is queued leaves the queue at once', async () => {
    const held = await pickFor(client, ask('holds the place'), { headers: { 'x-gateway-inference-fairness-id': 'tenant-d' } });
    assert.equal(held.destination, dest);
    const queued = new Exchange(client);
    queued.send(requestHeaders({ headers: { 'x-gateway-inference-fairness-id': 'tenant-d' } }));
    queued.send({ request_body: { body: Buffer.from(ask('queued, then cancelled')), end_of_stream: true } });
    await waitFor(async () => (await metric(epp, 'llmgw_admission_queue_depth')) === 1, { what: 'the request queued' });
    queued.call.cancel();
    await waitFor(async () => (await metric(epp, 'llmgw_admission_queue_depth')) === 0, { what: 'the cancelled request out of the queue' });
    await respond(held.x, dest, Buffer.from('{"choices":[]}'));
    const next = await pickFor(client, ask('after the cancel'));
    next.x.close();
    assert.equal(next.destination, dest, 'the place is free again');
  });

  await t.test('a body over max_body_bytes is refused as soon as the bound is passed, before the rest arrives', async () => {
    const x = new Exchange(client);
    x.send(requestHeaders({}));
    for (let i = 0; i < 3; i++) x.send({ request_body: { body: Buffer.alloc(40_000, 0x61), end_of_stream: false } });
    const a = await x.next();
    assert.equal(a.immediate_response?.status?.code, 'PayloadTooLarge');
    x.close();
  });

  await t.test('a subset hint names pods by address: an entry with another port still selects the pod', async () => {
    const p = await pickFor(client, ask('by address'), { subset: [`${pod.host}:1`] });
    p.x.close();
    assert.equal(p.destination, dest);
  });

  await t.test('a rewritten model in a JSON answer split across two messages is still given back as the client named it', async () => {
    const p = await pickFor(client, JSON.stringify({ model: 'alias', messages: [{ role: 'user', content: 'split' }] }), { headers: { 'x-gateway-model-name-rewrite': model } });
    p.x.send({ response_headers: { headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }, { key: 'content-type', raw_value: Buffer.from('application/json') }] } } });
    await p.x.next();
    const answer = `{"id":"x","model":"${model}","choices":[]}`;
    const cut = answer.indexOf(model) + 1;
    p.x.send({ response_body: { body: Buffer.from(answer.slice(0, cut)), end_of_stream: false } });
    p.x.send({ response_body: { body: Buffer.from(answer.slice(cut)), end_of_stream: true } });
    const parts: Buffer[] = [];
    for (;;) {
      const s = (await p.x.next()).response_body?.response?.body_mutation?.streamed_response;
      parts.push(s?.body ?? Buffer.alloc(0));
      if (s?.end_of_stream === true) break;
    }
    p.x.close();
    assert.equal(Buffer.concat(parts).toString(), '{"id":"x","model":"alias","choices":[]}');
  });

  await t.test("full duplex sets the client's own headers back, not the EPP's control headers, with the body's length", async () => {
    const p = await pickFor(client, ask('headers'), { headers: { 'x-client-trace': 'abc', 'x-gateway-inference-fairness-id': 'tenant-c', 'x-gateway-inference-objective': 'chat' } });
    const set = (p.first.request_headers?.response?.header_mutation?.set_headers ?? []).map((h) => h.header?.key);
    assert.ok(set.includes('x-client-trace'));
    for (const owned of ['x-gateway-inference-fairness-id', 'x-gateway-inference-objective', ':path', ':authority']) assert.ok(!set.includes(owned), owned);
    assert.equal(headerOf(p.first.request_headers?.response, 'content-length'), String(Buffer.byteLength(ask('headers'))));
    // Envoy says it served another endpoint of the list: counted as a fallback.
    await respond(p.x, '10.9.9.9:8000', Buffer.from('{"choices":[]}'));
    assert.equal(await metric(epp, 'llmgw_epp_served_total', { outcome: 'fallback' }), 1);
  });

  await t.test('a path not routed by prompt goes to a ready endpoint with its body as it came', async () => {
    const body = JSON.stringify({ model, input: 'embed me' });
    const p = await pickFor(client, body, { path: '/v1/embeddings' });
    p.x.close();
    assert.equal(p.destination, dest);
    assert.equal(p.forwarded.toString(), body);
    assert.ok((await metric(epp, 'llmgw_epp_picks_total', { tier: 'any' })) >= 1);
  });

  await t.test('Messages and Responses bodies are routed by the chat they become, sent on as they came', async () => {
    const bodies = [
      { path: '/v1/messages', body: JSON.stringify({ model, max_tokens: 8, system: 'be brief', messages: [{ role: 'user', content: 'an Anthropic turn' }] }) },
      { path: '/v1/responses', body: JSON.stringify({ model, instructions: 'be brief', input: 'a Responses turn', max_output_tokens: 8 }) },
    ];
    for (const b of bodies) {
      const any = await metric(epp, 'llmgw_epp_picks_total', { tier: 'any' });
      const p = await pickFor(client, b.body, { path: b.path });
      p.x.close();
      assert.equal(p.destination, dest, b.path);
      assert.equal(p.forwarded.toString(), b.body, `${b.path}: the pod gets the client's bytes`);
      assert.equal(await metric(epp, 'llmgw_epp_picks_total', { tier: 'any' }), any, `${b.path}: decided by prompt, not sent anywhere`);
    }
    const bad = await pickFor(client, JSON.stringify({ model, max_tokens: 8, messages: 'not a list' }), { path: '/v1/messages' });
    assert.equal(bad.first.immediate_response?.status?.code, 'BadRequest', 'a malformed Messages body is a 400');
  });

  await t.test('503 when no endpoint is ready, for a POST and for a GET', async () => {
    await pod.kill();
    await waitFor(() => epp.pool.ready(model).length === 0, { timeoutMs: 15_000, what: 'the killed pod unready' });
    const post = await pickFor(client, ask('nobody'));
    assert.equal(post.first.immediate_response?.status?.code, 'ServiceUnavailable');
    assert.match(post.first.immediate_response?.body?.toString() ?? '', /has no ready endpoint/);
    const get = new Exchange(client);
    get.send(requestHeaders({ method: 'GET', path: '/v1/models', eos: true }));
    const g = await get.next();
    get.close();
    assert.equal(g.immediate_response?.status?.code, 'ServiceUnavailable');
    assert.ok((await metric(epp, 'llmgw_epp_immediate_responses_total', { status: '503', stage: 'headers' })) >= 1);
  });
});
