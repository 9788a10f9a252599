// The usage ledger and the budgets kept from it. A finished request's row, the day's and month's
// spend it adds, the release of its hold and the refund to its per-minute bucket commit in one
// transaction, batched with every other request that finished meanwhile (group commit): the
// gateway awaits that commit before the answer's last byte, so an answer a client received whole is
// in the ledger even if the gateway is killed the next instant.
//
// The group commit has no timer. On PostgreSQL a row goes to the database as soon as a connection of
// the ledger's own is free; the rows that finish while a batch is on the wire form the next batch,
// which goes out on the second connection without waiting for the first to commit. So a row waits
// for one round trip when the ledger is idle, and batches grow only as fast as the load makes them.
import { randomBytes } from 'node:crypto';
import { LlmgwError } from '../errors/index.js';
import type { Logger } from '../log/index.js';
import { dialectSql, isConflict, isDown, num, text, type Db, type Param, type Sql } from './db.js';
import { isLimited } from './keys.js';
import { costOf, decide, periodsOf, type Amount, type Bucket, type KeyLimits, type TokenPrice } from './limits.js';
/** One finished request, as the gateway settles it. */
export interface UsageRow {
  readonly requestId: string;
  /** When it ended (ms since the epoch). */
  readonly at: number;
  readonly keyId: string;
  readonly keyName: string;
  readonly team: string;
  readonly model: string;
  readonly endpoint: string;
  readonly replica: string;
  readonly tier: string;
  readonly status: number;
  readonly promptTokens: number;
  readonly cachedTokens: number;
  readonly completionTokens: number;
  /** False when the engine never said what it used (the client left mid-answer): budgets keep the whole hold. */
  readonly usageReported: boolean;
  readonly ttftMs: number | undefined;
  readonly totalMs: number;
}

/** What an admitted request holds in the database until its row settles it. */
export interface StoreHold {
  readonly id: string;
  readonly keyId: string;
  readonly tokens: number;
  readonly costMicros: number;
  /** The key's per-minute token limit the refund is capped at (0: none). */
  readonly tokensPerMinute: number;
  /** The completion limit the gateway sets when the client set none. */
  readonly impose: number | undefined;
}

/** The admission question: which key, for which model, with what bound. */
export interface AdmitRequest {
  readonly key: KeyLimits & { readonly id: string };
  readonly model: string;
  readonly promptTokens: number;
  readonly completionTokens: number | undefined;
}

interface Pending {
  readonly row: UsageRow;
  readonly hold: StoreHold | undefined;
  waiter: { resolve: () => void; reject: (e: unknown) => void } | undefined;
}

/** Options of the ledger. */
export interface LedgerOptions {
  /** Where admission runs and holds are released. */
  readonly db: Db;
  /**
   * Where batches are written (default `db`): on PostgreSQL a pool of `ledgerConnections` of its
   * own, so a batch never queues for a connection behind admissions, each of which keeps one for
   * its whole transaction.
   */
  readonly writer?: Db | undefined;
  readonly gatewayId: string;
  readonly prices: Readonly<Record<string, TokenPrice>>;
  readonly holdTtlMs: number;
  readonly maxPendingRows: number;
  readonly log: Logger;
  readonly now?: (() => number) | undefined;
  /** How long a batch that failed because the database is down waits before it is tried again. */
  readonly retryMs?: number | undefined;
}

// The api_keys columns admission decides by, read under the row's lock.
const limitColumns = ['requests_per_minute', 'tokens_per_minute', 'tokens_per_day', 'tokens_per_month', 'cost_per_day_micros', 'cost_per_month_micros'] as const;

// Rows in one INSERT: 17 parameters each stays far below SQLite's 32 766 and PostgreSQL's 65 535.
const maxBatch = 500;

/**
 * Batches a PostgreSQL ledger has in flight at once, each on its own connection: the next batch is
 * sent while the one before commits. Two, because a third would only wait: batches of one key
 * update the same spend rows, which PostgreSQL lets one transaction at a time hold.
 */
export const ledgerConnections = 2;

