// Batch API state in the store's database: each batch's row (status, times, file ids, which gateway
// runs it until when) and one answer row per input line. A line's answer is inserted before the line
// counts as done, and a runner skips every line that has one, so a gateway killed mid-batch and
// started again, or another one taking the batch over, never sends an answered line twice.
import { num, text, type Db, type Row } from './db.js';

/** OpenAI's batch statuses. */
export type BatchStatus = 'validating' | 'failed' | 'in_progress' | 'finalizing' | 'completed' | 'expired' | 'cancelling' | 'cancelled';

/** The moments of a batch's life, milliseconds since the epoch; each column is `<name>_at`. */
export const batchMoments = ['in_progress', 'finalizing', 'completed', 'failed', 'expired', 'cancelling', 'cancelled', 'paused'] as const;
export type BatchMoment = (typeof batchMoments)[number];

/** One batch as stored. */
export interface StoredBatch {
  readonly id: string;
  readonly owner: string;
  /** sha256 of the key that created it: the key its lines run as. */
  readonly ownerSha256: string;
  readonly endpoint: string;
  readonly inputFileId: string;
  readonly completionWindow: string;
  readonly status: BatchStatus;
  /** JSON text of the client's metadata, or undefined. */
  readonly metadata: string | undefined;
  /** JSON text of the validation errors (OpenAI's errors.data), or undefined. */
  readonly errors: string | undefined;
  readonly total: number;
  readonly outputFileId: string | undefined;
  readonly errorFileId: string | undefined;
  readonly createdAt: number;
  readonly expiresAt: number;
  readonly at: Readonly<Partial<Record<BatchMoment, number>>>;
  readonly runner: string | undefined;
  readonly leaseUntil: number | undefined;
}

/** One input line's answer. */
export interface BatchResult {
  readonly line: number;
  readonly customId: string;
  /** The HTTP status the request path answered; 0 for a line that was never sent (its body is the error). */
  readonly statusCode: number;
  readonly requestId: string;
  /** The answer's body (JSON text). */
  readonly body: string;
}

/** A status and the moments it sets; undefined fields are left as they are. */
export interface BatchChange {
  readonly status?: BatchStatus;
  readonly at?: Readonly<Partial<Record<BatchMoment, number | null>>>;
  readonly errors?: string;
  readonly total?: number;
  readonly outputFileId?: string;
  readonly errorFileId?: string;
}

const statuses: readonly BatchStatus[] = ['validating', 'failed', 'in_progress', 'finalizing', 'completed', 'expired', 'cancelling', 'cancelled'];
const statusOf = (v: string | undefined): BatchStatus => statuses.find((s) => s === v) ?? 'failed';

const columns = `id, owner, owner_sha256, endpoint, input_file_id, completion_window, status, metadata, errors, total, output_file_id, error_file_id, created_at, expires_at, runner, lease_until, ${batchMoments.map((m) => `${m}_at`).join(', ')}`;

function batchOf(r: Row): StoredBatch {
  const at: Partial<Record<BatchMoment, number>> = {};
  for (const m of batchMoments) {
    const v = num(r, `${m}_at`);
    if (v !== undefined) at[m] = v;
  }
  return {
    id: text(r, 'id') ?? '',
    owner: text(r, 'owner') ?? '',
    ownerSha256: text(r, 'owner_sha256') ?? '',
    endpoint: text(r, 'endpoint') ?? '',
    inputFileId: text(r, 'input_file_id') ?? '',
    completionWindow: text(r, 'completion_window') ?? '',
    status: statusOf(text(r, 'status')),
    metadata: text(r, 'metadata'),
    errors: text(r, 'errors'),
    total: num(r, 'total') ?? 0,
    outputFileId: text(r, 'output_file_id'),
    errorFileId: text(r, 'error_file_id'),
    createdAt: num(r, 'created_at') ?? 0,
    expiresAt: num(r, 'expires_at') ?? 0,
    at,
    runner: text(r, 'runner'),
    leaseUntil: num(r, 'lease_until'),
  };
}

/** Batches and their lines' answers over the store's database. */
export class BatchStore {
  readonly #db: Db;

  constructor(db: Db) {
    this.#db = db;
  }

