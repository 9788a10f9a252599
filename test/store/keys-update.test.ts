// PATCH /admin/v1/keys/{id} against two gateways sharing one store, on SQLite and PostgreSQL: a
// spent day budget raised through one gateway serves the next request on the other at once (its
// admission reads the limits from the key's row, not from its copy of the keys, which here is never
// refreshed), and a key issued through the other is found; a bad field is a 400 naming it, as create's; an unknown key 404, a revoked or config
// key 400; and `llmgw ctl keys update` does the same over HTTP.
import assert from 'node:assert/strict';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { Registry } from 'prom-client';
import { request } from 'undici';
import { ctlAdmin } from '../../src/cli/ctl-admin.js';
import { gatewayDefaults, hashApiKey, startGateway } from '../../src/gateway/index.js';
import { silentLogger } from '../../src/log/index.js';
import { Store, storeDefaults, type StoreConfig } from '../../src/store/index.js';
import { startFakeEngine } from '../gateway/fake-engine.js';
import { replicaView } from '../gateway/replica-view.js';
import { storeHomes } from '../support/store-homes.js';

const adminKey = 'sk-admin-from-yaml';
const apiKeys = [{ name: 'root', sha256: hashApiKey(adminKey), requestsPerMinute: 0, tokensPerMinute: 0, admin: true }];
const testHomes = storeHomes();

// refresh_ms at its maximum: within a test no gateway re-reads the keys another one changed.
function storeConfig(home: 'sqlite' | 'postgres'): StoreConfig {
  if (home === 'postgres') {
    if (testHomes.pg === undefined) throw new Error('PostgreSQL did not start');
    return { ...storeDefaults, url: testHomes.pg.database(), timeoutMs: 2_000, refreshMs: 600_000 };
  }
  const dir = testHomes.tempDir('llmgw-keys-update-');
  return { ...storeDefaults, path: join(dir, 'llmgw.db'), refreshMs: 600_000 };
}

async function gateway(t: TestContext, c: StoreConfig, engineUrl: URL) {
  const view = replicaView('r0', { url: engineUrl, kvEvents: false });
  const store = await Store.open(c, { stateDir: tmpdir(), configKeys: apiKeys, defaultGatewayId: `gw-${Math.random()}`, log: silentLogger });
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
  const chat = (key: string) => call('POST', '/v1/chat/completions', { key, body: { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 100 } });
  return { gw, call, chat };
}

async function ctlKeys(argv: readonly string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await ctlAdmin('keys', argv, { out: (x) => (out += x), err: (x) => (err += x), readFile: () => '', host: { env: {}, cpus: 1 } });
  return { code, out, err };
}

for (const home of ['sqlite', 'postgres'] as const) {
  void test(`${home}: a spent day budget raised through one gateway serves the next request on another at once`, async (t) => {
    const engine = await startFakeEngine({ id: 'r0' });
    t.after(() => engine.close());
    const c = storeConfig(home);
    const a = await gateway(t, c, engine.url);
    const issued = await a.call('POST', '/admin/v1/keys', { key: adminKey, body: { name: 'tiny', team: 'blue', tokens_per_day: 20 } });
    assert.equal(issued.status, 201, issued.text);
    const secret = String(issued.json.key);
    // Started after the key exists, so it knows the key; it never reads the keys again.
    const b = await gateway(t, c, engine.url);
    const spent = await b.chat(secret);
    assert.equal(spent.status, 429, spent.text);
    assert.equal((spent.json.error as { code: string }).code, 'insufficient_quota');

    const raised = await a.call('PATCH', '/admin/v1/keys/tiny', { key: adminKey, body: { tokens_per_day: 1_000_000, cost_per_month: 5 } });
    assert.equal(raised.status, 200, raised.text);
    const got = await a.call('GET', `/admin/v1/keys/${String(issued.json.id)}`, { key: adminKey });
    assert.deepEqual(raised.json, got.json, 'PATCH answers the key as GET does');
    assert.equal(raised.json.tokens_per_day, 1_000_000);
    assert.equal(raised.json.cost_per_month, 5);
    assert.equal(raised.json.team, 'blue', 'fields left out stay as they were');
    assert.equal(raised.json.key, undefined, 'no secret in the answer');

    assert.equal((await b.chat(secret)).status, 200, 'served on the other gateway without a refresh');
    assert.equal((await a.chat(secret)).status, 200, 'and on the gateway that changed it');
    const lowered = await a.call('PATCH', `/admin/v1/keys/${String(issued.json.id)}`, { key: adminKey, body: { tokens_per_day: 20 } });
    assert.equal(lowered.status, 200, lowered.text);
    assert.equal((await b.chat(secret)).status, 429, 'lowered again, refused again on the other gateway');
    const unlimited = await a.call('PATCH', '/admin/v1/keys/tiny', { key: adminKey, body: { tokens_per_day: 0, cost_per_month: 0 } });
    assert.equal(unlimited.json.tokens_per_day, 0, unlimited.text);
    assert.equal((await b.chat(secret)).status, 200, 'every budget removed, served on the other gateway');

    // Issued through b after a last read the keys: a's update finds it all the same.
    assert.equal((await b.call('POST', '/admin/v1/keys', { key: adminKey, body: { name: 'late' } })).status, 201);
    const late = await a.call('PATCH', '/admin/v1/keys/late', { key: adminKey, body: { tokens_per_month: 10 } });
    assert.equal(late.status, 200, late.text);
  });
}

