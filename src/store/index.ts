// The store's public surface: keys, budgets, the usage ledger and stored responses over one schema,
// in an embedded SQLite file by default or a shared PostgreSQL.
export { admissionBoard } from './admission-board.js';
export type { BoardReport } from './admission-board.js';
export { parseStoreSection, storeDefaults } from './config.js';
export type { ModelPrice, StoreConfig, WhenDown } from './config.js';
export { dialectSql, isDown, openPostgres, openSqlite } from './db.js';
export type { Db, Dialect, Row, Sql } from './db.js';
export { keyJson, keyPatchOf, keySpecOf } from './key-json.js';
export { isLimited, KeyStore, sha256Of } from './keys.js';
export type { ConfigKey, KeyPatch, KeyPriority, KeyRecord, KeySource, KeySpec } from './keys.js';
export { claimLease, PlacerLease, releaseLease } from './lease.js';
export type { LeaseClaim, PlacerLeaseOptions } from './lease.js';
export { Ledger } from './ledger.js';
export type { AdmitRequest, StoreHold, UsageRow } from './ledger.js';
export { costOf, decide, periodsOf } from './limits.js';
export type { AdmitDecision, AdmitFacts, KeyLimits, TokenPrice } from './limits.js';
export { migrate, migrations, schemaVersion } from './migrations.js';
export type { Migration } from './migrations.js';
export { DbResponseStore } from './responses.js';
export type { StoredResponse } from './responses.js';
export { Store } from './store.js';
export type { OpenStoreOptions } from './store.js';
export { parseUsageQuery, usageCsv, usageDimensions, usageTotals } from './usage.js';
export type { UsageDimension, UsageQuery, UsageTotal } from './usage.js';
export { FileStore } from './files.js';
export type { StoredFile } from './files.js';
export { batchMoments, BatchStore } from './batches.js';
export type { BatchChange, BatchMoment, BatchResult, BatchStatus, StoredBatch } from './batches.js';
