// The store against both of its homes, a SQLite file and a real PostgreSQL: migrations, the key
// lifecycle, budgets over a day boundary, holds shared by concurrent admissions, the group-commit
// ledger and its queries, stored responses, and a database that goes down and comes back.
import assert from 'node:assert/strict';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { LlmgwError } from '../../src/errors/index.js';
import { silentLogger } from '../../src/log/index.js';
import {
  DbResponseStore,
  Ledger,
  migrate,
  migrations,
  openPostgres,
  openSqlite,
  sha256Of,
  storeDefaults,
  Store,
  usageCsv,
  usageTotals,
  type Db,
  type KeyRecord,
  type UsageRow,
} from '../../src/store/index.js';
import { storeHomes } from '../support/store-homes.js';
import { usageRow } from '../support/usage-row.js';
import { waitFor } from '../support/wait.js';

const testHomes = storeHomes();

interface Home {
  readonly name: string;
  /** A fresh, empty database of this home, and the store config pointing at it. */
  fresh(): { db: () => Db; config: typeof storeDefaults; stateDir: string };
}

const homes: readonly Home[] = [
  {
    name: 'sqlite',
    fresh: () => {
      const dir = testHomes.tempDir('llmgw-store-');
      const path = join(dir, 'llmgw.db');
      return { db: () => openSqlite({ path, busyTimeoutMs: 1_000 }), config: { ...storeDefaults, path }, stateDir: dir };
    },
  },
  {
    name: 'postgres',
    fresh: () => {
      if (testHomes.pg === undefined) throw new Error('PostgreSQL did not start');
      const url = testHomes.pg.database();
      return { db: () => openPostgres({ url, timeoutMs: 2_000, maxConnections: 4, onIdleError: () => undefined }), config: { ...storeDefaults, url, timeoutMs: 1_000 }, stateDir: tmpdir() };
    },
  },
];

// A clock the test moves: budgets are decided by UTC day and month.
function clock(start: string): { now: () => number; set: (iso: string) => void } {
  let t = Date.parse(start);
  return { now: () => t, set: (iso) => (t = Date.parse(iso)) };
}

const row = (k: KeyRecord, over: Partial<UsageRow> = {}): UsageRow => usageRow(k, { cachedTokens: 4, ttftMs: 12, totalMs: 30, ...over });

async function open(h: Home, now?: () => number): Promise<Store> {
  const f = h.fresh();
  return Store.open(f.config, { stateDir: f.stateDir, configKeys: [], defaultGatewayId: 'gw-test', log: silentLogger, now });
}

