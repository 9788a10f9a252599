// The store as the gateway uses it: opened from the `store:` section (embedded file or PostgreSQL),
// migrated, gateway.api_keys imported, then kept current (other gateways' key changes read every
// refresh_ms, retention applied hourly) until close().
import { join } from 'node:path';
import type { Logger } from '../log/index.js';
import type { StoreConfig } from './config.js';
import { openPostgres, openSqlite, type Db } from './db.js';
import { keyJson, keyPatchOf, keySpecOf } from './key-json.js';
import { isLimited, KeyStore, type ConfigKey, type KeyRecord } from './keys.js';
import { Ledger, ledgerConnections, type AdmitRequest, type StoreHold, type UsageRow } from './ledger.js';
import type { TokenPrice } from './limits.js';
import { migrate } from './migrations.js';
import { BatchStore } from './batches.js';
import { FileStore } from './files.js';
import { DbResponseStore } from './responses.js';
import { parseUsageQuery, usageCsv, usageJson, usageTotals } from './usage.js';

/** What opening the store takes beyond its section. */
export interface OpenStoreOptions {
  /** Where the embedded database goes when store.path is empty (agent.state_dir). */
  readonly stateDir: string;
  /** gateway.api_keys, imported read-only. */
  readonly configKeys: readonly ConfigKey[];
  /** This gateway's name when store.gateway_id is empty. */
  readonly defaultGatewayId: string;
  readonly log: Logger;
  readonly now?: (() => number) | undefined;
}

const hourMs = 3_600_000;
// How often the embedded file's WAL is checkpointed off the event loop: at the 300 rows/s one serve
// of short chats writes, a second's WAL is a few hundred pages, under SQLite's own 1000.
const checkpointEveryMs = 1_000;

/** Keys, budgets, the usage ledger and stored responses over one database. */
export class Store {
  readonly db: Db;
  readonly keys: KeyStore;
  readonly ledger: Ledger;
  readonly responses: DbResponseStore;
  /** Batch API files and batches (issue 50). */
  readonly files: FileStore;
  readonly batches: BatchStore;
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #timers: NodeJS.Timeout[] = [];
  #closing: Promise<void> | undefined;

  readonly #ledgerDb: Db;
  readonly #writerDb: Db;

  private constructor(db: Db, ledgerDb: Db, writerDb: Db, c: StoreConfig, o: OpenStoreOptions) {
    this.db = db;
    this.#ledgerDb = ledgerDb;
    this.#writerDb = writerDb;
    this.#log = o.log;
    this.#now = o.now ?? Date.now;
    this.keys = new KeyStore(db, { now: o.now });
    const prices: Record<string, TokenPrice> = {};
    for (const [model, p] of Object.entries(c.prices)) prices[model] = { prompt: p.promptPerMillion, cached: p.cachedPerMillion, completion: p.completionPerMillion };
    this.ledger = new Ledger({
      db: ledgerDb,
      writer: writerDb,
      gatewayId: c.gatewayId === '' ? o.defaultGatewayId : c.gatewayId,
      prices,
      holdTtlMs: c.holdTtlMs,
      maxPendingRows: c.maxPendingRows,
      log: o.log,
      now: o.now,
    });
    this.responses = new DbResponseStore(db, { now: o.now });
    this.files = new FileStore(db);
    this.batches = new BatchStore(db);
  }

  /** Opens and migrates the database, imports the config's keys, and starts the refresh and retention timers. */
  static async open(c: StoreConfig, o: OpenStoreOptions): Promise<Store> {
    const onIdleError = (e: Error): void => o.log.warn({ err: e }, 'store.connection_lost');
    const db =
      c.url === ''
        ? openSqlite({ path: c.path === '' ? join(o.stateDir, 'llmgw.db') : c.path, busyTimeoutMs: c.timeoutMs, durable: c.durableCommit, checkpointEveryMs })
        : openPostgres({ url: c.url, timeoutMs: c.timeoutMs, maxConnections: 4, onIdleError });
    // On PostgreSQL the ledger and admission have a pool of their own, whose commits need not wait
    // for the server's disk unless durable_commit; SQLite is one connection (NORMAL survives a kill).
    const ledgerDb =
      c.url === '' || c.durableCommit ? db : openPostgres({ url: c.url, timeoutMs: c.timeoutMs, maxConnections: 8, asyncCommit: true, onIdleError });
    // The ledger's batches have connections of their own: behind admissions waiting on a key's lock,
    // a row's commit waited for a free connection of their pool.
    const writerDb =
      c.url === '' ? db : openPostgres({ url: c.url, timeoutMs: c.timeoutMs, maxConnections: ledgerConnections, asyncCommit: !c.durableCommit, onIdleError });
    try {
      const from = await migrate(db);
      const store = new Store(db, ledgerDb, writerDb, c, o);
      await store.keys.importConfig(o.configKeys);
      store.#start(c);
      o.log.info({ dialect: db.dialect, schemaFrom: from, keys: store.keys.list().length }, 'store.opened');
      return store;
    } catch (e) {
      if (writerDb !== db) await writerDb.close();
      if (ledgerDb !== db) await ledgerDb.close();
      await db.close();
      throw e;
    }
  }

