// Admission's view of the other gateways in front of the same cluster. Fair shares are decided per
// gateway, so a flood through gateway 1 met no polite tenant there and took every replica from a
// tenant asking through gateway 2. Each gateway therefore publishes, every interval, what each
// tenant active lately holds of each model and class (queued and let in, not yet over) to a board
// in the shared store, and reads the others'; the share rule adds theirs to its own. A report lasts
// `ttlMs` on the database's clock: a gateway that died stops counting then, and one cut off from the
// database stops counting the others' once its last read is that old.

/** What one tenant holds of one model at one class index, on the gateway that reports it. */
export interface HoldRow {
  readonly model: string;
  readonly tenant: string;
  readonly rank: number;
  readonly holds: number;
}

/** One gateway's last report as read from the board, its age by the database's clock. */
export interface PeerReport {
  readonly gateway: string;
  readonly ageMs: number;
  readonly rows: readonly HoldRow[];
}

/** What the other gateways' tenants hold of one model, by class index; `active` says a tenant asked there lately. */
export interface PeerTenant {
  readonly holds: readonly number[];
  readonly active: readonly boolean[];
}

/** model -> tenant -> what the other gateways report of it. */
export type PeerHolds = ReadonlyMap<string, ReadonlyMap<string, PeerTenant>>;

/** Sums the reports younger than `ttlMs`, per model and tenant; `classes` is the number of class indices. */
export function mergePeers(reports: readonly PeerReport[], ttlMs: number, classes: number): PeerHolds {
  const out = new Map<string, Map<string, { holds: number[]; active: boolean[] }>>();
  for (const r of reports) {
    if (r.ageMs > ttlMs) continue;
    for (const row of r.rows) {
      if (row.rank < 0 || row.rank >= classes) continue;
      const tenants = out.get(row.model) ?? new Map<string, { holds: number[]; active: boolean[] }>();
      out.set(row.model, tenants);
      const t = tenants.get(row.tenant) ?? { holds: Array<number>(classes).fill(0), active: Array<boolean>(classes).fill(false) };
      tenants.set(row.tenant, t);
      t.holds[row.rank] = (t.holds[row.rank] ?? 0) + row.holds;
      t.active[row.rank] = true;
    }
  }
  return out;
}

/** A report's body as the board stores it: `[model, tenant, rank, holds]` tuples, in JSON. */
export const encodeHolds = (rows: readonly HoldRow[]): string => JSON.stringify(rows.map((r) => [r.model, r.tenant, r.rank, r.holds]));

/**
 * Reads a report's body; a tuple of the wrong shape is dropped (another llmgw version may write
 * more), a body that is not JSON counts as no rows. What it says is a hint to fairness, never a
 * reason to refuse a request.
 */
export function decodeHolds(body: string): HoldRow[] {
  let raw: unknown;
  try {
    raw = JSON.parse(body);
  } catch (e) {
    if (e instanceof SyntaxError) return [];
    throw e;
  }
  if (!Array.isArray(raw)) return [];
  const rows: HoldRow[] = [];
  for (const x of raw as unknown[]) {
    if (!Array.isArray(x)) continue;
    const [model, tenant, rank, holds] = x as unknown[];
    if (typeof model !== 'string' || typeof tenant !== 'string' || !Number.isInteger(rank) || typeof holds !== 'number' || !Number.isFinite(holds) || holds < 0) continue;
    rows.push({ model, tenant, rank: rank as number, holds });
  }
  return rows;
}

/** The shared board the reports live on (the store's admission_peers table). */
export interface PeerBoard {
  /** Replaces this gateway's report, to last `ttlMs` from now by the database's clock. */
  publish(body: string, ttlMs: number): Promise<void>;
  /** The other gateways' reports that have not expired, with their age. */
  read(): Promise<readonly { gateway: string; ageMs: number; body: string }[]>;
  /** Takes this gateway's report down (it is stopping). */
  withdraw(): Promise<void>;
}

/** How AdmissionPeers is built. */
export interface AdmissionPeersOptions {
  readonly board: PeerBoard;
  /** What this gateway's tenants hold now (Admission.holdings). */
  readonly holdings: () => readonly HoldRow[];
  readonly intervalMs: number;
  readonly classes: number;
  /** A publish or read failed: the view goes on from the last read until it is `ttlMs` old. */
  readonly onError: (e: unknown) => void;
  readonly now?: (() => number) | undefined;
}

/** Publishes this gateway's holds and reads the others' every interval, until close(). */
export class AdmissionPeers {
  readonly #o: AdmissionPeersOptions;
  readonly #now: () => number;
  /** Ten intervals: a gateway stalled for a GC pause or a slow statement still counts. */
  readonly ttlMs: number;
  #view: PeerHolds = new Map();
  #readAtMs = -Infinity;
  #timer: NodeJS.Timeout | undefined;
  #round: Promise<void> | undefined;
  #closing: Promise<void> | undefined;

  constructor(o: AdmissionPeersOptions) {
    this.#o = o;
    this.#now = o.now ?? (() => performance.now());
    this.ttlMs = Math.max(1_000, o.intervalMs * 10);
  }

  /** A round at once, then one every interval. */
  start(): void {
    this.#tick();
    this.#timer = setInterval(() => this.#tick(), this.#o.intervalMs);
    // Serving holds the process; this timer must not hold it alone.
    this.#timer.unref();
  }

  /** What the other gateways' tenants hold of `model`; nothing once the last read is `ttlMs` old. */
  holdsOf(model: string): ReadonlyMap<string, PeerTenant> | undefined {
    if (this.#now() - this.#readAtMs > this.ttlMs) return undefined;
    return this.#view.get(model);
  }

  #tick(): void {
    // One round at a time: a database slower than the interval must not pile statements up.
    if (this.#round !== undefined || this.#closing !== undefined) return;
    // Deliberately in the background, owned here: its failures go to onError.
    this.#round = this.#exchange()
      .catch((e: unknown) => this.#o.onError(e))
      .finally(() => (this.#round = undefined));
  }

  async #exchange(): Promise<void> {
    await this.#o.board.publish(encodeHolds(this.#o.holdings()), this.ttlMs);
    const sent = this.#now();
    const reports = (await this.#o.board.read()).map((r) => ({ gateway: r.gateway, ageMs: r.ageMs, rows: decodeHolds(r.body) }));
    if (this.#closing !== undefined) return;
    this.#view = mergePeers(reports, this.ttlMs, this.#o.classes);
    this.#readAtMs = sent;
  }

  /** Stops the rounds and takes this gateway's report down; idempotent. */
  close(): Promise<void> {
    return (this.#closing ??= this.#shutdown());
  }

  async #shutdown(): Promise<void> {
    clearInterval(this.#timer);
    await this.#round;
    try {
      await this.#o.board.withdraw();
    } catch (e) {
      // It expires by itself within ttlMs: the others stop counting it then.
      this.#o.onError(e);
    }
  }
}
