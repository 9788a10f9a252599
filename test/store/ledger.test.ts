// The ledger's group commit on PostgreSQL, against a database whose commits the test completes by
// hand: a batch goes out at once, the next goes out on the second connection while the first is
// still committing, a batch PostgreSQL rolled back for a deadlock is sent again, not dropped, and a
// ledger closed while the database is down stops.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LlmgwError } from '../../src/errors/index.js';
import { silentLogger } from '../../src/log/index.js';
import { Ledger, type Db, type UsageRow } from '../../src/store/index.js';
import { usageRow } from '../support/usage-row.js';

interface Sent {
  readonly params: readonly unknown[];
  readonly settle: (e?: unknown) => void;
}

// A PostgreSQL the test answers: each statement waits until the test settles it.
function heldPostgres(): { db: Db; sent: Sent[]; next: (what: string) => Promise<Sent> } {
  const sent: Sent[] = [];
  const waiting: ((s: Sent) => void)[] = [];
  const run = (_sql: string, params: readonly unknown[] = []): Promise<number> =>
    new Promise((resolve, reject) => {
      const s: Sent = { params, settle: (e) => (e === undefined ? resolve(1) : reject(e)) };
      sent.push(s);
      waiting.shift()?.(s);
    });
  const db: Db = {
    dialect: 'postgres',
    run,
    all: () => Promise.resolve([]),
    transaction: () => Promise.reject(new Error('the ledger writes a batch as one statement')),
    close: () => Promise.resolve(),
  };
  // Bounded: a statement that never comes fails the test instead of hanging it.
  const next = (what: string): Promise<Sent> =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the ledger sent no statement: ${what}`)), 5_000);
      waiting.push((s) => {
        clearTimeout(timer);
        resolve(s);
      });
    });
  return { db, sent, next };
}

const row = (requestId: string): UsageRow => usageRow(undefined, { requestId, at: Date.parse('2026-12-05T12:00:00Z') });

const ledgerOf = (db: Db): Ledger => new Ledger({ db, gatewayId: 'g', prices: {}, holdTtlMs: 1_000, maxPendingRows: 100, log: silentLogger });

void test('ledger (postgres): a row that finishes while a batch commits goes out on the second connection without waiting for it', async () => {
  const pg = heldPostgres();
  const ledger = ledgerOf(pg.db);
  const firstSent = pg.next('the first row, at once');
  const a = ledger.record(row('a'));
  const first = await firstSent;
  assert.ok(first.params.includes('a'));
  const secondSent = pg.next('the second row, while the first commits');
  const b = ledger.record(row('b'));
  const second = await secondSent;
  assert.ok(second.params.includes('b') && !second.params.includes('a'), 'the second batch holds only the row that came later');
  // Both connections busy: a third row waits for one, then goes with whatever else has come.
  const c = ledger.record(row('c'));
  const d = ledger.record(row('d'));
  assert.equal(pg.sent.length, 2);
  const thirdSent = pg.next('the rows that waited, once a connection is free');
  second.settle();
  await b;
  const third = await thirdSent;
  assert.ok(third.params.includes('c') && third.params.includes('d'), 'rows that waited share one batch');
  first.settle();
  third.settle();
  await Promise.all([a, c, d]);
  assert.equal(ledger.pendingRows, 0);
});

void test('ledger (postgres): a batch rolled back for a deadlock is sent again and its requests still get their commit', async () => {
  const pg = heldPostgres();
  const ledger = ledgerOf(pg.db);
  const firstSent = pg.next('the first row, at once');
  const a = ledger.record(row('a'));
  const first = await firstSent;
  const againSent = pg.next('the batch again, after the deadlock');
  first.settle(Object.assign(new Error('deadlock detected'), { code: '40P01' }));
  const again = await againSent;
  assert.ok(again.params.includes('a'));
  assert.equal(ledger.droppedRows, 0);
  again.settle();
  await a;
  assert.equal(ledger.pendingRows, 0);
});

void test('ledger (postgres): closed while the database is down, it stops sending and logs each row it could not write', async () => {
  const pg = heldPostgres();
  const logged: string[] = [];
  const log = { ...silentLogger, error: (_f: Record<string, unknown>, msg: string) => void logged.push(msg) };
  const ledger = new Ledger({ db: pg.db, gatewayId: 'g', prices: {}, holdTtlMs: 1_000, maxPendingRows: 100, log });
  const firstSent = pg.next('the first row, at once');
  const a = ledger.record(row('a'));
  const first = await firstSent;
  const closed = ledger.close();
  first.settle(new LlmgwError('LLMGW_STORE_DOWN', 'store (postgres) cannot be used: connect ECONNREFUSED'));
  await assert.rejects(a, (e: unknown) => e instanceof LlmgwError && e.code === 'LLMGW_STORE_DOWN');
  await Promise.race([closed, new Promise((_, reject) => setTimeout(() => reject(new Error('close() did not finish')), 5_000))]);
  assert.equal(pg.sent.length, 1, 'nothing sent again once closing');
  assert.deepEqual(logged, ['store.ledger_row_unwritten']);
});
