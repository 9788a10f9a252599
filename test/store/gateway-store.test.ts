// The gateway with a store, against a fake engine: the admin API issues and revokes keys (admin key
// required, every input checked), a revoked key is refused on its next request, every request leaves
// one ledger row whose answer ended only after the row was committed, budgets and allowed models are
// enforced, and a limited key's request fails closed with a clear 503 while PostgreSQL is down.
import assert from 'node:assert/strict';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { Registry } from 'prom-client';
import { request } from 'undici';
import { ctlAdmin } from '../../src/cli/ctl-admin.js';
import { gatewayDefaults, hashApiKey, startGateway } from '../../src/gateway/index.js';
import type { ReplicaView } from '../../src/routing/index.js';
import { silentLogger } from '../../src/log/index.js';
import { Store, storeDefaults, type StoreConfig } from '../../src/store/index.js';
import { startFakeEngine } from '../gateway/fake-engine.js';
import { storeHomes } from '../support/store-homes.js';
import { waitFor } from '../support/wait.js';

const adminKey = 'sk-admin-from-yaml';
const testHomes = storeHomes();

// `llmgw ctl usage ARGV` as the CLI runs it: over HTTP to the gateway named by --url.
async function ctlUsage(argv: readonly string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await ctlAdmin('usage', argv, {
    out: (t) => (out += t),
    err: (t) => (err += t),
    readFile: () => '',
    host: { env: {}, cpus: 1 },
  });
  return { code, out, err };
}

function storeConfig(home: 'sqlite' | 'postgres'): StoreConfig {
  if (home === 'postgres') {
    if (testHomes.pg === undefined) throw new Error('PostgreSQL did not start');
    return { ...storeDefaults, url: testHomes.pg.database(), timeoutMs: 1_000 };
  }
  const dir = testHomes.tempDir('llmgw-gw-store-');
  return { ...storeDefaults, path: join(dir, 'llmgw.db') };
}

async function setup(t: TestContext, home: 'sqlite' | 'postgres') {
  const engine = await startFakeEngine({ id: 'r0' });
  t.after(() => engine.close());
  const view: ReplicaView = {
    id: 'r0',
    node: 'local',
    model: 'm',
    adapters: [],
    url: engine.url,
    apiKey: undefined,
    generation: 1,
    kvEvents: false,
    blockSizeTokens: 16,
    hashSeed: '0',
    dataParallelSize: 1,
  };
  const apiKeys = [{ name: 'root', sha256: hashApiKey(adminKey), requestsPerMinute: 0, tokensPerMinute: 0, admin: true }];
  const store = await Store.open(storeConfig(home), { stateDir: tmpdir(), configKeys: apiKeys, defaultGatewayId: 'gw', log: silentLogger });
  t.after(() => store.close());
  const gw = await startGateway({
    config: { ...gatewayDefaults, port: 0, apiKeys, router: { ...gatewayDefaults.router, loadPollIntervalMs: 0 } },
    directory: { ready: (m: string) => (m === 'm' ? [view] : []), models: () => ['m', 'other'] },
    registry: new Registry(),
    store,
    whenStoreDown: 'fail_closed',
  });
  t.after(() => gw.close());
  const call = async (method: string, path: string, o: { key?: string; body?: unknown } = {}) => {
    const res = await request(new URL(path, gw.url), {
      method: method as 'GET',
      headers: { 'content-type': 'application/json', ...(o.key === undefined ? {} : { authorization: `Bearer ${o.key}` }) },
      body: o.body === undefined ? undefined : JSON.stringify(o.body),
      signal: AbortSignal.timeout(10_000),
    });
    const text = await res.body.text();
    return { status: res.statusCode, text, json: (text.startsWith('{') ? JSON.parse(text) : {}) as Record<string, unknown> };
  };
  const chat = (key: string, extra: Record<string, unknown> = {}) => call('POST', '/v1/chat/completions', { key, body: { model: 'm', messages: [{ role: 'user', content: 'hi' }], ...extra } });
  const issue = async (body: Record<string, unknown>): Promise<string> => {
    const r = await call('POST', '/admin/v1/keys', { key: adminKey, body });
    assert.equal(r.status, 201, r.text);
    return String(r.json.key);
  };
  return { gw, store, engine, call, chat, issue };
}

