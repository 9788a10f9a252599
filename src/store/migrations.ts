// The store's schema as numbered migrations, one list for both dialects ({serial} is the only
// placeholder: see dialectSql). Applied at start in one transaction; a database whose schema is newer
// than this list is refused, because an older llmgw writing to it could corrupt what it cannot read.
import { LlmgwError } from '../errors/index.js';
import { dialectSql, num, type Db } from './db.js';

/** One step of the schema: its version and its statements, in order. */
export interface Migration {
  readonly version: number;
  readonly statements: readonly string[];
}

/** Every migration, oldest first; the last one's version is the schema this llmgw writes. */
export const migrations: readonly Migration[] = [
  {
    version: 1,
    statements: [
      // Keys: the secret is never stored, only its sha256. models is a JSON array ([] = any model).
      // Budgets and limits of 0 are none. Times are milliseconds since the epoch, UTC.
      `CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        sha256 TEXT NOT NULL UNIQUE,
        team TEXT NOT NULL,
        owner TEXT NOT NULL,
        source TEXT NOT NULL,
        admin INTEGER NOT NULL,
        models TEXT NOT NULL,
        requests_per_minute BIGINT NOT NULL,
        tokens_per_minute BIGINT NOT NULL,
        tokens_per_day BIGINT NOT NULL,
        tokens_per_month BIGINT NOT NULL,
        cost_per_day_micros BIGINT NOT NULL,
        cost_per_month_micros BIGINT NOT NULL,
        priority TEXT NOT NULL,
        weight DOUBLE PRECISION NOT NULL,
        expires_at BIGINT,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        revoked_at BIGINT
      )`,
      'CREATE INDEX api_keys_updated ON api_keys (updated_at)',
      // The ledger: one row per finished request, never updated.
      `CREATE TABLE usage_ledger (
        id {serial},
        request_id TEXT NOT NULL,
        at BIGINT NOT NULL,
        key_id TEXT NOT NULL,
        key_name TEXT NOT NULL,
        team TEXT NOT NULL,
        model TEXT NOT NULL,
        endpoint TEXT NOT NULL,
        replica TEXT NOT NULL,
        tier TEXT NOT NULL,
        status INTEGER NOT NULL,
        prompt_tokens BIGINT NOT NULL,
        cached_tokens BIGINT NOT NULL,
        completion_tokens BIGINT NOT NULL,
        cost_micros BIGINT NOT NULL,
        ttft_ms DOUBLE PRECISION,
        total_ms DOUBLE PRECISION NOT NULL,
        gateway TEXT NOT NULL
      )`,
      'CREATE INDEX usage_ledger_at ON usage_ledger (at)',
      'CREATE INDEX usage_ledger_key_at ON usage_ledger (key_id, at)',
      // What each key spent per UTC day (d2026-12-04) and month (m2026-12): the ledger's sums, kept
      // in the same transaction as its rows so a budget check reads one row, not a day of requests.
      `CREATE TABLE spend (
        key_id TEXT NOT NULL,
        period TEXT NOT NULL,
        tokens BIGINT NOT NULL,
        cost_micros BIGINT NOT NULL,
        requests BIGINT NOT NULL,
        PRIMARY KEY (key_id, period)
      )`,
      // Requests admitted and not finished: what they may still spend. A gateway killed mid-request
      // leaves its holds behind; they stop counting at expires_at.
      `CREATE TABLE holds (
        id TEXT PRIMARY KEY,
        key_id TEXT NOT NULL,
        gateway TEXT NOT NULL,
        tokens BIGINT NOT NULL,
        cost_micros BIGINT NOT NULL,
        expires_at BIGINT NOT NULL
      )`,
      'CREATE INDEX holds_key ON holds (key_id)',
      // Per-minute limits as token buckets (kind: requests or tokens), shared by every gateway.
      `CREATE TABLE buckets (
        key_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        level DOUBLE PRECISION NOT NULL,
        at BIGINT NOT NULL,
        PRIMARY KEY (key_id, kind)
      )`,
      // Stored Responses API answers (the owner is the key's name).
      `CREATE TABLE responses (
        owner TEXT NOT NULL,
        id TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (owner, id)
      )`,
      'CREATE INDEX responses_expires ON responses (expires_at)',
    ],
  },
  {
    version: 2,
    statements: [
      // The placer lease of a cluster with several gateways: who places replicas (holder, one
      // gateway run), until when on the database's clock, and the epoch it took it under, which only
      // grows and which agents fence assignments by. One row per lease name.
      `CREATE TABLE placer_lease (
        name TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        epoch BIGINT NOT NULL,
        expires_at BIGINT NOT NULL
      )`,
    ],
  },
  {
    version: 3,
    statements: [
      // Batch API files (issue 50), body and all: a gateway that takes over another's batch must
      // read its input, which a file under one gateway's state dir would not let it do.
      `CREATE TABLE batch_files (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        purpose TEXT NOT NULL,
        filename TEXT NOT NULL,
        bytes BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        body TEXT NOT NULL
      )`,
      'CREATE INDEX batch_files_owner ON batch_files (owner, created_at)',
      // A batch and where it stands; runner and lease_until say which gateway runs it until when.
      `CREATE TABLE batches (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        owner_sha256 TEXT NOT NULL,
        endpoint TEXT NOT NULL,
        input_file_id TEXT NOT NULL,
        completion_window TEXT NOT NULL,
        status TEXT NOT NULL,
        metadata TEXT,
        errors TEXT,
        total BIGINT NOT NULL,
        output_file_id TEXT,
        error_file_id TEXT,
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        in_progress_at BIGINT,
        finalizing_at BIGINT,
        completed_at BIGINT,
        failed_at BIGINT,
        expired_at BIGINT,
        cancelling_at BIGINT,
        cancelled_at BIGINT,
        paused_at BIGINT,
        runner TEXT,
        lease_until BIGINT
      )`,
      'CREATE INDEX batches_owner ON batches (owner, created_at)',
      'CREATE INDEX batches_status ON batches (status)',
      // One answer per input line, written before the line counts as done: the key is what makes a
      // line answered once, whichever gateway runs it and however often it restarts.
      `CREATE TABLE batch_results (
        batch_id TEXT NOT NULL,
        line INTEGER NOT NULL,
        custom_id TEXT NOT NULL,
        status_code INTEGER NOT NULL,
        request_id TEXT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (batch_id, line)
      )`,
    ],
  },
  {
    version: 4,
    statements: [
      // Admission's holds of each gateway of several (admission/peers.ts): one row per gateway,
      // replaced every round; a row past expires_at (the database's clock) is a gateway that died.
      `CREATE TABLE admission_peers (
        gateway TEXT PRIMARY KEY,
        body TEXT NOT NULL,
        updated_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL
      )`,
    ],
  },
];

