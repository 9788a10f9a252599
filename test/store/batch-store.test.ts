// Batch API files and batches against both homes of the store: a file read back only by its owner,
// the lease that lets one gateway run a batch at a time, a guarded status change, and a line's answer
// recorded once however often it is recorded.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { BatchStore, FileStore, migrate, openPostgres, openSqlite, type Db } from '../../src/store/index.js';
import { storeHomes } from '../support/store-homes.js';

const testHomes = storeHomes();

const homes: readonly { name: string; open: () => Db }[] = [
  {
    name: 'sqlite',
    open: () => {
      const dir = testHomes.tempDir('llmgw-batch-store-');
      return openSqlite({ path: join(dir, 'llmgw.db'), busyTimeoutMs: 1_000 });
    },
  },
  {
    name: 'postgres',
    open: () => {
      if (testHomes.pg === undefined) throw new Error('PostgreSQL did not start');
      return openPostgres({ url: testHomes.pg.database(), timeoutMs: 2_000, maxConnections: 4, onIdleError: () => undefined });
    },
  },
];

for (const h of homes) {
  void test(`batch store (${h.name}): a file is its owner's, listed newest first and paged after an id`, async (t) => {
    const db = h.open();
    t.after(() => db.close());
    await migrate(db);
    const files = new FileStore(db);
    for (const [i, id] of ['file-a', 'file-b', 'file-c'].entries()) await files.put({ id, owner: 'alice', purpose: 'batch', filename: `${id}.jsonl`, bytes: 3, createdAt: 1000 + i }, `{}\n`);
    assert.equal(await files.body('alice', 'file-a'), '{}\n');
    assert.equal(await files.body('bob', 'file-a'), undefined);
    assert.deepEqual((await files.list('alice', { limit: 10 })).map((f) => f.id), ['file-c', 'file-b', 'file-a']);
    assert.deepEqual((await files.list('alice', { limit: 1, after: 'file-c' })).map((f) => f.id), ['file-b']);
    assert.equal(await files.delete('bob', 'file-a'), false);
    assert.equal(await files.delete('alice', 'file-a'), true);
    assert.equal(await files.get('alice', 'file-a'), undefined);
  });

  void test(`batch store (${h.name}): one runner holds a lease until it runs out; a change applies only from the statuses named`, async (t) => {
    const db = h.open();
    t.after(() => db.close());
    await migrate(db);
    const batches = new BatchStore(db);
    await batches.create({ id: 'batch_1', owner: 'alice', ownerSha256: 'ab', endpoint: '/v1/chat/completions', inputFileId: 'file-a', completionWindow: '24h', metadata: undefined, createdAt: 1, expiresAt: 10 });
    assert.deepEqual(await batches.open(), ['batch_1']);
    assert.equal(await batches.lease('batch_1', 'gw-a', 100, 200), true);
    assert.equal(await batches.lease('batch_1', 'gw-b', 150, 250), false, 'gw-a holds it');
    assert.equal(await batches.lease('batch_1', 'gw-b', 201, 300), true, 'gw-a died: its lease ran out');
    assert.equal(await batches.change('batch_1', ['validating'], { status: 'in_progress', at: { in_progress: 5 }, total: 2 }), true);
    assert.equal(await batches.change('batch_1', ['validating'], { status: 'failed' }), false, 'already moved on');
    const b = await batches.get('batch_1', 'alice');
    assert.equal(b?.status, 'in_progress');
    assert.equal(b?.at.in_progress, 5);
    assert.equal(b?.total, 2);
    assert.equal(await batches.get('batch_1', 'bob'), undefined);
  });

  void test(`batch store (${h.name}): a line's answer is recorded once; the first one stays`, async (t) => {
    const db = h.open();
    t.after(() => db.close());
    await migrate(db);
    const batches = new BatchStore(db);
    assert.equal(await batches.record('batch_1', { line: 0, customId: 'a', statusCode: 200, requestId: 'r1', body: '{}' }), true);
    assert.equal(await batches.record('batch_1', { line: 0, customId: 'a', statusCode: 500, requestId: 'r2', body: '{}' }), false);
    assert.equal(await batches.record('batch_1', { line: 1, customId: 'b', statusCode: 404, requestId: 'r3', body: '{}' }), true);
    assert.deepEqual([...(await batches.answered('batch_1'))].sort(), [0, 1]);
    assert.deepEqual(await batches.counts('batch_1'), { completed: 1, failed: 1 });
    assert.equal((await batches.results('batch_1'))[0]?.requestId, 'r1');
  });
}