for (const h of homes) {
  void test(`${h.name}: migrations apply once, run again as a no-op, and a newer schema is refused`, async (t) => {
    const f = h.fresh();
    const db = f.db();
    t.after(() => db.close());
    assert.equal(await migrate(db), 0);
    assert.equal(await migrate(db), migrations.length);
    await db.run('INSERT INTO llmgw_schema (version) VALUES ($1)', [99]);
    await assert.rejects(migrate(db), (e: unknown) => e instanceof LlmgwError && e.code === 'LLMGW_STORE_SCHEMA' && /schema 99/.test(e.message));
  });

  void test(`${h.name}: a key is issued hashed, found by its secret, rotated and revoked`, async (t) => {
    const s = await open(h);
    t.after(() => s.close());
    const issued = await s.createKey({ name: 'ci', team: 'team-a', owner: 'ana', models: ['m'], tokens_per_day: 1000, cost_per_month: 5 });
    const secret = String(issued.key);
    assert.match(secret, /^sk-llmgw-/);
    const rows = await s.db.all('SELECT sha256 FROM api_keys WHERE name = $1', ['ci']);
    assert.equal(rows[0]?.sha256, sha256Of(secret), 'only the hash is stored');
    const k = s.bySha256(sha256Of(secret));
    assert.equal(k?.team, 'team-a');
    assert.deepEqual(k?.models, ['m']);
    assert.equal(k?.costPerMonthMicros, 5_000_000);
    await assert.rejects(s.createKey({ name: 'ci' }), /exists already/);
    await assert.rejects(s.createKey({ name: 'x', tokens_per_day: -1 }), (e: unknown) => e instanceof LlmgwError && e.code === 'LLMGW_BAD_REQUEST' && /tokens_per_day/.test(e.message));
    const rotated = await s.rotateKey('ci');
    assert.equal(s.bySha256(sha256Of(secret)), undefined, 'the old secret is gone');
    assert.equal(s.bySha256(sha256Of(String(rotated.key)))?.name, 'ci');
    await s.revokeKey(String(issued.id));
    assert.notEqual(s.bySha256(sha256Of(String(rotated.key)))?.revokedAt, undefined);
    assert.deepEqual(s.listKeys({ revoked: false }), []);
  });

  void test(`${h.name}: a revocation made by another gateway reaches this one's keys on refresh`, async (t) => {
    const f = h.fresh();
    const a = await Store.open(f.config, { stateDir: f.stateDir, configKeys: [], defaultGatewayId: 'a', log: silentLogger });
    t.after(() => a.close());
    const issued = await a.createKey({ name: 'shared' });
    const b = await Store.open(f.config, { stateDir: f.stateDir, configKeys: [], defaultGatewayId: 'b', log: silentLogger });
    t.after(() => b.close());
    assert.equal(b.bySha256(sha256Of(String(issued.key)))?.revokedAt, undefined);
    await a.revokeKey('shared');
    await b.keys.refresh();
    assert.notEqual(b.bySha256(sha256Of(String(issued.key)))?.revokedAt, undefined);
  });

  void test(`${h.name}: config keys are imported read-only, and one dropped from the YAML is revoked`, async (t) => {
    const f = h.fresh();
    const keys = [{ name: 'yaml', sha256: sha256Of('sk-yaml'), requestsPerMinute: 5, tokensPerMinute: 0, admin: true }];
    const s = await Store.open(f.config, { stateDir: f.stateDir, configKeys: keys, defaultGatewayId: 'gw', log: silentLogger });
    assert.equal(s.bySha256(sha256Of('sk-yaml'))?.requestsPerMinute, 5);
    await assert.rejects(s.revokeKey('yaml'), /read-only/);
    await s.close();
    const again = await Store.open(f.config, { stateDir: f.stateDir, configKeys: [], defaultGatewayId: 'gw', log: silentLogger });
    t.after(() => again.close());
    assert.notEqual(again.bySha256(sha256Of('sk-yaml'))?.revokedAt, undefined);
  });

  void test(`${h.name}: a day's token budget refuses once spent and opens again at the next UTC day`, async (t) => {
    const c = clock('2026-12-04T23:59:00Z');
    const s = await open(h, c.now);
    t.after(() => s.close());
    await s.createKey({ name: 'daily', tokens_per_day: 100 });
    const k = s.keys.get('daily');
    assert.ok(k !== undefined);
    const hold = await s.admit({ key: k, model: 'm', promptTokens: 40, completionTokens: 40 });
    await s.record(row(k, { at: c.now(), promptTokens: 40, completionTokens: 40, cachedTokens: 0 }), hold);
    // 80 of 100 spent: a bound of 30 does not fit, and the refusal says when the day ends.
    await assert.rejects(s.admit({ key: k, model: 'm', promptTokens: 10, completionTokens: 20 }), (e: unknown) => {
      assert.ok(e instanceof LlmgwError && e.code === 'LLMGW_BUDGET', String(e));
      assert.equal('retryAfterS' in e ? e.retryAfterS : undefined, 60);
      return true;
    });
    // Without a completion limit the gateway imposes what the day has left.
    const fits = await s.admit({ key: k, model: 'm', promptTokens: 10, completionTokens: undefined });
    assert.equal(fits.impose, 10);
    await s.release(fits);
    c.set('2026-12-05T00:00:01Z');
    const tomorrow = await s.admit({ key: k, model: 'm', promptTokens: 10, completionTokens: 80 });
    assert.equal(tomorrow.tokens, 90);
  });

  void test(`${h.name}: concurrent admissions of one key see each other's holds; a settled request charges what it used`, async (t) => {
    const s = await open(h);
    t.after(() => s.close());
    await s.createKey({ name: 'busy', tokens_per_month: 100 });
    const k = s.keys.get('busy');
    assert.ok(k !== undefined);
    const tries = await Promise.allSettled(Array.from({ length: 5 }, () => s.admit({ key: k, model: 'm', promptTokens: 10, completionTokens: 20 })));
    const admitted = tries.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    assert.equal(admitted.length, 3, 'three bounds of 30 fit in 100, a fourth does not');
    for (const hold of admitted) await s.record(row(k, { promptTokens: 10, completionTokens: 5, cachedTokens: 0 }), hold);
    const spent = await s.db.all("SELECT tokens FROM spend WHERE key_id = $1 AND period LIKE 'm%'", [k.id]);
    assert.equal(spent[0]?.tokens, 45);
    assert.equal((await s.db.all('SELECT id FROM holds')).length, 0, 'every hold settled with its row');
  });

  void test(`${h.name}: rows recorded together commit together, and usage totals and CSV add them up`, async (t) => {
    const s = await open(h);
    t.after(() => s.close());
    await s.createKey({ name: 'a', team: 'blue' });
    await s.createKey({ name: 'b', team: 'blue' });
    const a = s.keys.get('a');
    const b = s.keys.get('b');
    assert.ok(a !== undefined && b !== undefined);
    const at = Date.parse('2026-12-03T10:00:00Z');
    await Promise.all([
      ...Array.from({ length: 150 }, () => s.record(row(a, { at }))),
      ...Array.from({ length: 50 }, () => s.record(row(b, { at: at + 86_400_000, model: 'other' }))),
    ]);
    const byTeam = await usageTotals(s.db, { from: at - 1, to: at + 2 * 86_400_000, groupBy: ['team'] });
    assert.deepEqual(byTeam, [{ team: 'blue', requests: 200, promptTokens: 2000, cachedTokens: 800, completionTokens: 1000, costUsd: 0 }]);
    const byDay = await usageTotals(s.db, { from: at - 1, to: at + 2 * 86_400_000, groupBy: ['key', 'model', 'day'] });
    assert.deepEqual(
      byDay.map((r) => [r.key, r.model, r.day, r.requests]),
      [
        ['a', 'm', '2026-12-03', 150],
        ['b', 'other', '2026-12-04', 50],
      ],
    );
    const csv = (await s.usage(new URLSearchParams({ from: '2026-12-03', to: '2026-12-05', group_by: 'key', format: 'csv' }))).body;
    assert.equal(csv, usageCsv(['key'], await usageTotals(s.db, { from: Date.parse('2026-12-03'), to: Date.parse('2026-12-05'), groupBy: ['key'] })));
    assert.match(csv, /^key,requests,prompt_tokens,cached_tokens,completion_tokens,cost_usd\r\na,150,1500,600,750,0\r\nb,50,/);
    const json = JSON.parse((await s.usage(new URLSearchParams({ from: '2026-12-03', to: '2026-12-05', group_by: 'key' }))).body) as { group_by: string[]; data: unknown[] };
    assert.deepEqual(json.group_by, ['key']);
    assert.deepEqual(json.data[0], { key: 'a', requests: 150, prompt_tokens: 1500, cached_tokens: 600, completion_tokens: 750, cost_usd: 0 }, 'the JSON names what the CSV header names');
  });

  void test(`${h.name}: stored responses are their owner's alone and vanish at expiry`, async (t) => {
    const c = clock('2026-12-04T12:00:00Z');
    const s = await open(h, c.now);
    t.after(() => s.close());
    const r = new DbResponseStore(s.db, { now: c.now });
    await r.put({ id: 'resp_1', owner: 'ana', createdAt: c.now(), expiresAt: c.now() + 60_000, body: '{"a":1}' });
    assert.equal((await r.get('ana', 'resp_1'))?.body, '{"a":1}');
    assert.equal(await r.get('bob', 'resp_1'), undefined);
    assert.equal(await r.delete('bob', 'resp_1'), false);
    c.set('2026-12-04T12:01:01Z');
    assert.equal(await r.get('ana', 'resp_1'), undefined);
  });

  void test(`${h.name}: retention deletes ledger rows past it and keeps the rest`, async (t) => {
    const c = clock('2026-12-04T12:00:00Z');
    const s = await open(h, c.now);
    t.after(() => s.close());
    await s.createKey({ name: 'old' });
    const k = s.keys.get('old');
    assert.ok(k !== undefined);
    await s.record(row(k, { at: c.now() - 40 * 86_400_000 }));
    await s.record(row(k, { at: c.now() - 86_400_000 }));
    assert.equal(await s.ledger.prune(30), 1);
    assert.equal((await s.db.all('SELECT id FROM usage_ledger')).length, 1);
  });
}

