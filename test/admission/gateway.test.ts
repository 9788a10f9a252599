// Admission through the gateway's HTTP path, against fake engines that hang on request: saturated
// replicas make a request queue, a queued conversation still goes where its prefix is when it is
// dispatched, a request that cannot wait is refused with 503 and Retry-After, and each request's
// class reaches the engines that schedule by priority (and no other).
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { Registry } from 'prom-client';
import { request } from 'undici';
import { admissionDefaults } from '../../src/admission/index.js';
import type { GatewayConfig } from '../../src/gateway/index.js';
import { gatewayDefaults, hashApiKey, startGateway } from '../../src/gateway/index.js';
import type { ReplicaView } from '../../src/routing/index.js';
import { startFakeEngine } from '../gateway/fake-engine.js';
import { replicaView } from '../gateway/replica-view.js';
import type { FakeEngine } from '../gateway/fake-engine.js';
import { queueRowsOf, queueTable } from '../../src/cli/ctl-status.js';
import { waitFor } from '../support/wait.js';

const keys = { chat: 'sk-chat', etl: 'sk-etl', ops: 'sk-ops' };

async function setup(t: import('node:test').TestContext, o: { schedulesByPriority?: boolean; admission?: Partial<GatewayConfig['admission']> } = {}) {
  const engines: FakeEngine[] = [];
  for (const id of ['r0', 'r1']) {
    const e = await startFakeEngine({ id });
    t.after(() => e.close());
    engines.push(e);
  }
  const views: ReplicaView[] = engines.map((e) => replicaView(e.id, { url: e.url, kvEvents: false, schedulesByPriority: o.schedulesByPriority }));
  const config: GatewayConfig = {
    ...gatewayDefaults,
    port: 0,
    apiKeys: [
      { name: 'chat', sha256: hashApiKey(keys.chat), requestsPerMinute: 0, tokensPerMinute: 0, admin: false, priority: 'interactive' },
      { name: 'etl', sha256: hashApiKey(keys.etl), requestsPerMinute: 0, tokensPerMinute: 0, admin: false, priority: 'batch' },
      { name: 'ops', sha256: hashApiKey(keys.ops), requestsPerMinute: 0, tokensPerMinute: 0, admin: true },
    ],
    router: { ...gatewayDefaults.router, loadPollIntervalMs: 0 },
    admission: { ...admissionDefaults, maxWaitingPerReplica: 1, ...o.admission },
  };
  const registry = new Registry();
  const gw = await startGateway({ config, directory: { ready: (m) => (m === 'm' ? views : []), models: () => ['m'] }, registry });
  t.after(() => gw.close());
  return { gw, engines, registry };
}

