// The board several gateways share their admission holds on (admission/peers.ts): one row per
// gateway in admission_peers, replaced every round, lasting until expires_at by the database's
// clock, so the gateways' own clocks never decide whether a peer is alive.
import { dialectSql, num, text, type Db } from './db.js';

/** One gateway's report as read back, with its age on the database's clock. */
export interface BoardReport {
  readonly gateway: string;
  readonly ageMs: number;
  readonly body: string;
}

/** The admission board of `gateway` over `db`: it writes its own row and reads the others' live ones. */
export function admissionBoard(db: Db, gateway: string) {
  const now = dialectSql[db.dialect].nowMs;
  return {
    publish: async (body: string, ttlMs: number): Promise<void> => {
      await db.run(
        `INSERT INTO admission_peers (gateway, body, updated_at, expires_at) VALUES ($1, $2, ${now}, ${now} + $3)
         ON CONFLICT (gateway) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at, expires_at = excluded.expires_at`,
        [gateway, body, ttlMs],
      );
    },
    read: async (): Promise<readonly BoardReport[]> => {
      const rows = await db.all(`SELECT gateway, body, ${now} - updated_at AS age_ms FROM admission_peers WHERE gateway <> $1 AND expires_at >= ${now}`, [gateway]);
      return rows.map((r) => ({ gateway: text(r, 'gateway') ?? '', ageMs: num(r, 'age_ms') ?? Infinity, body: text(r, 'body') ?? '' }));
    },
    withdraw: async (): Promise<void> => {
      await db.run('DELETE FROM admission_peers WHERE gateway = $1', [gateway]);
    },
  };
}
