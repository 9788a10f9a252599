// The two homes of the store behind one small interface: an embedded SQLite file (better-sqlite3, no
// server to run) and PostgreSQL (pg) for gateways that share keys, budgets and usage. Both run the
// same SQL, written with $1-style parameters; the few places the dialects differ are the table below,
// so a reader sees every difference in one place.
//
// Why SQLite and not PGlite for the embedded home: on this project's 2-core machine PGlite took
// 4.5-5.3 s to open and 750 MB of RSS, better-sqlite3 28 ms and 51 MB. The common subset of the two
// (upserts, RETURNING, BIGINT, DOUBLE PRECISION) covers everything the store does.
import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import Database from 'better-sqlite3';
import pg from 'pg';
import { LlmgwError } from '../errors/index.js';
import type { CheckpointerData } from './checkpointer.js';

/** Which database a Db speaks to. */
export type Dialect = 'sqlite' | 'postgres';

/** A value bound to a parameter: the schema keeps to text, numbers and NULL. */
export type Param = string | number | null;

/** Runs statements: the database itself, or one transaction of it. */
export interface Sql {
  /** Every row the statement returns, as column -> value (BIGINT columns come back as numbers). */
  all(sql: string, params?: readonly Param[]): Promise<Row[]>;
  /** Runs a statement; returns how many rows it changed. */
  run(sql: string, params?: readonly Param[]): Promise<number>;
}

/** One row as the driver returns it; readers narrow each column (see `col`). */
export type Row = Readonly<Record<string, unknown>>;

/** A database of either dialect. */
export interface Db extends Sql {
  readonly dialect: Dialect;
  /** Runs `fn` in one transaction: committed when it resolves, rolled back when it throws. */
  transaction<T>(fn: (tx: Sql) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

/** What differs between the dialects, and nothing else. */
// nowMs: the database's own clock in ms since the epoch, for the placer lease: every gateway reads
// one clock, so a skew between the gateways' machines cannot make two of them think they hold it.
export const dialectSql: Readonly<Record<Dialect, { serial: string; forUpdate: string; least: string; migrationLock: string | undefined; nowMs: string }>> = {
  // INTEGER PRIMARY KEY is SQLite's rowid: assigned in order without a separate sequence.
  sqlite: { serial: 'INTEGER PRIMARY KEY', forUpdate: '', least: 'MIN', migrationLock: undefined, nowMs: "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)" },
  // Two gateways starting together on one PostgreSQL: the advisory lock lets one migrate while the
  // other waits, then finds the schema current. SQLite's BEGIN IMMEDIATE already excludes writers.
  // clock_timestamp, not now(): now() is the transaction's start, and a lease is checked against the present.
  postgres: {
    serial: 'BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY',
    forUpdate: ' FOR UPDATE',
    least: 'LEAST',
    migrationLock: 'SELECT pg_advisory_xact_lock(736467761)',
    nowMs: 'CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)',
  },
};

/** A column as a number (NULL: undefined); throws naming the column when the schema says otherwise. */
export function num(row: Row, column: string): number | undefined {
  const v = row[column];
  if (v === null || v === undefined) return undefined;
  if (typeof v === 'number') return v;
  if (typeof v === 'string' && v !== '' && Number.isFinite(Number(v))) return Number(v);
  throw new LlmgwError('LLMGW_STORE', `store: column ${column} holds ${JSON.stringify(v)}, not a number; the database was changed by something other than llmgw`);
}

/** A column as text (NULL: undefined). */
export function text(row: Row, column: string): string | undefined {
  const v = row[column];
  if (v === null || v === undefined) return undefined;
  if (typeof v === 'string') return v;
  throw new LlmgwError('LLMGW_STORE', `store: column ${column} holds ${JSON.stringify(v)}, not text; the database was changed by something other than llmgw`);
}

// The driver's code of an error (PostgreSQL's SQLSTATE, better-sqlite3's SQLITE_*), or ''.
const errorCode = (e: unknown): string => (typeof e === 'object' && e !== null && 'code' in e ? String(e.code) : '');

/** True for a failure that means the database cannot take the write now (down, full, busy), not a bug in the statement. */
export function isDown(e: unknown): boolean {
  if (e instanceof LlmgwError) return e.code === 'LLMGW_STORE_DOWN';
  const code = errorCode(e);
  // PostgreSQL classes: 08 connection, 53 resources (disk full), 57 operator intervention (shutdown), 58 system.
  if (/^(08|53|57|58)[0-9A-Z]{3}$/.test(code)) return true;
  if (/^SQLITE_(FULL|IOERR|BUSY|LOCKED|CANTOPEN|READONLY)/.test(code)) return true;
  // node-postgres' own: a refused or dropped connection, a query over query_timeout, an ended pool.
  if (/^(ECONNREFUSED|ECONNRESET|EPIPE|ETIMEDOUT|ENOTFOUND|EHOSTUNREACH)$/.test(code)) return true;
  const message = e instanceof Error ? e.message : '';
  return /Connection terminated|timeout exceeded when trying to connect|Query read timeout|Cannot use a pool after calling end|Client has encountered a connection error/.test(message);
}

/**
 * True when PostgreSQL rolled a transaction back for a conflict with another (deadlock 40P01,
 * serialization failure 40001): nothing of it was written and running it again may succeed.
 */
export function isConflict(e: unknown): boolean {
  const code = errorCode(e);
  return code === '40P01' || code === '40001';
}

/** True when a statement broke a UNIQUE constraint (a key name or hash already taken). */
export function isUniqueViolation(e: unknown): boolean {
  const code = errorCode(e);
  return code === '23505' || code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY';
}

// A down database is one error the gateway can branch on; anything else is rethrown as it came.
function wrapped(dialect: Dialect, e: unknown): unknown {
  if (e instanceof LlmgwError || !isDown(e)) return e;
  const why = e instanceof Error ? e.message : String(e);
  const fix = dialect === 'postgres' ? 'check that PostgreSQL at store.url is up and has disk space' : 'check the disk holding store.path';
  return new LlmgwError('LLMGW_STORE_DOWN', `store (${dialect}) cannot be used: ${why}; ${fix}`, { cause: e });
}

/** Where the embedded database lives and how long a locked file is waited for. */
export interface SqliteOptions {
  readonly path: string;
  readonly busyTimeoutMs: number;
  /** synchronous=FULL: every commit is fsynced (store.durable_commit). */
  readonly durable?: boolean | undefined;
  /**
   * Checkpoints the WAL this often from a worker thread (checkpointer.ts) instead of inside the
   * commit that filled it; unset, SQLite's own (a serving gateway sets it, a CLI command need not).
   */
  readonly checkpointEveryMs?: number | undefined;
}

class SqliteDb implements Db {
  readonly dialect = 'sqlite';
  readonly #db: Database.Database;
  readonly #statements = new Map<string, Database.Statement>();
  // better-sqlite3 is synchronous, but a transaction's body awaits: everything else waits its turn
  // here, so no other statement runs inside another caller's transaction.
  #tail: Promise<unknown> = Promise.resolve();
  readonly #direct: Sql;
  readonly #checkpointer: Worker | undefined;

  constructor(db: Database.Database, checkpointer?: Worker) {
    this.#db = db;
    this.#checkpointer = checkpointer;
    this.#direct = { all: (s, p) => Promise.resolve(this.#all(s, p)), run: (s, p) => Promise.resolve(this.#run(s, p)) };
  }

  #prepare(sql: string): Database.Statement {
    let st = this.#statements.get(sql);
    if (st === undefined) {
      // $1 is PostgreSQL's; better-sqlite3 binds named parameters from an object.
      st = this.#db.prepare(sql.replace(/\$(\d+)/g, '@p$1'));
      this.#statements.set(sql, st);
    }
    return st;
  }

  #bind(params: readonly Param[] | undefined): Record<string, Param> {
    const out: Record<string, Param> = {};
    params?.forEach((v, i) => (out[`p${i + 1}`] = v));
    return out;
  }

