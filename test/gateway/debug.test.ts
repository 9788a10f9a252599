// The debug endpoints against a fake actor source: only an admin key reads them when the gateway
// has keys (a bearer token, or HTTP Basic as a browser sends it), the page loads nothing from
// elsewhere, and the event stream sends every actor first, then each change.
import { strict as assert } from 'node:assert';
import { test, type TestContext } from 'node:test';
import { Registry } from 'prom-client';
import { request } from 'undici';
import { gatewayDefaults, hashApiKey, startGateway, type DebugActor, type GatewayConfig } from '../../src/gateway/index.js';
import { actor, fakeActors } from './fake-actors.js';

const adminKey = 'sk-admin';
const userKey = 'sk-user';

async function gateway(t: TestContext, keys: boolean) {
  const fake = fakeActors();
  const config: GatewayConfig = {
    ...gatewayDefaults,
    port: 0,
    apiKeys: keys
      ? [
          { name: 'ops', sha256: hashApiKey(adminKey), requestsPerMinute: 0, tokensPerMinute: 0, admin: true },
          { name: 'app', sha256: hashApiKey(userKey), requestsPerMinute: 0, tokensPerMinute: 0, admin: false },
        ]
      : [],
    router: { ...gatewayDefaults.router, loadPollIntervalMs: 0 },
  };
  const gw = await startGateway({ config, directory: { ready: () => [], models: () => [] }, registry: new Registry(), actors: fake.source });
  t.after(() => gw.close());
  return { gw, ...fake };
}

async function get(url: URL, headers: Record<string, string> = {}) {
  const res = await request(url, { headers, signal: AbortSignal.timeout(10_000) });
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
}

const basic = (key: string): string => `Basic ${Buffer.from(`anyone:${key}`).toString('base64')}`;

void test('debug: with keys, no key is asked for one the way a browser understands, a client key is refused, an admin key is let in', async (t) => {
  const { gw } = await gateway(t, true);
  const url = new URL('/debug/actors/state', gw.url);
  const none = await get(url);
  assert.equal(none.status, 401);
  assert.match(String(none.headers['www-authenticate']), /^Basic realm="llmgw debug"/);
  const user = await get(url, { authorization: `Bearer ${userKey}` });
  assert.equal(user.status, 403);
  assert.match(user.text, /admin: true/);
  assert.ok(!user.text.includes(userKey), 'the key is never echoed');
  const bearer = await get(url, { authorization: `Bearer ${adminKey}` });
  assert.equal(bearer.status, 200);
  assert.equal((JSON.parse(bearer.text) as { actors: DebugActor[] }).actors[0]?.phase, 'loading');
  assert.equal((await get(url, { authorization: basic(adminKey) })).status, 200, 'HTTP Basic with the key as password');
  assert.equal((await get(url, { authorization: basic(userKey) })).status, 403);
  assert.equal((await get(new URL('/debug/actors', gw.url))).status, 401, 'the page itself is behind the key too');
});

void test('debug: without keys the page is open; it loads nothing from elsewhere and carries each machine chart', async (t) => {
  const { gw } = await gateway(t, false);
  const page = await get(new URL('/debug/actors', gw.url));
  assert.equal(page.status, 200);
  assert.match(String(page.headers['content-type']), /^text\/html/);
  assert.match(String(page.headers['content-security-policy']), /default-src 'none'/);
  assert.match(page.text, /<template id="chart-shard"><svg/);
  // The SVG namespace is a name, not a fetch: no src or href points anywhere.
  assert.doesNotMatch(page.text, /(src|href)\s*=\s*["']?(https?:)?\/\//i);
  const tail = await get(new URL('/debug/actors/tail?actor=shard%3Ar0-s0', gw.url));
  assert.deepEqual(JSON.parse(tail.text), { actor: 'shard:r0-s0', lines: ['line 1', 'line 2'] });
  assert.equal((await get(new URL('/debug/nothing', gw.url))).status, 404);
});

void test('debug: the event stream sends every actor, then each change; closing the gateway ends it', async (t) => {
  const { gw, emit, listeners } = await gateway(t, false);
  const res = await request(new URL('/debug/actors/events', gw.url), { signal: AbortSignal.timeout(10_000) });
  assert.equal(res.statusCode, 200);
  assert.match(String(res.headers['content-type']), /^text\/event-stream/);
  let text = '';
  const seen = new Promise<void>((resolve, reject) => {
    res.body.setEncoding('utf8');
    res.body.on('data', (d: string) => {
      text += d;
      if (text.includes('event: actors') && listeners.size > 0 && !text.includes('event: actor\n')) emit(actor('shard:r0-s0', 'ready'));
      if (text.includes('event: actor\n')) resolve();
    });
    res.body.on('error', reject);
  });
  await seen;
  assert.match(text, /event: actors\ndata: \{"now":\d+,"actors":\[\{"id":"shard:r0-s0"/);
  assert.match(text, /event: actor\ndata: \{"id":"shard:r0-s0".*"phase":"ready"/);
  const ended = new Promise<void>((resolve) => res.body.on('end', () => resolve()));
  await gw.close();
  await ended;
  assert.equal(listeners.size, 0, 'the stream unsubscribed');
});
