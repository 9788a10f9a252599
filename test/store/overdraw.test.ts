// Two gateways on one real PostgreSQL spend one key's day budget: what they spend past it stays
// within the bound of test/support/overdraw.ts (what the requests in flight when it ran out used
// beyond their holds), as docs/store.md states.
import assert from 'node:assert/strict';
import { tmpdir } from 'node:os';
import { test } from 'node:test';
import { silentLogger } from '../../src/log/index.js';
import { Store, storeDefaults } from '../../src/store/index.js';
import { overdrawRun } from '../support/overdraw.js';
import { startPostgres } from '../support/postgres.js';

void test('two store handles on one PostgreSQL overdraw one budget by no more than the bound', async (t) => {
  const pg = await startPostgres();
  t.after(() => pg.close());
  const url = pg.database();
  const open = (id: string): Promise<Store> => Store.open({ ...storeDefaults, url }, { stateDir: tmpdir(), configKeys: [], defaultGatewayId: id, log: silentLogger });
  const a = await open('gw-a');
  t.after(() => a.close());
  const b = await open('gw-b');
  t.after(() => b.close());
  await a.createKey({ name: 'shared', tokens_per_day: 6_000 });
  await b.keys.refresh();
  for (const overEvery of [0, 3]) {
    await a.db.run('DELETE FROM spend');
    const r = await overdrawRun({ stores: [a, b], keyName: 'shared', budget: 6_000, clientsPerStore: 8, overEvery });
    const what = JSON.stringify(r);
    assert.ok(r.spent >= r.budget - 150, `the clients ran the budget out: ${what}`);
    assert.ok(r.overdraw <= r.bound, `overdraw within the bound: ${what}`);
    if (overEvery === 0) assert.equal(r.bound, 0, `every request within its hold: no overdraw at all (${what})`);
    else assert.ok(r.overHold > 0, `some requests used more than they held: ${what}`);
  }
});