  #start(c: StoreConfig): void {
    // Deliberately in the background: a failed refresh keeps the keys last read, and says so.
    const refresh = setInterval(() => void this.keys.refresh().catch((e: unknown) => this.#log.warn({ err: e }, 'store.refresh_failed')), c.refreshMs);
    const prune = (): void =>
      void this.ledger
        .prune(c.retentionDays)
        .then((n) => (n > 0 ? this.#log.info({ rows: n, retentionDays: c.retentionDays }, 'store.pruned') : undefined))
        .catch((e: unknown) => this.#log.warn({ err: e }, 'store.prune_failed'));
    const hourly = setInterval(prune, hourMs);
    refresh.unref();
    hourly.unref();
    this.#timers.push(refresh, hourly);
    prune();
  }

  /** The key with this sha256 as last read. */
  bySha256(sha256: string): KeyRecord | undefined {
    return this.keys.bySha256(sha256);
  }

  /** Whether any key was ever stored (config ones included). */
  hasKeys(): boolean {
    return this.keys.hasKeys();
  }

  /** Whether a key's requests are admitted through the database (it has a limit or budget). */
  isLimited(k: KeyRecord): boolean {
    return isLimited(k);
  }

  admit(r: AdmitRequest): Promise<StoreHold> {
    return this.ledger.admit(r);
  }

  record(row: UsageRow, hold?: StoreHold): Promise<void> {
    return this.ledger.record(row, hold);
  }

  release(hold: StoreHold): Promise<void> {
    return this.ledger.release(hold);
  }

  /** Every key as admin JSON. */
  listKeys(o: { revoked: boolean }): Record<string, unknown>[] {
    return this.keys.list(o).map(keyJson);
  }

  getKey(idOrName: string): Record<string, unknown> | undefined {
    const k = this.keys.get(idOrName);
    return k === undefined ? undefined : keyJson(k);
  }

  /** Issues a key from an admin API body; the answer carries the secret once. */
  async createKey(body: unknown): Promise<Record<string, unknown>> {
    const { key, record } = await this.keys.create(keySpecOf(body, this.#now()));
    return { ...keyJson(record), key };
  }

  /** Changes a key's limits from an admin API body (the fields given); answers the key as getKey does. */
  async updateKey(idOrName: string, body: unknown): Promise<Record<string, unknown>> {
    return keyJson(await this.keys.update(idOrName, keyPatchOf(body, this.#now())));
  }

  async revokeKey(idOrName: string): Promise<Record<string, unknown>> {
    return keyJson(await this.keys.revoke(idOrName));
  }

  async rotateKey(idOrName: string): Promise<Record<string, unknown>> {
    const { key, record } = await this.keys.rotate(idOrName);
    return { ...keyJson(record), key };
  }

  /** Usage totals for a query string; CSV when asked. */
  async usage(params: URLSearchParams): Promise<{ contentType: string; body: string }> {
    const q = parseUsageQuery(params, this.#now());
    const rows = await usageTotals(this.db, q);
    if (params.get('format') === 'csv') return { contentType: 'text/csv; charset=utf-8', body: usageCsv(q.groupBy, rows) };
    return {
      contentType: 'application/json',
      body: JSON.stringify({ object: 'list', from: new Date(q.from).toISOString(), to: new Date(q.to).toISOString(), group_by: q.groupBy, data: usageJson(q.groupBy, rows) }),
    };
  }

  /** Writes what is pending, stops the timers, closes the database; idempotent. */
  close(): Promise<void> {
    return (this.#closing ??= (async () => {
      for (const t of this.#timers) clearInterval(t);
      await this.ledger.close();
      if (this.#writerDb !== this.db) await this.#writerDb.close();
      if (this.#ledgerDb !== this.db) await this.#ledgerDb.close();
      await this.db.close();
    })());
  }
}
