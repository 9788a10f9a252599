// The embedded database's WAL is checkpointed by the worker, every checkpointEveryMs and at close,
// never inside a commit of the connection that writes the rows.
import * as assert from 'node:assert/strict';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { openSqlite, type Db } from '../../src/store/index.js';

// 3,000 commits of 1 KB: about 4 MB, several times SQLite's own checkpoint point of 1000 pages.
async function fill(db: Db): Promise<void> {
  await db.run('CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)');
  for (let i = 0; i < 3_000; i++) await db.run('INSERT INTO t (v) VALUES ($1)', ['x'.repeat(1_000)]);
}

const sizeOf = (path: string): number => statSync(path).size;

void test('store: commits leave the WAL to the checkpointer, which writes it into the database file at close', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-ckpt-'));
  const path = join(dir, 'llmgw.db');
  try {
    const db = openSqlite({ path, busyTimeoutMs: 1_000, checkpointEveryMs: 600_000 });
    await fill(db);
    assert.ok(sizeOf(path) < 1_000_000, `no commit checkpointed: the database file is ${sizeOf(path)} bytes`);
    await db.close();
    assert.ok(sizeOf(path) > 3_000_000, `close checkpointed: the database file is ${sizeOf(path)} bytes`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

void test('store: the checkpointer writes the WAL into the database file every checkpointEveryMs while the gateway runs', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-ckpt-'));
  const path = join(dir, 'llmgw.db');
  const db = openSqlite({ path, busyTimeoutMs: 1_000, checkpointEveryMs: 50 });
  try {
    await fill(db);
    const until = Date.now() + 10_000;
    while (sizeOf(path) < 3_000_000 && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
    assert.ok(sizeOf(path) > 3_000_000, `checkpointed while open: the database file is ${sizeOf(path)} bytes`);
    assert.equal((await db.all('SELECT count(*) AS n FROM t'))[0]?.n, 3_000);
  } finally {
    await db.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

void test('store: without checkpointEveryMs, SQLite checkpoints in the commits as before', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-ckpt-'));
  const path = join(dir, 'llmgw.db');
  const db = openSqlite({ path, busyTimeoutMs: 1_000 });
  try {
    await fill(db);
    assert.ok(sizeOf(path) > 2_000_000, `the commits checkpointed: the database file is ${sizeOf(path)} bytes`);
  } finally {
    await db.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