  #all(sql: string, params?: readonly Param[]): Row[] {
    try {
      const st = this.#prepare(sql);
      return st.reader ? (st.all(this.#bind(params)) as Row[]) : (st.run(this.#bind(params)), []);
    } catch (e) {
      throw wrapped('sqlite', e);
    }
  }

  #run(sql: string, params?: readonly Param[]): number {
    try {
      const st = this.#prepare(sql);
      return st.reader ? st.all(this.#bind(params)).length : st.run(this.#bind(params)).changes;
    } catch (e) {
      throw wrapped('sqlite', e);
    }
  }

  #turn<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#tail.then(fn, fn);
    this.#tail = run.catch(() => undefined);
    return run;
  }

  all(sql: string, params?: readonly Param[]): Promise<Row[]> {
    return this.#turn(() => Promise.resolve(this.#all(sql, params)));
  }

  run(sql: string, params?: readonly Param[]): Promise<number> {
    return this.#turn(() => Promise.resolve(this.#run(sql, params)));
  }

  transaction<T>(fn: (tx: Sql) => Promise<T>): Promise<T> {
    return this.#turn(async () => {
      this.#run('BEGIN IMMEDIATE');
      try {
        const out = await fn(this.#direct);
        this.#run('COMMIT');
        return out;
      } catch (e) {
        if (this.#db.inTransaction) this.#db.exec('ROLLBACK');
        throw e;
      }
    });
  }

  close(): Promise<void> {
    return this.#turn(async () => {
      const w = this.#checkpointer;
      if (w !== undefined && w.threadId >= 0) {
        const exited = once(w, 'exit');
        // Held open until its last checkpoint is written.
        w.ref();
        w.postMessage('close');
        await exited;
      }
      if (this.#db.open) this.#db.close();
    });
  }
}

/**
 * Opens (creating) the embedded database. WAL with synchronous=NORMAL: a commit is in the file's
 * log before it returns, so it survives the gateway being killed (kill -9, a crash); only a power
 * cut can lose the last commits, which FULL (`durable`) prevents at an fsync a commit.
 */