void test('postgres down: admission fails with LLMGW_STORE_DOWN within its timeouts, rows wait and are written when it is back', async (t) => {
  if (testHomes.pg === undefined) throw new Error('PostgreSQL did not start');
  const url = testHomes.pg.database();
  const s = await Store.open({ ...storeDefaults, url, timeoutMs: 1_000 }, { stateDir: tmpdir(), configKeys: [], defaultGatewayId: 'gw', log: silentLogger });
  t.after(() => s.close());
  await s.createKey({ name: 'k', tokens_per_day: 1_000 });
  const k = s.keys.get('k');
  assert.ok(k !== undefined);
  testHomes.pg.stop();
  t.after(() => {
    // Started again for the tests that follow, whatever this one did.
    if (testHomes.pg !== undefined) {
      try {
        testHomes.pg.start();
      } catch {
        // It is running already.
      }
    }
  });
  await assert.rejects(s.admit({ key: k, model: 'm', promptTokens: 1, completionTokens: 1 }), (e: unknown) => e instanceof LlmgwError && e.code === 'LLMGW_STORE_DOWN');
  await assert.rejects(s.record(row(k)), (e: unknown) => e instanceof LlmgwError && e.code === 'LLMGW_STORE_DOWN');
  assert.equal(s.ledger.pendingRows, 1, 'the row is kept');
  testHomes.pg.start();
  await waitFor(() => s.ledger.pendingRows === 0, { timeoutMs: 30_000, intervalMs: 100, what: 'the kept row to be written' });
  assert.equal((await s.db.all('SELECT id FROM usage_ledger')).length, 1);
});

void test('sqlite: a ledger whose database refuses a batch for a bug drops that batch and keeps serving the next', async (t) => {
  const dir = testHomes.tempDir('llmgw-store-');
  const db = openSqlite({ path: join(dir, 'x.db'), busyTimeoutMs: 100 });
  t.after(() => db.close());
  await migrate(db);
  const logged: string[] = [];
  const log = { ...silentLogger, error: (_f: Record<string, unknown>, msg: string) => void logged.push(msg) };
  const ledger = new Ledger({ db, gatewayId: 'g', prices: {}, holdTtlMs: 1_000, maxPendingRows: 10, log });
  const k = { id: 'k', name: 'k', team: 't' } as KeyRecord;
  await assert.rejects(ledger.record(row(k, { status: Number.NaN, requestId: null as unknown as string })));
  await ledger.record(row(k));
  assert.deepEqual(logged, ['store.ledger_batch_failed']);
  assert.equal((await db.all('SELECT id FROM usage_ledger')).length, 1);
});
