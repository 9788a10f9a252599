// Admission across gateways over a real PostgreSQL: two Admissions, each with its AdmissionPeers on
// the same database through admissionBoard, as two serves are wired. Tenant B floods through gateway
// 1 alone; once tenant A asks through gateway 2, gateway 1 places B's over-share requests a class
// lower. A gateway that stops takes its row down, and one that dies is expired by the database.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { Admission, AdmissionPeers, admissionDefaults, priorityClasses } from '../../src/admission/index.js';
import type { AdmissionAsk } from '../../src/admission/index.js';
import { admissionBoard, migrate, openPostgres } from '../../src/store/index.js';
import { startPostgres } from '../support/postgres.js';
import { waitFor } from '../support/wait.js';

function ask(tenant: string): AdmissionAsk {
  return { model: 'm', tenant, weight: 1, priority: 'standard', costTokens: 100, sizeBytes: 400, maxWaitMs: 10_000, signal: new AbortController().signal };
}

void test('admission board: a flood through gateway 1 is placed lower once a polite tenant asks through gateway 2', { timeout: 60_000 }, async (t) => {
  const pg = await startPostgres();
  t.after(() => pg.close());
  const url = pg.database();
  const open = () => openPostgres({ url, timeoutMs: 2_000, maxConnections: 2, onIdleError: () => undefined });
  const db1 = open();
  t.after(() => db1.close());
  const db2 = open();
  t.after(() => db2.close());
  await migrate(db1);
  // Two replicas of one slot, the same on both gateways: a capacity of 2, a share of 1 with two tenants.
  const replicas = ['r0', 'r1'].map((id) => ({ id, waiting: 0, engineWaiting: 0, queuedPrefillTokens: 0, prefillTokensPerS: 10_000 }));
  // Failures while the test runs; the cleanup's (the server stopped first) are not the test's.
  const errors: unknown[] = [];
  const gateway = (db: typeof db1, name: string) => {
    const lowered: string[] = [];
    const late: { peers?: AdmissionPeers } = {};
    const a = new Admission({
      config: { ...admissionDefaults, slotsPerReplica: 1 },
      facts: { replicas: () => replicas },
      observer: { admitted: () => undefined, refused: () => undefined, placedLower: (_m, p) => lowered.push(p) },
      peers: (model) => late.peers?.holdsOf(model),
    });
    const peers = new AdmissionPeers({ board: admissionBoard(db, name), holdings: () => a.holdings(), intervalMs: 20, classes: priorityClasses.length, onError: (e) => errors.push(e) });
    late.peers = peers;
    peers.start();
    return { a, peers, lowered };
  };
  const g1 = gateway(db1, 'g1');
  t.after(() => g1.a.close());
  t.after(() => g1.peers.close());
  const g2 = gateway(db2, 'g2');
  t.after(() => g2.a.close());
  const ticket = { firstByte: () => undefined, done: () => undefined };
  const flood = async (): Promise<void> => (await g1.a.admit(ask('b'))).watch(ticket, 'r0').firstByte();

  for (let k = 0; k < 4; k++) await flood();
  assert.equal(g1.lowered.length, 0, 'B alone on every gateway keeps its class');

  // A's request is answered at once: it holds nothing, but asked lately, so it is the polite tenant.
  (await g2.a.admit(ask('a'))).done();
  await waitFor(() => g1.peers.holdsOf('m')?.get('a'), { timeoutMs: 10_000, what: "gateway 1 reads A's report from gateway 2" });
  await flood();
  assert.deepEqual(g1.lowered, ['standard'], "B over its share is placed a class lower while A, active through gateway 2, holds less");
  assert.equal(g2.lowered.length, 0, 'A, under its share, is placed at its own class');

  await g2.peers.close();
  await waitFor(() => (g1.peers.holdsOf('m')?.has('a') === true ? undefined : true), { timeoutMs: 10_000, what: "gateway 2's row gone from gateway 1's view" });
  await flood();
  assert.equal(g1.lowered.length, 1, 'gateway 2 stopped: B is alone again and keeps its class');

  // A gateway that dies leaves its row; the database's expiry takes it out of the reads.
  await db2.run(`INSERT INTO admission_peers (gateway, body, updated_at, expires_at) VALUES ('dead', '[["m","a",1,0]]', 0, 1)`);
  assert.deepEqual(await admissionBoard(db1, 'g1').read(), [], "an expired row is nobody's report");
  assert.deepEqual(errors, []);
});
