// Stored Responses API answers in the database, so a conversation continued with
// previous_response_id survives a restart and reaches any gateway on one PostgreSQL. The shape is the
// one src/apis/ declares (issue 35); this is its database home beside the in-memory one.
import { num, text, type Db } from './db.js';

/** One stored answer. */
export interface StoredResponse {
  readonly id: string;
  /** The caller that made it (its key's name): nobody else reads it. */
  readonly owner: string;
  readonly createdAt: number;
  readonly expiresAt: number;
  /** The response as JSON. */
  readonly body: string;
}

/** Stored responses over the store's database; expired ones are invisible and pruned with the ledger. */
export class DbResponseStore {
  readonly #db: Db;
  readonly #now: () => number;

  constructor(db: Db, o: { now?: () => number } = {}) {
    this.#db = db;
    this.#now = o.now ?? Date.now;
  }

  async put(r: StoredResponse): Promise<void> {
    await this.#db.run(
      'INSERT INTO responses (owner, id, created_at, expires_at, body) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (owner, id) DO UPDATE SET created_at = excluded.created_at, expires_at = excluded.expires_at, body = excluded.body',
      [r.owner, r.id, r.createdAt, r.expiresAt, r.body],
    );
  }

  /** The response, or undefined when it does not exist, has expired, or is another owner's. */
  async get(owner: string, id: string): Promise<StoredResponse | undefined> {
    const row = (await this.#db.all('SELECT created_at, expires_at, body FROM responses WHERE owner = $1 AND id = $2 AND expires_at > $3', [owner, id, this.#now()]))[0];
    if (row === undefined) return undefined;
    return { id, owner, createdAt: num(row, 'created_at') ?? 0, expiresAt: num(row, 'expires_at') ?? 0, body: text(row, 'body') ?? '' };
  }

  async delete(owner: string, id: string): Promise<boolean> {
    return (await this.#db.run('DELETE FROM responses WHERE owner = $1 AND id = $2 AND expires_at > $3', [owner, id, this.#now()])) > 0;
  }
}