export function openSqlite(o: SqliteOptions): Db {
  let db: Database.Database;
  try {
    db = new Database(o.path, { timeout: o.busyTimeoutMs });
    db.pragma('journal_mode = WAL');
    db.pragma(o.durable === true ? 'synchronous = FULL' : 'synchronous = NORMAL');
    db.pragma('foreign_keys = ON');
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    throw new LlmgwError('LLMGW_STORE', `store.path: cannot open ${o.path} (${why}); name a file in a directory llmgw may write`, { cause: e });
  }
  return new SqliteDb(db, o.checkpointEveryMs === undefined ? undefined : checkpointer(db, o, o.checkpointEveryMs));
}

// The worker checkpointing `db`'s WAL; should it fail, the commits checkpoint again as SQLite would.
function checkpointer(db: Database.Database, o: SqliteOptions, everyMs: number): Worker {
  const data: CheckpointerData = { path: o.path, everyMs, busyTimeoutMs: o.busyTimeoutMs, durable: o.durable === true };
  const w = new Worker(new URL('./checkpointer.js', import.meta.url), { workerData: data });
  db.pragma('wal_autocheckpoint = 0');
  const fallBack = (): void => {
    if (db.open) db.pragma('wal_autocheckpoint = 1000');
  };
  w.once('error', fallBack);
  w.once('exit', (code) => {
    if (code !== 0) fallBack();
  });
  // Checkpoints are no reason to keep a process alive; close() ends the worker when one is.
  w.unref();
  return w;
}

/** Where the shared database is and how long any one call may take before it counts as down. */
export interface PostgresOptions {
  readonly url: string;
  readonly timeoutMs: number;
  readonly maxConnections: number;
  /**
   * Commits do not wait for the server's WAL flush (synchronous_commit off for this pool's
   * sessions): the ledger's pool, unless store.durable_commit. A row is in the server's memory when
   * its commit returns, so it survives the gateway being killed; a crash of the PostgreSQL server
   * itself may lose its last ~0.6 s of commits. Keys and migrations never go through such a pool.
   */
  readonly asyncCommit?: boolean | undefined;
  /** An idle connection failed (the server restarted); the pool replaces it, this only reports it. */
  readonly onIdleError: (e: Error) => void;
}

// BIGINT (oid 20) arrives as a string by default; every BIGINT of ours (milliseconds, tokens,
// micro-dollars) is far below 2^53, so numbers are exact.
const bigintAsNumber: pg.CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    oid === 20 ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format ?? 'text')) as pg.CustomTypesConfig['getTypeParser'],
};

class PostgresDb implements Db {
  readonly dialect = 'postgres';
  readonly #pool: pg.Pool;

  constructor(pool: pg.Pool) {
    this.#pool = pool;
  }

  async all(sql: string, params?: readonly Param[]): Promise<Row[]> {
    try {
      return (await this.#pool.query(sql, params === undefined ? [] : [...params])).rows as Row[];
    } catch (e) {
      throw wrapped('postgres', e);
    }
  }

  async run(sql: string, params?: readonly Param[]): Promise<number> {
    try {
      return (await this.#pool.query(sql, params === undefined ? [] : [...params])).rowCount ?? 0;
    } catch (e) {
      throw wrapped('postgres', e);
    }
  }

  async transaction<T>(fn: (tx: Sql) => Promise<T>): Promise<T> {
    let client: pg.PoolClient;
    try {
      client = await this.#pool.connect();
    } catch (e) {
      throw wrapped('postgres', e);
    }
    // A checked-out client whose connection dies emits 'error' with nobody listening (the pool
    // listens only to idle ones), which would take the process down; the query in flight fails anyway.
    const onError = (): void => undefined;
    client.on('error', onError);
    const tx: Sql = {
      all: async (s, p) => (await client.query(s, p === undefined ? [] : [...p])).rows as Row[],
      run: async (s, p) => (await client.query(s, p === undefined ? [] : [...p])).rowCount ?? 0,
    };
    let broken: unknown;
    try {
      await client.query('BEGIN');
      const out = await fn(tx);
      await client.query('COMMIT');
      return out;
    } catch (e) {
      // A failed ROLLBACK means the connection is gone: it is destroyed, not handed to the next caller.
      await client.query('ROLLBACK').catch((r: unknown) => (broken = r));
      throw wrapped('postgres', e);
    } finally {
      client.off('error', onError);
      client.release(broken instanceof Error ? broken : undefined);
    }
  }

  close(): Promise<void> {
    return this.#pool.end();
  }
}

/** Connects a pool to PostgreSQL at `url`; the first statement proves the server is there. */
export function openPostgres(o: PostgresOptions): Db {
  const pool = new pg.Pool({
    connectionString: o.url,
    max: o.maxConnections,
    connectionTimeoutMillis: o.timeoutMs,
    // Client-side: a server that stopped answering fails the call instead of hanging the request.
    query_timeout: o.timeoutMs,
    types: bigintAsNumber,
    ...(o.asyncCommit === true ? { options: '-c synchronous_commit=off' } : {}),
  });
  pool.on('error', o.onIdleError);
  return new PostgresDb(pool);
}