// One order for the rows two batches both lock; any total order will do, the same in every batch.
const byText = (x: string, y: string): number => (x < y ? -1 : x > y ? 1 : 0);
const ledgerColumns =
  'request_id, at, key_id, key_name, team, model, endpoint, replica, tier, status, prompt_tokens, cached_tokens, completion_tokens, cost_micros, ttft_ms, total_ms, gateway';

/** The usage ledger, its group-commit writer, and admission against the budgets it keeps. */
export class Ledger {
  readonly #o: LedgerOptions;
  readonly #writer: Db;
  readonly #now: () => number;
  // Rows recorded and not yet in a batch.
  readonly #queued: Pending[] = [];
  // Batches being formed or committed; each settles, never rejects (failures are handled inside).
  readonly #writes = new Set<Promise<void>>();
  #forming = false;
  #inFlightRows = 0;
  readonly #maxInFlight: number;
  #retry: NodeJS.Timeout | undefined;
  #closed = false;
  // Closed while the database was down: nothing more is sent.
  #stopped = false;
  #dropped = 0;

  constructor(o: LedgerOptions) {
    this.#o = o;
    this.#writer = o.writer ?? o.db;
    this.#now = o.now ?? Date.now;
    // SQLite commits synchronously on its one connection: a second batch could only queue behind it.
    this.#maxInFlight = this.#writer.dialect === 'postgres' ? ledgerConnections : 1;
  }

  /** Rows waiting for the database (while it is down, those it has not taken yet). */
  get pendingRows(): number {
    return this.#queued.length + this.#inFlightRows;
  }

  /** Rows given up because more than store.max_pending_rows waited while the database was down. */
  get droppedRows(): number {
    return this.#dropped;
  }

