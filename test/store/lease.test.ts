// The placer lease against both homes of the store (a SQLite file, a real PostgreSQL), each rule a
// row: one holder at a time; renewing keeps the epoch; a lapsed lease is taken under a higher epoch
// and its old holder is refused; a released one is taken at once. And PlacerLease: the first of two
// gateways holds it, the second takes over when the first cannot renew (and the first lets go before
// the second takes it), a third takes over at once when the holder closes.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { silentLogger } from '../../src/log/index.js';
import { claimLease, migrate, openPostgres, openSqlite, PlacerLease, releaseLease, type Db } from '../../src/store/index.js';
import { storeHomes } from '../support/store-homes.js';
import { waitFor } from '../support/wait.js';

const testHomes = storeHomes();

const homes: { name: string; open: () => Db }[] = [
  {
    name: 'sqlite',
    open: () => {
      const dir = testHomes.tempDir('llmgw-lease-');
      return openSqlite({ path: join(dir, 'llmgw.db'), busyTimeoutMs: 2_000 });
    },
  },
  {
    name: 'postgres',
    open: () => {
      if (testHomes.pg === undefined) throw new Error('no PostgreSQL');
      return openPostgres({ url: testHomes.pg.database(), timeoutMs: 2_000, maxConnections: 2, onIdleError: () => undefined });
    },
  },
];

for (const home of homes) {
  void test(`lease (${home.name}): one holder at a time, renewal keeps the epoch, a lapsed or released lease goes on under a higher one`, async (t) => {
    const db = home.open();
    t.after(() => db.close());
    await migrate(db);
    const claim = (holder: string, ttlMs = 60_000) => claimLease(db, { name: 'placer', holder, ttlMs });
    assert.deepEqual(await claim('a'), { held: true, holder: 'a', epoch: 1 }, 'the first claimant takes it');
    assert.deepEqual(await claim('b'), { held: false, holder: 'a', epoch: 1 }, 'a second is told who holds it');
    assert.deepEqual(await claim('a', 1), { held: true, holder: 'a', epoch: 1 }, 'renewing keeps the epoch');
    // Renewed for 1 ms: it lapses by the database's clock, and b takes it.
    const taken = await waitFor(async () => {
      const c = await claim('b');
      return c.held ? c : undefined;
    }, { timeoutMs: 5_000, intervalMs: 5, what: 'b to take the lapsed lease' });
    assert.deepEqual(taken, { held: true, holder: 'b', epoch: 2 });
    assert.deepEqual(await claim('a'), { held: false, holder: 'b', epoch: 2 }, 'the old holder cannot renew what it lost');
    await releaseLease(db, { name: 'placer', holder: 'a' });
    assert.deepEqual(await claim('a'), { held: false, holder: 'b', epoch: 2 }, 'only the holder releases it');
    await releaseLease(db, { name: 'placer', holder: 'b' });
    assert.deepEqual(await claim('a'), { held: true, holder: 'a', epoch: 3 }, 'a released lease is taken at once');
  });
}

void test('placer lease (postgres): the second gateway takes over when the first cannot renew, the first stops placing, and a closed one hands over at once', async (t) => {
  const url = testHomes.pg?.database();
  if (url === undefined) throw new Error('no PostgreSQL');
  const open = () => openPostgres({ url, timeoutMs: 1_000, maxConnections: 2, onIdleError: () => undefined });
  const db1 = open();
  const db2 = open();
  t.after(() => db2.close());
  const db3 = open();
  t.after(() => db3.close());
  await migrate(db2);
  const events: string[] = [];
  const lease = (db: Db, name: string) =>
    new PlacerLease({ db, gatewayId: name, ttlMs: 600, onHeld: (e) => events.push(`${name} held ${e}`), onLost: () => events.push(`${name} lost`), log: silentLogger });
  const g1 = lease(db1, 'g1');
  g1.start();
  t.after(() => g1.close());
  await waitFor(() => g1.held, { timeoutMs: 5_000, what: 'g1 to hold the lease' });
  const g2 = lease(db2, 'g2');
  g2.start();
  t.after(() => g2.close());
  // g1 is cut off from the database: it cannot renew, and its row is left as it was.
  await db1.close();
  await waitFor(() => g2.held, { timeoutMs: 10_000, what: 'g2 to take the lapsed lease' });
  await waitFor(() => events.includes('g1 lost'), { timeoutMs: 5_000, what: 'g1 to stop placing' });
  // By its own clock g1 let go before the database could hand the lease on.
  assert.ok(events.indexOf('g1 lost') < events.indexOf('g2 held 2'), events.join(', '));
  assert.equal(events[0], 'g1 held 1');
  // A gateway that closes gives the lease up: the next claimant need not wait for it to lapse.
  const g3 = lease(db3, 'g3');
  g3.start();
  t.after(() => g3.close());
  await g2.close();
  await waitFor(() => g3.held, { timeoutMs: 10_000, what: 'g3 to take the released lease' });
  assert.equal(events.at(-1), 'g3 held 3');
});
