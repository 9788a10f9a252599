// Embeddings under the same keys and ledger as a chat, in both stores: a key is required, each
// answer leaves one ledger row (endpoint embeddings, its prompt tokens, no completion) committed
// before the answer ends, a key may not embed with a model it is not allowed, and a spent budget
// is refused with OpenAI's insufficient_quota.
import assert from 'node:assert/strict';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { Registry } from 'prom-client';
import { request } from 'undici';
import { gatewayDefaults, hashApiKey, startGateway } from '../../src/gateway/index.js';
import { silentLogger } from '../../src/log/index.js';
import { startSim } from '../../src/sim/index.js';
import { Store, storeDefaults, type StoreConfig } from '../../src/store/index.js';
import { replicaView } from '../gateway/replica-view.js';
import { storeHomes } from '../support/store-homes.js';

const adminKey = 'sk-admin-from-yaml';
const testHomes = storeHomes();

function storeConfig(home: 'sqlite' | 'postgres'): StoreConfig {
  if (home === 'postgres') {
    if (testHomes.pg === undefined) throw new Error('PostgreSQL did not start');
    return { ...storeDefaults, url: testHomes.pg.database(), timeoutMs: 1_000 };
  }
  const dir = testHomes.tempDir('llmgw-embed-store-');
  return { ...storeDefaults, path: join(dir, 'llmgw.db') };
}

async function setup(t: TestContext, home: 'sqlite' | 'postgres') {
  const sim = await startSim({ model: 'embed', port: 0, tokenizer: 'bytes', runner: 'pooling', embeddingDimensions: 32 });
  t.after(() => sim.close());
  await sim.ready;
  const view = replicaView('e0', { model: 'embed', url: new URL(sim.url), kvEvents: false, embeds: true });
  const apiKeys = [{ name: 'root', sha256: hashApiKey(adminKey), requestsPerMinute: 0, tokensPerMinute: 0, admin: true }];
  const store = await Store.open(storeConfig(home), { stateDir: tmpdir(), configKeys: apiKeys, defaultGatewayId: 'gw', log: silentLogger });
  t.after(() => store.close());
  const gw = await startGateway({
    config: { ...gatewayDefaults, port: 0, apiKeys, router: { ...gatewayDefaults.router, loadPollIntervalMs: 0 } },
    directory: { ready: (m: string) => (m === 'embed' ? [view] : []), models: () => ['embed', 'other'] },
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
  const embed = (key: string | undefined, input: unknown = 'hello') => call('POST', '/v1/embeddings', { key, body: { model: 'embed', input } });
  const issue = async (body: Record<string, unknown>): Promise<string> => {
    const r = await call('POST', '/admin/v1/keys', { key: adminKey, body });
    assert.equal(r.status, 201, r.text);
    return String(r.json.key);
  };
  return { store, embed, issue };
}

for (const home of ['sqlite', 'postgres'] as const) {
  void test(`${home}: embeddings need a key, leave one ledger row each, and keep to the key's models and budget`, async (t) => {
    const s = await setup(t, home);
    assert.equal((await s.embed(undefined)).status, 401);
    const key = await s.issue({ name: 'app', team: 'blue' });
    const one = await s.embed(key, ['hello', 'world!']);
    assert.equal(one.status, 200, one.text);
    assert.equal((one.json.usage as { prompt_tokens: number }).prompt_tokens, 11);
    const rows = await s.store.db.all('SELECT key_name, team, model, endpoint, replica, status, prompt_tokens, completion_tokens FROM usage_ledger ORDER BY id');
    assert.equal(rows.length, 1, 'committed before the answer ended');
    assert.deepEqual({ ...rows[0] }, { key_name: 'app', team: 'blue', model: 'embed', endpoint: 'embeddings', replica: 'e0', status: 200, prompt_tokens: 11, completion_tokens: 0 });

    const narrow = await s.issue({ name: 'narrow', models: ['other'] });
    assert.equal((await s.embed(narrow)).status, 403);
    // 5 bytes of prompt a request, held as 9 until the engine counts them: 15 takes two and refuses the third.
    const tiny = await s.issue({ name: 'tiny', tokens_per_day: 15 });
    assert.equal((await s.embed(tiny)).status, 200);
    assert.equal((await s.embed(tiny)).status, 200);
    const spent = await s.embed(tiny);
    assert.equal(spent.status, 429, spent.text);
    assert.equal((spent.json.error as { code: string }).code, 'insufficient_quota');
  });
}