  /**
   * Admits one request of a limited key or throws RateLimitError; holds its bound in the database
   * until its row settles it. The key's row is locked first (FOR UPDATE on PostgreSQL; SQLite has
   * one writer), so two gateways admitting for one key take turns and each sees the other's hold.
   */
  async admit(r: AdmitRequest): Promise<StoreHold> {
    const d = dialectSql[this.#o.db.dialect];
    const now = this.#now();
    const { day, month } = periodsOf(now);
    return this.#o.db.transaction(async (tx) => {
      const locked = await tx.all(`SELECT revoked_at, expires_at, ${limitColumns.join(', ')} FROM api_keys WHERE id = $1${d.forUpdate}`, [r.key.id]);
      const row = locked[0];
      if (row === undefined || num(row, 'revoked_at') !== undefined) {
        throw new LlmgwError('LLMGW_UNAUTHORIZED', `API key "${r.key.name}" was revoked; ask for a new key`);
      }
      // The limits as the row holds them, not as this gateway last read them: a budget raised
      // through another gateway's PATCH applies to this very request.
      const lim = (c: (typeof limitColumns)[number]): number => num(row, c) ?? 0;
      const k = {
        id: r.key.id,
        name: r.key.name,
        requestsPerMinute: lim('requests_per_minute'),
        tokensPerMinute: lim('tokens_per_minute'),
        tokensPerDay: lim('tokens_per_day'),
        tokensPerMonth: lim('tokens_per_month'),
        costPerDayMicros: lim('cost_per_day_micros'),
        costPerMonthMicros: lim('cost_per_month_micros'),
      };
      const buckets = new Map<string, Bucket>();
      if (k.requestsPerMinute > 0 || k.tokensPerMinute > 0) {
        for (const b of await tx.all('SELECT kind, level, at FROM buckets WHERE key_id = $1', [k.id])) {
          buckets.set(text(b, 'kind') ?? '', { level: num(b, 'level') ?? 0, at: num(b, 'at') ?? now });
        }
      }
      const spent = new Map<string, Amount>();
      let held: Amount = { tokens: 0, costMicros: 0 };
      if (k.tokensPerDay > 0 || k.tokensPerMonth > 0 || k.costPerDayMicros > 0 || k.costPerMonthMicros > 0) {
        // Spend and holds in one statement, so from one snapshot. Read by two, a ledger batch that
        // committed between them (its spend added after the first, its hold gone before the second)
        // was counted in neither, and the key was admitted that request's tokens past its budget.
        const rows = await tx.all(
          `SELECT s.period, s.tokens, s.cost_micros, h.t, h.c
           FROM (SELECT COALESCE(SUM(tokens), 0) AS t, COALESCE(SUM(cost_micros), 0) AS c FROM holds WHERE key_id = $1 AND expires_at > $4) h
           LEFT JOIN spend s ON s.key_id = $1 AND s.period IN ($2, $3)`,
          [k.id, day, month, now],
        );
        for (const s of rows) {
          const period = text(s, 'period');
          if (period !== undefined) spent.set(period, { tokens: num(s, 'tokens') ?? 0, costMicros: num(s, 'cost_micros') ?? 0 });
        }
        const h = rows[0];
        held = { tokens: h === undefined ? 0 : (num(h, 't') ?? 0), costMicros: h === undefined ? 0 : (num(h, 'c') ?? 0) };
      }
      const none: Amount = { tokens: 0, costMicros: 0 };
      const decision = decide({
        now,
        limits: k,
        price: this.#o.prices[r.model],
        requests: buckets.get('requests'),
        tokens: buckets.get('tokens'),
        day: spent.get(day) ?? none,
        month: spent.get(month) ?? none,
        held,
        promptTokens: r.promptTokens,
        completionTokens: r.completionTokens,
      });
      for (const [kind, b] of [['requests', decision.requests], ['tokens', decision.tokens]] as const) {
        if (b === undefined) continue;
        await tx.run('INSERT INTO buckets (key_id, kind, level, at) VALUES ($1, $2, $3, $4) ON CONFLICT (key_id, kind) DO UPDATE SET level = excluded.level, at = excluded.at', [
          k.id,
          kind,
          b.level,
          b.at,
        ]);
      }
      const id = randomBytes(12).toString('hex');
      await tx.run('INSERT INTO holds (id, key_id, gateway, tokens, cost_micros, expires_at) VALUES ($1, $2, $3, $4, $5, $6)', [
        id,
        k.id,
        this.#o.gatewayId,
        decision.hold.tokens,
        decision.hold.costMicros,
        now + this.#o.holdTtlMs,
      ]);
      return { id, keyId: k.id, tokens: decision.hold.tokens, costMicros: decision.hold.costMicros, tokensPerMinute: k.tokensPerMinute, impose: decision.impose };
    });
  }

  /** Whether a key's admission needs the database at all. */
  static needsAdmission(k: KeyLimits): boolean {
    return isLimited(k);
  }

  /**
   * Writes the row (settling its hold) and resolves once it is committed; rejects with
   * LLMGW_STORE_DOWN when the database cannot take it, in which case the row stays queued and is
   * written when the database is back.
   */
  record(row: UsageRow, hold?: StoreHold): Promise<void> {
    if (this.#closed) return Promise.reject(new LlmgwError('LLMGW_STORE_DOWN', 'store: the ledger is closed; the gateway is stopping'));
    return new Promise((resolve, reject) => {
      this.#queued.push({ row, hold, waiter: { resolve, reject } });
      if (this.#queued.length > this.#o.maxPendingRows && this.#o.maxPendingRows > 0) this.#drop();
      this.#kick();
    });
  }

  #drop(): void {
    const old = this.#queued.shift();
    if (old === undefined) return;
    this.#dropped++;
    // Each dropped row is logged whole: the log is then the only record of that request.
    this.#o.log.error({ row: old.row }, 'store.ledger_row_dropped');
    old.waiter?.reject(new LlmgwError('LLMGW_STORE_DOWN', 'store: the ledger row was dropped: too many rows waited for the database'));
  }

  // Starts a batch unless one is still forming (the new row joins it), every connection is busy (the
  // row goes in the batch that forms when one is free), or the database is down (the retry starts it).
  #kick(): void {
    if (this.#stopped || this.#forming || this.#retry !== undefined || this.#writes.size >= this.#maxInFlight || this.#queued.length === 0) return;
    this.#forming = true;
    const write: Promise<void> = this.#write().finally(() => {
      this.#writes.delete(write);
      this.#kick();
    });
    this.#writes.add(write);
  }

  async #write(): Promise<void> {
    // A batch waits only for the code that recorded its first row to finish (rows recorded in one
    // callback go together); later rows form the next. SQLite's commit once waited a turn of the
    // event loop to gather more rows, but under load that turn is every other socket's callbacks,
    // 2-3 ms of a request's path (issue 51), where the commit itself, a write to the WAL, is tens of µs.
    await Promise.resolve();
    this.#forming = false;
    const batch = this.#queued.splice(0, maxBatch);
    if (batch.length === 0) return;
    this.#inFlightRows += batch.length;
    try {
      await this.#commit(batch);
      for (const p of batch) p.waiter?.resolve();
    } catch (e) {
      this.#failed(batch, e);
    } finally {
      this.#inFlightRows -= batch.length;
    }
  }

  #failed(batch: Pending[], e: unknown): void {
    if (isConflict(e)) {
      // Rolled back whole by PostgreSQL (a deadlock with the other batch in flight): nothing was
      // written, so the rows go again at once and their requests keep waiting.
      this.#queued.unshift(...batch);
      return;
    }
    for (const p of batch) {
      p.waiter?.reject(e);
      p.waiter = undefined;
    }
    if (isDown(e)) {
      // Kept, and tried again: the requests were served and their usage is owed to the ledger.
      this.#queued.unshift(...batch);
      this.#o.log.warn({ err: e, pending: this.pendingRows }, 'store.ledger_down');
      // Closing, the rows are not tried again: close() logs them whole.
      if (this.#closed) this.#stopped = true;
      else if (this.#retry === undefined) {
        this.#retry = setTimeout(() => {
          this.#retry = undefined;
          this.#kick();
        }, this.#o.retryMs ?? 1_000);
      }
      return;
    }
    // Not the database being down: a bug of ours or a row it cannot take. Dropped, so it cannot block every row behind it.
    this.#dropped += batch.length;
    this.#o.log.error({ err: e, rows: batch.map((p) => p.row) }, 'store.ledger_batch_failed');
  }

  // One transaction: on PostgreSQL a single statement whose parts are data-modifying WITH clauses
  // (atomic as any statement, and one round trip where BEGIN, four statements and COMMIT took six);
  // on SQLite, in-process, the statements in a transaction.
  async #commit(batch: readonly Pending[]): Promise<void> {
    const db = this.#writer;
    const statements = this.#statements(batch);
    if (db.dialect === 'sqlite') {
      await db.transaction(async (tx: Sql) => {
        for (const st of statements) await tx.run(st.sql, st.params);
      });
      return;
    }
    const params: Param[] = [];
    const parts = statements.map((st, i) => {
      const offset = params.length;
      params.push(...st.params);
      return `w${i} AS (${st.sql.replace(/\$(\d+)/g, (_, n: string) => `$${Number(n) + offset}`)})`;
    });
    await db.run(`WITH ${parts.join(', ')} SELECT 1`, params);
  }

  #statements(batch: readonly Pending[]): { sql: string; params: Param[] }[] {
    const d = dialectSql[this.#o.db.dialect];
    const out: { sql: string; params: Param[] }[] = [];
    const values: string[] = [];
    const params: Param[] = [];
    const spend = new Map<string, { key: string; period: string; tokens: number; cost: number; requests: number }>();
    const refunds = new Map<string, { give: number; cap: number }>();
    for (const { row: r, hold } of batch) {
      const reported = r.promptTokens + r.completionTokens;
      const tokens = r.usageReported ? reported : Math.max(reported, hold?.tokens ?? 0);
      const cost = costOf(this.#o.prices[r.model], r);
      const base = params.length;
      values.push(`(${Array.from({ length: 17 }, (_, i) => `$${base + i + 1}`).join(', ')})`);
      params.push(r.requestId, r.at, r.keyId, r.keyName, r.team, r.model, r.endpoint, r.replica, r.tier, r.status, r.promptTokens, r.cachedTokens, r.completionTokens, cost, r.ttftMs ?? null, r.totalMs, this.#o.gatewayId);
      const { day, month } = periodsOf(r.at);
      for (const period of [day, month]) {
        const s = spend.get(`${r.keyId}\u0000${period}`) ?? { key: r.keyId, period, tokens: 0, cost: 0, requests: 0 };
        s.tokens += tokens;
        s.cost += cost;
        s.requests += 1;
        spend.set(`${r.keyId}\u0000${period}`, s);
      }
      if (hold !== undefined && hold.tokensPerMinute > 0) {
        const f = refunds.get(hold.keyId) ?? { give: 0, cap: hold.tokensPerMinute };
        f.give += Math.max(0, hold.tokens - tokens);
        refunds.set(hold.keyId, f);
      }
    }
    out.push({ sql: `INSERT INTO usage_ledger (${ledgerColumns}) VALUES ${values.join(', ')}`, params });
    // Two batches in flight lock the rows they share in one order (key, then period), so neither
    // waits for the other while holding what the other waits for.
    const s = [...spend.values()].sort((x, y) => byText(x.key, y.key) || byText(x.period, y.period));
    out.push({
      sql: `INSERT INTO spend (key_id, period, tokens, cost_micros, requests) VALUES ${s.map((_, i) => `($${i * 5 + 1}, $${i * 5 + 2}, $${i * 5 + 3}, $${i * 5 + 4}, $${i * 5 + 5})`).join(', ')}
       ON CONFLICT (key_id, period) DO UPDATE SET tokens = spend.tokens + excluded.tokens, cost_micros = spend.cost_micros + excluded.cost_micros, requests = spend.requests + excluded.requests`,
      params: s.flatMap((x) => [x.key, x.period, x.tokens, x.cost, x.requests]),
    });
    const holds = batch.flatMap((p) => (p.hold === undefined ? [] : [p.hold.id]));
    if (holds.length > 0) out.push({ sql: `DELETE FROM holds WHERE id IN (${holds.map((_, i) => `$${i + 1}`).join(', ')})`, params: holds });
    for (const [key, f] of [...refunds].sort(([x], [y]) => byText(x, y))) {
      if (f.give > 0) out.push({ sql: `UPDATE buckets SET level = ${d.least}($3, level + $2) WHERE key_id = $1 AND kind = 'tokens'`, params: [key, f.give, f.cap] });
    }
    return out;
  }

  /** Gives back a hold whose request never reached an engine (refused, no replica): nothing was spent. */
  async release(hold: StoreHold): Promise<void> {
    const d = dialectSql[this.#o.db.dialect];
    await this.#o.db.transaction(async (tx) => {
      await tx.run('DELETE FROM holds WHERE id = $1', [hold.id]);
      if (hold.tokensPerMinute > 0) await tx.run(`UPDATE buckets SET level = ${d.least}($3, level + $2) WHERE key_id = $1 AND kind = 'tokens'`, [hold.keyId, hold.tokens, hold.tokensPerMinute]);
    });
  }

  /** Resolves once every row recorded so far is committed, or the database refused them. */
  async flush(): Promise<void> {
    while (this.#writes.size > 0) await Promise.all(this.#writes);
  }

  /** Stops retrying; rows still pending are logged whole so nothing is lost without a trace. */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#retry !== undefined) clearTimeout(this.#retry);
    this.#retry = undefined;
    await this.flush();
    for (const p of this.#queued.splice(0)) {
      this.#o.log.error({ row: p.row }, 'store.ledger_row_unwritten');
      p.waiter?.reject(new LlmgwError('LLMGW_STORE_DOWN', 'store: the gateway stopped before the database took this row'));
    }
  }

  /** Deletes what retention no longer keeps: ledger rows and spend periods older than `days`, lapsed holds. Returns ledger rows deleted. */
  async prune(days: number): Promise<number> {
    const now = this.#now();
    await this.#o.db.run('DELETE FROM holds WHERE expires_at <= $1', [now]);
    await this.#o.db.run('DELETE FROM responses WHERE expires_at <= $1', [now]);
    if (days <= 0) return 0;
    const cutoff = now - days * 86_400_000;
    const { day, month } = periodsOf(cutoff);
    // The current month's spend is a budget's memory: a month period goes only once it is past the cutoff whole.
    await this.#o.db.run("DELETE FROM spend WHERE (period LIKE 'd%' AND period < $1) OR (period LIKE 'm%' AND period < $2)", [day, month]);
    return this.#o.db.run('DELETE FROM usage_ledger WHERE at < $1', [cutoff]);
  }
}
