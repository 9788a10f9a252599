// Two real `llmgw serve` gateways on one PostgreSQL share what admission and budgets rest on.
// Fair shares: tenant B floods through gateway 1 while tenant A (an equal key) asks through gateway
// 2; gateway 2, where B holds nothing of its own, places B's next request a class lower, which it
// can only do by counting B's work on gateway 1 from the admission board (docs/cluster.md, Fair
// shares across gateways). Budgets: clients of one key on both gateways run its day budget out, and
// the spend never passes it (every request stays within its hold, so the bound is 0: docs/store.md).
import { strict as assert } from 'node:assert';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { Agent, request, type Dispatcher } from 'undici';
import { openPostgres } from '../../src/store/index.js';
import { waitFor } from '../support/wait.js';
import { serveCluster, type ServeGateway } from './serve-cluster.js';

const sha = (k: string): string => createHash('sha256').update(k).digest('hex');
const keys = { admin: 'sk-admin-shared', a: 'sk-tenant-a', b: 'sk-tenant-b' };

async function chat(g: ServeGateway, key: string, o: { maxTokens: number; stream?: boolean; dispatcher?: Dispatcher; signal?: AbortSignal }): Promise<{ status: number; body: string }> {
  const r = await request(`${g.url}/v1/chat/completions`, {
    method: 'POST',
    dispatcher: o.dispatcher,
    signal: o.signal,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ model: 'qwen3', stream: o.stream === true, max_tokens: o.maxTokens, messages: [{ role: 'user', content: 'a question of fair shares' }] }),
  });
  return { status: r.statusCode, body: await r.body.text() };
}

/** Requests of `model` the gateway placed a class below their own, from its /metrics. */
async function placedLower(g: ServeGateway): Promise<number> {
  const r = await request(`${g.url}/metrics`);
  const text = await r.body.text();
  const lines = text.split('\n').filter((l) => l.startsWith('llmgw_admission_placed_lower_total{') && l.includes('model="qwen3"'));
  return lines.reduce((n, l) => n + Number(l.split(' ').at(-1)), 0);
}

