// The embedded database's WAL checkpoints, in a worker thread with a connection of its own. SQLite
// checkpoints when a commit takes the WAL past 1000 pages, inside that commit: the copy into the
// database file and its fsync ran on the gateway's event loop, on a request's ledger row, every
// couple of hundred requests (a commit's wall time 52 µs without them, 103-142 µs with them on
// average; 13-35 ms at the ones that checkpointed). PASSIVE here never blocks the gateway's writes.
import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';

/** What the worker is started with. */
export interface CheckpointerData {
  readonly path: string;
  readonly everyMs: number;
  readonly busyTimeoutMs: number;
  readonly durable: boolean;
}

const d = workerData as CheckpointerData;
const db = new Database(d.path, { timeout: d.busyTimeoutMs });
// A checkpoint syncs the WAL before copying it and the database after, at either level.
db.pragma(d.durable ? 'synchronous = FULL' : 'synchronous = NORMAL');
const checkpoint = (): void => {
  try {
    db.pragma('wal_checkpoint(PASSIVE)');
  } catch {
    // A locked or busy file: the next interval tries again, and the WAL only grows meanwhile.
  }
};
const timer = setInterval(checkpoint, d.everyMs);
parentPort?.once('message', () => {
  clearInterval(timer);
  checkpoint();
  db.close();
  parentPort?.close();
});