function chat(gw: { url: URL }, content: string, o: { key?: string; headers?: Record<string, string>; signal?: AbortSignal; extra?: Record<string, unknown> } = {}) {
  return request(new URL('/v1/chat/completions', gw.url), {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${o.key ?? keys.chat}`, ...o.headers },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content }], ...o.extra }),
    signal: o.signal ?? AbortSignal.timeout(10_000),
  });
}

// Both replicas busy with one hung request each: saturated at max_waiting_per_replica 1.
async function saturate(gw: { url: URL }, engines: FakeEngine[]): Promise<() => void> {
  for (const e of engines) e.mode = 'hang';
  const clients = engines.map(() => new AbortController());
  const hung = clients.map((c, i) => chat(gw, `hung request ${i}`, { signal: c.signal }).catch(() => undefined));
  await waitFor(() => engines.every((e) => e.seen.length > 0 && e.seen.at(-1)?.body.messages !== undefined && JSON.stringify(e.seen).includes('hung request')), { what: 'both replicas hold a hung request' });
  for (const e of engines) e.mode = 'ok';
  return () => {
    for (const c of clients) c.abort();
    void Promise.all(hung);
  };
}

const depth = async (registry: Registry): Promise<number> => {
  const m = /llmgw_admission_queue_depth\{model="m",priority="interactive"\} (\d+)/.exec(await registry.metrics());
  return Number(m?.[1] ?? 0);
};

void test('gateway admission: saturated replicas queue the request; dispatched, it still goes where its prefix is', async (t) => {
  const { gw, engines, registry } = await setup(t);
  const prefix = 'You are a careful assistant. '.repeat(60);
  const first = await chat(gw, prefix + 'first question');
  const holder = String(first.headers['x-llmgw-replica']);
  await first.body.text();
  const release = await saturate(gw, engines);
  const next = chat(gw, prefix + 'first question and a follow-up');
  await waitFor(async () => (await depth(registry)) === 1, { what: 'the follow-up in the admission queue' });
  const shown = await request(new URL('/debug/queues', gw.url), { headers: { authorization: `Bearer ${keys.ops}` }, signal: AbortSignal.timeout(10_000) });
  const rows = queueRowsOf(await shown.body.json());
  assert.deepEqual(rows.map((r) => [r.model, r.queued, r.byClass.interactive]), [['m', 1, 1]]);
  assert.match(queueTable(rows), /^MODEL +QUEUED +BY CLASS +MIB\nm +1 +interactive 1, standard 0, batch 0 +0\.0\n$/);
  release();
  const res = await next;
  await res.body.text();
  assert.equal(res.statusCode, 200);
  assert.equal(res.headers['x-llmgw-replica'], holder, 'routed by its prefix when dispatched');
  assert.equal(res.headers['x-llmgw-route'], 'approximate');
  assert.match(String(res.headers['x-llmgw-receipt']), /queued=\d+ms/);
  const metrics = await registry.metrics();
  assert.match(metrics, /llmgw_admission_admitted_total\{model="m",priority="interactive",via="queued"\} 1/);
});

void test('gateway admission: routing places a request only where admission let its class go, even against its prefix', async (t) => {
  // No replica kept free: with two, batch would wait for the interactive first token instead.
  const { gw, engines } = await setup(t, { admission: { reservedReplicas: 0 } });
  const prefix = 'You are a careful assistant. '.repeat(60);
  const first = await chat(gw, prefix + 'first question');
  const holder = engines.find((e) => e.id === first.headers['x-llmgw-replica']);
  assert.ok(holder !== undefined);
  await first.body.text();
  holder.mode = 'hang';
  const client = new AbortController();
  t.after(() => client.abort());
  const held = chat(gw, prefix + 'an interactive follow-up', { signal: client.signal }).catch(() => undefined);
  t.after(() => held);
  await waitFor(() => JSON.stringify(holder.seen).includes('an interactive follow-up'), { what: 'the interactive follow-up on the prefix holder, awaiting its first token' });
  holder.mode = 'ok';
  const batch = await chat(gw, prefix + 'a batch follow-up', { key: keys.etl });
  await batch.body.text();
  assert.equal(batch.statusCode, 200);
  assert.notEqual(batch.headers['x-llmgw-replica'], holder.id, 'the holder awaits an interactive first token: no batch prompt joins its step');
});

void test('gateway admission: a request that may not wait is refused with 503, its reason and Retry-After', async (t) => {
  const { gw, engines, registry } = await setup(t);
  const release = await saturate(gw, engines);
  t.after(release);
  const res = await chat(gw, 'in a hurry', { headers: { 'x-llmgw-max-wait-ms': '0' } });
  const body = (await res.body.json()) as { error: { code: string; message: string } };
  assert.equal(res.statusCode, 503);
  assert.equal(body.error.code, 'queue_deadline');
  assert.match(body.error.message, /every replica is saturated/);
  assert.ok(Number(res.headers['retry-after']) >= 1);
  assert.match(await registry.metrics(), /llmgw_admission_refused_total\{model="m",priority="interactive",reason="deadline"\} 1/);
});

void test('gateway admission: a client that leaves the queue is gone from it at once', async (t) => {
  const { gw, engines, registry } = await setup(t);
  const release = await saturate(gw, engines);
  t.after(release);
  const client = new AbortController();
  const waiting = chat(gw, 'will give up', { signal: client.signal }).catch((e: unknown) => e);
  await waitFor(async () => (await depth(registry)) === 1, { what: 'the request in the admission queue' });
  client.abort();
  await waiting;
  await waitFor(async () => (await depth(registry)) === 0, { what: 'the queue empty again' });
});

void test('gateway admission: the class goes to engines that schedule by priority, never above the key\'s', async (t) => {
  const { gw, engines } = await setup(t, { schedulesByPriority: true });
  for (const [key, headers, want] of [
    [keys.chat, {}, -1],
    [keys.chat, { 'x-llmgw-priority': 'batch' }, 1],
    [keys.etl, { 'x-llmgw-priority': 'interactive' }, 1],
  ] as const) {
    const res = await chat(gw, `hi ${want}`, { key, headers });
    await res.body.text();
    assert.equal(res.statusCode, 200);
    assert.equal(engines.flatMap((e) => e.seen).at(-1)?.body.priority, want);
  }
});

void test('gateway admission: an engine that does not schedule by priority never sees one, even the client\'s', async (t) => {
  const { gw, engines } = await setup(t);
  const res = await chat(gw, 'hi', { extra: { priority: 'batch' } });
  await res.body.text();
  assert.equal(res.statusCode, 200);
  assert.equal(Object.hasOwn(engines.flatMap((e) => e.seen).at(-1)?.body ?? {}, 'priority'), false);
  const bad = await chat(gw, 'hi', { headers: { 'x-llmgw-priority': 'urgent' } });
  assert.equal(bad.statusCode, 400);
  assert.match(((await bad.body.json()) as { error: { message: string } }).error.message, /interactive, standard, batch/);
});