void test('two serves on one PostgreSQL: admission counts the other gateway\'s tenants, and one budget is never overdrawn across both', { timeout: 300_000 }, async (t) => {
  const c = await serveCluster(t, {
    gateways: 2,
    replicas: 2,
    // Long streams at 20 tokens/s: B's flood is still running when gateway 2 decides.
    simArgs: ['--decode-tokens-per-s', '20'],
    gatewayYaml: `  api_keys:
    - { name: admin, sha256: ${sha(keys.admin)}, admin: true }
    - { name: a, sha256: ${sha(keys.a)}, tenant: a }
    - { name: b, sha256: ${sha(keys.b)}, tenant: b }
  admission: { slots_per_replica: 4, peer_interval_ms: 200 }`,
    store: 'refresh_ms: 200',
  });
  const [gw1, gw2] = c.gateways;
  if (gw1 === undefined || gw2 === undefined) throw new Error('two gateways');

  await t.test('gateway 2 places B lower by what B holds on gateway 1', async () => {
    // Two replicas of 4 slots: a capacity of 8, a share of 4 each with two tenants. B holds 8 on gateway 1.
    const flooders = 8;
    const dispatcher = new Agent({ connections: flooders * 2 });
    const stop = new AbortController();
    let streaming = 0;
    const flood = async (): Promise<void> => {
      while (!stop.signal.aborted) {
        try {
          const r = await request(`${gw1.url}/v1/chat/completions`, {
            method: 'POST',
            dispatcher,
            signal: stop.signal,
            headers: { 'content-type': 'application/json', authorization: `Bearer ${keys.b}` },
            body: JSON.stringify({ model: 'qwen3', stream: true, max_tokens: 400, messages: [{ role: 'user', content: 'flood' }] }),
          });
          streaming++;
          await r.body.dump({ limit: Number.MAX_SAFE_INTEGER });
          streaming--;
        } catch (e) {
          if (!stop.signal.aborted) throw e;
        }
      }
    };
    const floods = Array.from({ length: flooders }, flood);
    try {
      await waitFor(() => streaming >= 6, { timeoutMs: 30_000, what: `B's flood under way on gateway 1 (${streaming})` });
      // B alone, on gateway 2 as on gateway 1: no polite tenant, so B keeps its class.
      assert.equal((await chat(gw2, keys.b, { maxTokens: 2 })).status, 200);
      assert.equal(await placedLower(gw2), 0, 'B alone is never placed lower');

      // A asks through gateway 2 (active there, holding nothing); B asks there too. Gateway 2 has at
      // most B's one request of its own, under its share: placing it lower counts B's work on gateway 1.
      assert.equal((await chat(gw2, keys.a, { maxTokens: 2 })).status, 200);
      await waitFor(
        async () => {
          const r = await chat(gw2, keys.b, { maxTokens: 2 });
          assert.equal(r.status, 200, r.body);
          return (await placedLower(gw2)) > 0;
        },
        { timeoutMs: 20_000, intervalMs: 100, what: "gateway 2 to place B's request lower for what B holds on gateway 1" },
      );
      const q = await request(`${gw2.url}/debug/queues`, { headers: { authorization: `Bearer ${keys.admin}` } });
      const queues = (await q.body.json()) as { data: { tenants: { tenant: string }[] }[] };
      assert.deepEqual(queues.data.flatMap((m) => m.tenants).filter((x) => x.tenant === 'b'), [], 'nothing of B waits in gateway 2\'s own queue');
    } finally {
      stop.abort();
      await Promise.all(floods);
      await dispatcher.close();
    }
  });

  await t.test('one key on both gateways spends its day budget and never more', async () => {
    const budget = 4_000;
    const created = await request(`${gw1.url}/admin/v1/keys`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${keys.admin}` },
      body: JSON.stringify({ name: 'shared-budget', tokens_per_day: budget }),
    });
    const key = (await created.body.json()) as { id: string; key: string };
    assert.equal(created.statusCode, 201, JSON.stringify(key));
    await waitFor(async () => (await chat(gw2, key.key, { maxTokens: 1 })).status === 200, { timeoutMs: 15_000, what: 'gateway 2 to know the new key' });

    const served = new Map<string, number>();
    const unexpected: string[] = [];
    // Whether the gateway admitted one more request of the key; a refusal must be the budget's.
    const spend = async (g: ServeGateway): Promise<boolean> => {
      const r = await chat(g, key.key, { maxTokens: 8 });
      if (r.status === 200) served.set(g.name, (served.get(g.name) ?? 0) + 1);
      else if (r.status !== 429 || !r.body.includes('insufficient_quota')) unexpected.push(`${r.status} ${r.body.slice(0, 200)}`);
      return r.status === 200;
    };
    const client = async (g: ServeGateway): Promise<void> => {
      while (await spend(g));
    };
    // Four clients a gateway until each is refused. A refusal while others held may have come from
    // holds that then settled for less, so the budget is out only when a request alone, with nothing
    // else in flight, is refused on both gateways.
    for (let round = 0; round < 20; round++) {
      await Promise.all([gw1, gw2].flatMap((g) => [client(g), client(g), client(g), client(g)]));
      if (!(await spend(gw1)) && !(await spend(gw2))) break;
    }
    assert.deepEqual(unexpected, []);

    const db = openPostgres({ url: c.dbUrl, timeoutMs: 5_000, maxConnections: 1, onIdleError: () => undefined });
    t.after(() => db.close());
    const rows = await db.all("SELECT tokens FROM spend WHERE key_id = $1 AND period LIKE 'd%'", [key.id]);
    const spent = rows.reduce((n, r) => n + Number(r.tokens), 0);
    const what = `spent ${spent} of ${budget}; served ${JSON.stringify(Object.fromEntries(served))}`;
    assert.ok(spent <= budget, `never past the budget: ${what}`);
    // Refused with nothing in flight: the next hold (about 400 tokens: the body's bytes + 256 + 8) did not fit.
    assert.ok(spent > budget - 500, `the clients ran the budget out: ${what}`);
    assert.ok((served.get('gw1') ?? 0) > 0 && (served.get('gw2') ?? 0) > 0, `both gateways spent it: ${what}`);
    t.diagnostic(what);
  });
});
