// The ledger's crash guarantee on both homes: a gateway killed with SIGKILL under traffic has a
// ledger row for every answer a client received complete. bench/ledger.ts runs twenty rounds.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { openPostgres, openSqlite, storeDefaults } from '../../src/store/index.js';
import { startFakeEngine } from '../gateway/fake-engine.js';
import { killRound } from '../support/kill-loop.js';
import { startPostgres } from '../support/postgres.js';

void test('kill -9 under traffic: every completed answer is in the ledger (SQLite file, then PostgreSQL)', async (t) => {
  const engine = await startFakeEngine({ id: 'r0' });
  t.after(() => engine.close());
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-kill-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'llmgw.db');
  const pg = await startPostgres();
  t.after(() => pg.close());
  const url = pg.database();
  const homes = [
    { store: { ...storeDefaults, path }, openDb: () => openSqlite({ path, busyTimeoutMs: 1_000 }) },
    { store: { ...storeDefaults, url }, openDb: () => openPostgres({ url, timeoutMs: 2_000, maxConnections: 1, onIdleError: () => undefined }) },
  ];
  for (const h of homes) {
    for (let round = 0; round < 2; round++) {
      const r = await killRound({ store: h.store, engine: engine.url, clients: 8, killAfter: 100 + round * 37, openDb: h.openDb });
      assert.ok(r.completed >= 100);
      assert.equal(r.missing, 0, `${h.store.url === '' ? 'sqlite' : 'postgres'} round ${round}: ${r.missing} of ${r.completed} completed answers are not in the ledger`);
    }
  }
});