/** The schema version this llmgw writes. */
export const schemaVersion = migrations.reduce((v, m) => Math.max(v, m.version), 0);

/** Brings the database up to schemaVersion; returns the version it found. Throws LLMGW_STORE_SCHEMA on a newer one. */
export async function migrate(db: Db, list: readonly Migration[] = migrations): Promise<number> {
  const d = dialectSql[db.dialect];
  const latest = list.reduce((v, m) => Math.max(v, m.version), 0);
  return db.transaction(async (tx) => {
    if (d.migrationLock !== undefined) await tx.all(d.migrationLock);
    await tx.run('CREATE TABLE IF NOT EXISTS llmgw_schema (version INTEGER NOT NULL)');
    const found = (await tx.all('SELECT MAX(version) AS v FROM llmgw_schema')).map((r) => num(r, 'v'))[0] ?? 0;
    if (found > latest) {
      throw new LlmgwError(
        'LLMGW_STORE_SCHEMA',
        `store: the database is at schema ${found}, newer than the ${latest} this llmgw knows; run the llmgw that wrote it (or newer), or point store at another database`,
      );
    }
    for (const m of list) {
      if (m.version <= found) continue;
      for (const s of m.statements) await tx.run(s.replaceAll('{serial}', d.serial));
      await tx.run('INSERT INTO llmgw_schema (version) VALUES ($1)', [m.version]);
    }
    return found;
  });
}
