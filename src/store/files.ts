// Batch API files (OpenAI's /v1/files, purpose batch and batch_output) in the store's database. The
// body is kept in the row: a JSONL file is text, and any gateway sharing the database reads it
// (docs/batch.md has the measurement behind keeping it there rather than on disk).
import { num, text, type Db, type Row } from './db.js';

/** One stored file without its body. */
export interface StoredFile {
  readonly id: string;
  /** The key's name that uploaded it (or whose batch wrote it): nobody else reads it. */
  readonly owner: string;
  readonly purpose: string;
  readonly filename: string;
  readonly bytes: number;
  readonly createdAt: number;
}

const fileOf = (r: Row): StoredFile => ({
  id: text(r, 'id') ?? '',
  owner: text(r, 'owner') ?? '',
  purpose: text(r, 'purpose') ?? '',
  filename: text(r, 'filename') ?? '',
  bytes: num(r, 'bytes') ?? 0,
  createdAt: num(r, 'created_at') ?? 0,
});

/** Files over the store's database, each readable by its owner only. */
export class FileStore {
  readonly #db: Db;

  constructor(db: Db) {
    this.#db = db;
  }

  async put(f: StoredFile, body: string): Promise<void> {
    await this.#db.run('INSERT INTO batch_files (id, owner, purpose, filename, bytes, created_at, body) VALUES ($1, $2, $3, $4, $5, $6, $7)', [
      f.id,
      f.owner,
      f.purpose,
      f.filename,
      f.bytes,
      f.createdAt,
      body,
    ]);
  }

  async get(owner: string, id: string): Promise<StoredFile | undefined> {
    const r = (await this.#db.all('SELECT id, owner, purpose, filename, bytes, created_at FROM batch_files WHERE owner = $1 AND id = $2', [owner, id]))[0];
    return r === undefined ? undefined : fileOf(r);
  }

  /** The file's text, or undefined when it is not the owner's. */
  async body(owner: string, id: string): Promise<string | undefined> {
    const r = (await this.#db.all('SELECT body FROM batch_files WHERE owner = $1 AND id = $2', [owner, id]))[0];
    return r === undefined ? undefined : (text(r, 'body') ?? '');
  }

  /** The owner's files, newest first (id breaks a tie), at most `limit`, after the one named `after`. */
  async list(owner: string, o: { limit: number; after?: string | undefined; purpose?: string | undefined }): Promise<StoredFile[]> {
    const params: (string | number)[] = [owner];
    let where = 'owner = $1';
    if (o.purpose !== undefined) {
      params.push(o.purpose);
      where += ` AND purpose = $${params.length}`;
    }
    if (o.after !== undefined) {
      params.push(o.after);
      const n = params.length;
      where += ` AND (created_at, id) < (SELECT created_at, id FROM batch_files WHERE id = $${n})`;
    }
    params.push(o.limit);
    const rows = await this.#db.all(`SELECT id, owner, purpose, filename, bytes, created_at FROM batch_files WHERE ${where} ORDER BY created_at DESC, id DESC LIMIT $${params.length}`, params);
    return rows.map(fileOf);
  }

  async delete(owner: string, id: string): Promise<boolean> {
    return (await this.#db.run('DELETE FROM batch_files WHERE owner = $1 AND id = $2', [owner, id])) > 0;
  }
}