  async create(b: Pick<StoredBatch, 'id' | 'owner' | 'ownerSha256' | 'endpoint' | 'inputFileId' | 'completionWindow' | 'metadata' | 'createdAt' | 'expiresAt'>): Promise<void> {
    await this.#db.run(
      'INSERT INTO batches (id, owner, owner_sha256, endpoint, input_file_id, completion_window, status, metadata, total, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, $9, $10)',
      [b.id, b.owner, b.ownerSha256, b.endpoint, b.inputFileId, b.completionWindow, 'validating', b.metadata ?? null, b.createdAt, b.expiresAt],
    );
  }

  /** The batch, whoever owns it (owner undefined: the runner's view). */
  async get(id: string, owner?: string): Promise<StoredBatch | undefined> {
    const r = (await this.#db.all(`SELECT ${columns} FROM batches WHERE id = $1`, [id]))[0];
    const b = r === undefined ? undefined : batchOf(r);
    return b === undefined || (owner !== undefined && b.owner !== owner) ? undefined : b;
  }

  /** The owner's batches, newest first, at most `limit`, after the one named `after`. */
  async list(owner: string, o: { limit: number; after?: string | undefined }): Promise<StoredBatch[]> {
    const rows =
      o.after === undefined
        ? await this.#db.all(`SELECT ${columns} FROM batches WHERE owner = $1 ORDER BY created_at DESC, id DESC LIMIT $2`, [owner, o.limit])
        : await this.#db.all(
            `SELECT ${columns} FROM batches WHERE owner = $1 AND (created_at, id) < (SELECT created_at, id FROM batches WHERE id = $2) ORDER BY created_at DESC, id DESC LIMIT $3`,
            [owner, o.after, o.limit],
          );
    return rows.map(batchOf);
  }

  /** Ids of the batches some gateway still has work on. */
  async open(): Promise<string[]> {
    const rows = await this.#db.all("SELECT id FROM batches WHERE status IN ('validating', 'in_progress', 'finalizing', 'cancelling') ORDER BY created_at, id");
    return rows.map((r) => text(r, 'id') ?? '');
  }

  /**
   * Takes (or keeps) the right to run a batch until `until`: granted when nobody holds it, this
   * runner does, or the holder's lease ran out (its gateway died). Returns whether it was granted.
   */
  async lease(id: string, runner: string, now: number, until: number): Promise<boolean> {
    const n = await this.#db.run('UPDATE batches SET runner = $1, lease_until = $2 WHERE id = $3 AND (runner IS NULL OR runner = $1 OR lease_until < $4)', [runner, until, id, now]);
    return n > 0;
  }

  /** Gives up a lease so another gateway need not wait for it to run out. */
  async unlease(id: string, runner: string): Promise<void> {
    await this.#db.run('UPDATE batches SET runner = NULL, lease_until = NULL WHERE id = $1 AND runner = $2', [id, runner]);
  }

  /**
   * Applies `c` when the batch's status is one of `from`; returns whether it did. The guard makes a
   * cancel and a runner's step race safely: whichever writes second finds the status moved on.
   */
  async change(id: string, from: readonly BatchStatus[], c: BatchChange): Promise<boolean> {
    const sets: string[] = [];
    const params: (string | number | null)[] = [];
    const set = (column: string, v: string | number | null): void => {
      params.push(v);
      sets.push(`${column} = $${params.length}`);
    };
    if (c.status !== undefined) set('status', c.status);
    for (const [m, v] of Object.entries(c.at ?? {})) if (v !== undefined && (batchMoments as readonly string[]).includes(m)) set(`${m}_at`, v);
    if (c.errors !== undefined) set('errors', c.errors);
    if (c.total !== undefined) set('total', c.total);
    if (c.outputFileId !== undefined) set('output_file_id', c.outputFileId);
    if (c.errorFileId !== undefined) set('error_file_id', c.errorFileId);
    if (sets.length === 0) return true;
    params.push(id);
    const idAt = params.length;
    const inList = from.map((s) => {
      params.push(s);
      return `$${params.length}`;
    });
    return (await this.#db.run(`UPDATE batches SET ${sets.join(', ')} WHERE id = $${idAt} AND status IN (${inList.join(', ')})`, params)) > 0;
  }

  /** Records a line's answer; false when the line already had one (it is kept, not replaced). */
  async record(batchId: string, r: BatchResult): Promise<boolean> {
    const n = await this.#db.run(
      'INSERT INTO batch_results (batch_id, line, custom_id, status_code, request_id, body) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (batch_id, line) DO NOTHING',
      [batchId, r.line, r.customId, r.statusCode, r.requestId, r.body],
    );
    return n > 0;
  }

  /** The lines that have an answer. */
  async answered(batchId: string): Promise<Set<number>> {
    const rows = await this.#db.all('SELECT line FROM batch_results WHERE batch_id = $1', [batchId]);
    return new Set(rows.map((r) => num(r, 'line') ?? -1));
  }

  /** Every answer, in line order. */
  async results(batchId: string): Promise<BatchResult[]> {
    const rows = await this.#db.all('SELECT line, custom_id, status_code, request_id, body FROM batch_results WHERE batch_id = $1 ORDER BY line', [batchId]);
    return rows.map((r) => ({
      line: num(r, 'line') ?? 0,
      customId: text(r, 'custom_id') ?? '',
      statusCode: num(r, 'status_code') ?? 0,
      requestId: text(r, 'request_id') ?? '',
      body: text(r, 'body') ?? '',
    }));
  }

  /** Answered lines by outcome: completed a 2xx, failed anything else. */
  async counts(batchId: string): Promise<{ completed: number; failed: number }> {
    const r = (
      await this.#db.all(
        'SELECT SUM(CASE WHEN status_code BETWEEN 200 AND 299 THEN 1 ELSE 0 END) AS ok, COUNT(*) AS n FROM batch_results WHERE batch_id = $1',
        [batchId],
      )
    )[0];
    const n = r === undefined ? 0 : (num(r, 'n') ?? 0);
    const ok = r === undefined ? 0 : (num(r, 'ok') ?? 0);
    return { completed: ok, failed: n - ok };
  }
}
