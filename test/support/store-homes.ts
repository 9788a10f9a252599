// The two homes of the store for a test file: one PostgreSQL started before its tests, and temp
// dirs for embedded files, both gone after them.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before } from 'node:test';
import { startPostgres, type TestPostgres } from './postgres.js';

/** What a file's tests open stores in; `pg` is set once the file's `before` ran. */
export interface StoreHomes {
  pg: TestPostgres | undefined;
  /** A new temp dir named `prefix...`, removed after the file's tests. */
  tempDir(prefix: string): string;
}

/** Registers the file's before/after hooks; call once at the top of a test file. */
export function storeHomes(): StoreHomes {
  const dirs: string[] = [];
  const homes: StoreHomes = {
    pg: undefined,
    tempDir(prefix) {
      const dir = mkdtempSync(join(tmpdir(), prefix));
      dirs.push(dir);
      return dir;
    },
  };
  before(async () => {
    homes.pg = await startPostgres();
  });
  after(() => {
    homes.pg?.close();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });
  return homes;
}