for (const home of ['sqlite', 'postgres'] as const) {
  void test(`${home}: every answered request has its ledger row, streamed ones before their [DONE]`, async (t) => {
    const s = await setup(t, home);
    const key = await s.issue({ name: 'app', team: 'blue' });
    assert.equal((await s.chat(key)).status, 200);
    const streamed = await s.chat(key, { stream: true });
    assert.equal(streamed.status, 200);
    assert.match(streamed.text, /data: \[DONE\]\n\n$/);
    const rows = await s.store.db.all('SELECT key_name, team, model, replica, status, prompt_tokens, completion_tokens, ttft_ms FROM usage_ledger ORDER BY id');
    assert.equal(rows.length, 2);
    for (const r of rows) {
      assert.equal(r.key_name, 'app');
      assert.equal(r.team, 'blue');
      assert.equal(r.replica, 'r0');
      assert.equal(r.status, 200);
      assert.equal(r.completion_tokens, 3);
      assert.ok(Number(r.prompt_tokens) > 0);
    }
    const usage = await s.call('GET', '/admin/v1/usage?group_by=key,team&format=csv', { key: adminKey });
    assert.match(usage.text, /^key,team,requests,.*\r\napp,blue,2,/);
    const json = await s.call('GET', '/admin/v1/usage?group_by=key,team', { key: adminKey });
    const [app] = json.json.data as Record<string, unknown>[];
    assert.deepEqual(Object.keys(app ?? {}), ['key', 'team', 'requests', 'prompt_tokens', 'cached_tokens', 'completion_tokens', 'cost_usd'], 'named as the CSV and OpenAI usage objects');
    assert.equal(app?.completion_tokens, 6);
    const table = await ctlUsage(['--url', s.gw.url.href, '--key', adminKey, '--group-by', 'key,team']);
    assert.equal(table.code, 0, table.err);
    assert.match(table.out, /^key\s+team\s+requests\s+prompt_tokens\s+cached_tokens\s+completion_tokens\s+cost_usd\napp\s+blue\s+2\s+\d+\s+\d+\s+6\s+0\.0000\n$/);
  });

  void test(`${home}: a key revoked through the admin API is refused on its next request`, async (t) => {
    const s = await setup(t, home);
    const key = await s.issue({ name: 'leaver', tokens_per_month: 1_000_000 });
    assert.equal((await s.chat(key)).status, 200);
    const revoked = await s.call('POST', '/admin/v1/keys/leaver/revoke', { key: adminKey });
    assert.equal(revoked.status, 200, revoked.text);
    const refused = await s.chat(key);
    assert.equal(refused.status, 401);
    assert.match(refused.text, /revoked/);
  });
}

void test('admin API: refused without an admin key, and every bad input is a 400 naming its field', async (t) => {
  const s = await setup(t, 'sqlite');
  assert.equal((await s.call('GET', '/admin/v1/keys')).status, 401);
  const user = await s.issue({ name: 'plain' });
  const forbidden = await s.call('GET', '/admin/v1/keys', { key: user });
  assert.equal(forbidden.status, 403);
  const cases: readonly { body: unknown; field: string }[] = [
    { body: {}, field: 'name' },
    { body: { name: 'x', tokens_per_day: 1.5 }, field: 'tokens_per_day' },
    { body: { name: 'x', models: 'm' }, field: 'models' },
    { body: { name: 'x', priority: 'urgent' }, field: 'priority' },
    { body: { name: 'x', expires_at: '2001-01-01' }, field: 'expires_at' },
    { body: { name: 'x', colour: 'red' }, field: 'colour' },
  ];
  for (const c of cases) {
    const r = await s.call('POST', '/admin/v1/keys', { key: adminKey, body: c.body });
    assert.equal(r.status, 400, `${JSON.stringify(c.body)}: ${r.text}`);
    const err = r.json.error as { param: string; message: string };
    assert.equal(err.param, c.field);
  }
  assert.equal((await s.call('GET', '/admin/v1/usage?group_by=colour', { key: adminKey })).status, 400);
  assert.equal((await s.call('GET', '/admin/v1/nothing', { key: adminKey })).status, 404);
  assert.equal((await s.call('PUT', '/admin/v1/keys', { key: adminKey })).status, 405);
  const list = await s.call('GET', '/admin/v1/keys', { key: adminKey });
  assert.ok(!list.text.includes(user) && !list.text.includes('sha256'), 'neither secrets nor hashes are listed');
});

void test('a key refused a model, an expired key, and a spent budget each get their own answer', async (t) => {
  const s = await setup(t, 'sqlite');
  const narrow = await s.issue({ name: 'narrow', models: ['other'] });
  const r403 = await s.chat(narrow);
  assert.equal(r403.status, 403);
  assert.match((r403.json.error as { message: string }).message, /may not use model "m"/);
  const tiny = await s.issue({ name: 'tiny', tokens_per_day: 20 });
  const spent = await s.chat(tiny, { max_tokens: 100 });
  assert.equal(spent.status, 429);
  assert.equal((spent.json.error as { code: string }).code, 'insufficient_quota');
  // About 0.9 s to live: served now, refused once it has passed.
  const soon = await s.issue({ name: 'soon', expires_in_days: 0.00001 });
  await waitFor(async () => (await s.chat(soon)).status === 401, { timeoutMs: 10_000, intervalMs: 200, what: 'the key to expire' });
  assert.match((await s.chat(soon)).text, /expired at/);
});

void test('postgres down, fail_closed: a limited key gets a 503 at once, an unlimited one is served and its row waits', async (t) => {
  const s = await setup(t, 'postgres');
  const limited = await s.issue({ name: 'limited', tokens_per_day: 1_000_000 });
  const free = await s.issue({ name: 'free' });
  testHomes.pg?.stop();
  t.after(() => testHomes.pg?.start());
  const r503 = await s.chat(limited);
  assert.equal(r503.status, 503);
  assert.equal((r503.json.error as { code: string }).code, 'store_down');
  const served = await s.chat(free);
  assert.equal(served.status, 200);
  assert.equal(s.store.ledger.pendingRows, 2, 'both rows are kept to write when the database is back');
});