void test('PATCH /admin/v1/keys/{id}: bad fields 400 naming them, unknown 404, revoked and config keys 400, and ctl keys update', async (t) => {
  const engine = await startFakeEngine({ id: 'r0' });
  t.after(() => engine.close());
  const s = await gateway(t, storeConfig('sqlite'), engine.url);
  const issued = await s.call('POST', '/admin/v1/keys', { key: adminKey, body: { name: 'app', models: ['other'], expires_in_days: 30 } });
  assert.equal(issued.status, 201, issued.text);
  const cases: readonly { body: unknown; field: string }[] = [
    { body: { tokens_per_day: 1.5 }, field: 'tokens_per_day' },
    { body: { cost_per_day: -1 }, field: 'cost_per_day' },
    { body: { models: 'm' }, field: 'models' },
    { body: { priority: 'urgent' }, field: 'priority' },
    { body: { expires_at: '2001-01-01' }, field: 'expires_at' },
    { body: { colour: 'red' }, field: 'colour' },
    { body: { name: 'renamed' }, field: 'name' },
    { body: { admin: true }, field: 'admin' },
  ];
  for (const c of cases) {
    const r = await s.call('PATCH', '/admin/v1/keys/app', { key: adminKey, body: c.body });
    assert.equal(r.status, 400, `${JSON.stringify(c.body)}: ${r.text}`);
    assert.equal((r.json.error as { param: string }).param, c.field);
  }
  assert.equal((await s.call('GET', '/admin/v1/keys/app', { key: adminKey })).json.priority, 'standard', 'a refused patch changes nothing');
  assert.equal((await s.call('PATCH', '/admin/v1/keys/app', { key: adminKey, body: '[1]' })).status, 400);
  assert.equal((await s.call('PATCH', '/admin/v1/keys/nobody', { key: adminKey, body: { tokens_per_day: 1 } })).status, 404);
  assert.equal((await s.call('PATCH', '/admin/v1/keys/root', { key: adminKey, body: { tokens_per_day: 1 } })).status, 400, 'a gateway.api_keys key is read-only');
  assert.equal((await s.call('PATCH', '/admin/v1/keys/app', { body: { tokens_per_day: 1 } })).status, 401);

  // The key may use "other" only: widened to every model, it is served "m".
  assert.equal((await s.chat(String(issued.json.key))).status, 403);
  const url = s.gw.url.href;
  const widened = await ctlKeys(['update', 'app', '--url', url, '--key', adminKey, '--models', '*', '--tokens-per-day', '5000', '--priority', 'batch']);
  assert.equal(widened.code, 0, widened.err);
  assert.match(widened.out, /^id\s+name\s+team\s+models\s+rpm\s+tpm\s+tokens\/day.*\nkey_\w+\s+app\s+app\s+\*\s+0\s+0\s+5000\s/);
  assert.equal((await s.chat(String(issued.json.key))).status, 200);
  const k = (await s.call('GET', '/admin/v1/keys/app', { key: adminKey })).json;
  assert.equal(k.priority, 'batch');
  assert.notEqual(k.expires_at, null, 'the expiry stays unless changed');
  assert.equal((await s.call('PATCH', '/admin/v1/keys/app', { key: adminKey, body: { expires_at: null } })).json.expires_at, null, 'null clears the expiry');
  const bad = await ctlKeys(['update', 'app', '--url', url, '--key', adminKey, '--tokens-per-day', 'lots']);
  assert.equal(bad.code, 1);
  assert.match(bad.err, /400: tokens_per_day: "lots" is not a whole number/);
  assert.equal((await ctlKeys(['update', '--url', url])).code, 2, 'update without a key is a usage error');

  assert.equal((await s.call('POST', '/admin/v1/keys/app/revoke', { key: adminKey })).status, 200);
  const revoked = await s.call('PATCH', '/admin/v1/keys/app', { key: adminKey, body: { tokens_per_day: 1 } });
  assert.equal(revoked.status, 400);
  assert.match(revoked.text, /revoked; issue a new key/);
});
