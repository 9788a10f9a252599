// The placer lease: with several gateways in front of one cluster exactly one places replicas, the
// one holding this row of the shared store. It is renewed every renew_ms and lapses ttl_ms after the
// last renewal, by the database's clock; another gateway takes it once it lapsed, under an epoch one
// higher, which agents fence assignments by (an older epoch's are ignored). The holder stops placing
// by its own clock before the database can hand the lease on: at the send time of its last renewal
// that was answered, plus the TTL, minus one renewal period (its check runs at most that late).
import { randomBytes } from 'node:crypto';
import type { Logger } from '../log/index.js';
import { dialectSql, num, text, type Db } from './db.js';

/** Who holds a lease, under which epoch, as the database answered. */
export interface LeaseClaim {
  /** Whether this claimant holds it now. */
  readonly held: boolean;
  readonly holder: string;
  readonly epoch: number;
}

/**
 * Takes or renews the lease `name` for `holder` in one statement: renewed when `holder` has it,
 * taken (epoch + 1) when nobody has it or it lapsed; otherwise answers who has it.
 */
export async function claimLease(db: Db, o: { readonly name: string; readonly holder: string; readonly ttlMs: number }): Promise<LeaseClaim> {
  const now = dialectSql[db.dialect].nowMs;
  // The epoch stays only while the holder renews a lease it still has: one that lapsed and is taken
  // again, by anyone, is a new epoch, since another may have placed in between.
  const rows = await db.all(
    `INSERT INTO placer_lease (name, holder, epoch, expires_at) VALUES ($1, $2, 1, ${now} + $3)
     ON CONFLICT (name) DO UPDATE SET
       epoch = CASE WHEN placer_lease.holder = excluded.holder AND placer_lease.expires_at >= ${now} THEN placer_lease.epoch ELSE placer_lease.epoch + 1 END,
       holder = excluded.holder,
       expires_at = excluded.expires_at
     WHERE placer_lease.holder = excluded.holder OR placer_lease.expires_at < ${now}
     RETURNING epoch`,
    [o.name, o.holder, o.ttlMs],
  );
  const taken = rows[0];
  if (taken !== undefined) return { held: true, holder: o.holder, epoch: num(taken, 'epoch') ?? 0 };
  const other = (await db.all('SELECT holder, epoch FROM placer_lease WHERE name = $1', [o.name]))[0];
  return { held: false, holder: other === undefined ? '' : (text(other, 'holder') ?? ''), epoch: other === undefined ? 0 : (num(other, 'epoch') ?? 0) };
}

/** Gives the lease up at once when `holder` has it, so the next gateway need not wait for it to lapse. */
export async function releaseLease(db: Db, o: { readonly name: string; readonly holder: string }): Promise<void> {
  await db.run('UPDATE placer_lease SET expires_at = 0 WHERE name = $1 AND holder = $2', [o.name, o.holder]);
}

/** How a PlacerLease is built. */
export interface PlacerLeaseOptions {
  readonly db: Db;
  /** This gateway's name; a random suffix makes each run a holder of its own. */
  readonly gatewayId: string;
  readonly ttlMs: number;
  /** This gateway now places, under `epoch`. */
  readonly onHeld: (epoch: number) => void;
  /** It no longer may: the lease lapsed, or another holds it. */
  readonly onLost: () => void;
  readonly log: Logger;
  readonly now?: (() => number) | undefined;
}

const leaseName = 'placer';

/** Keeps trying to hold the placer lease until close(); tells its owner each time it gains or loses it. */
export class PlacerLease {
  readonly #o: PlacerLeaseOptions;
  readonly #now: () => number;
  readonly #renewMs: number;
  /** This run's name in the lease row. */
  readonly holder: string;
  #timer: NodeJS.Timeout | undefined;
  #claiming: Promise<void> | undefined;
  #heldUntil = 0;
  #epoch = 0;
  #holderSeen = '';
  #closing: Promise<void> | undefined;

  constructor(o: PlacerLeaseOptions) {
    this.#o = o;
    this.#now = o.now ?? Date.now;
    this.#renewMs = Math.max(100, Math.floor(o.ttlMs / 4));
    this.holder = `${o.gatewayId}/${randomBytes(4).toString('hex')}`;
  }

  /** Whether this gateway holds the lease now, by its own clock. */
  get held(): boolean {
    return this.#epoch > 0 && this.#now() < this.#heldUntil;
  }

  /** Claims at once, then every quarter of the TTL. */
  start(): void {
    this.#tick();
    this.#timer = setInterval(() => this.#tick(), this.#renewMs);
  }

  #tick(): void {
    if (this.#epoch > 0 && this.#now() >= this.#heldUntil) this.#lose('lapsed');
    // One claim at a time: a database slower than the period must not pile statements up.
    if (this.#claiming !== undefined || this.#closing !== undefined) return;
    // Deliberately in the background, owned here: its failures are logged in #claim.
    this.#claiming = this.#claim().finally(() => (this.#claiming = undefined));
  }

  async #claim(): Promise<void> {
    const sent = this.#now();
    let c: LeaseClaim;
    try {
      c = await claimLease(this.#o.db, { name: leaseName, holder: this.holder, ttlMs: this.#o.ttlMs });
    } catch (e) {
      // The database is away: what we hold runs out by itself at #heldUntil (the next tick).
      this.#o.log.warn({ err: e }, 'store.lease.claim_failed');
      return;
    }
    if (this.#closing !== undefined) return;
    if (!c.held) {
      if (this.#epoch > 0) this.#lose(`held by ${c.holder}`);
      if (c.holder !== this.#holderSeen) this.#o.log.info({ holder: c.holder, epoch: c.epoch }, 'store.lease.held_elsewhere');
      this.#holderSeen = c.holder;
      return;
    }
    this.#heldUntil = sent + this.#o.ttlMs - this.#renewMs;
    // An answer that came too late to act on: the next claim will say where the lease stands.
    if (c.epoch === this.#epoch || this.#now() >= this.#heldUntil) return;
    this.#epoch = c.epoch;
    this.#holderSeen = this.holder;
    this.#o.log.info({ holder: this.holder, epoch: c.epoch }, 'store.lease.taken');
    this.#o.onHeld(c.epoch);
  }

  #lose(why: string): void {
    this.#o.log.warn({ holder: this.holder, epoch: this.#epoch, why }, 'store.lease.lost');
    this.#epoch = 0;
    this.#heldUntil = 0;
    this.#o.onLost();
  }

  /** Stops claiming and gives the lease up if held; idempotent. */
  close(): Promise<void> {
    return (this.#closing ??= this.#shutdown());
  }

  async #shutdown(): Promise<void> {
    clearInterval(this.#timer);
    await this.#claiming;
    if (this.#epoch === 0) return;
    this.#epoch = 0;
    try {
      await releaseLease(this.#o.db, { name: leaseName, holder: this.holder });
    } catch (e) {
      // It lapses by itself within the TTL; the next placer waits that long.
      this.#o.log.warn({ err: e }, 'store.lease.release_failed');
    }
  }
}
