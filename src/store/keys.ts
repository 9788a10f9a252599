// API keys in the database: issued, updated, revoked and rotated at run time, stored as sha256 only.
// The gateway authenticates from an in-memory copy (no database call on a request's path), kept
// current by this process's own changes at once and by other gateways' within store.refresh_ms; a
// limited key's admission reads its limits from its row, so those apply on every gateway at once.
import { createHash, randomBytes } from 'node:crypto';
import { LlmgwError, RequestError } from '../errors/index.js';
import { isUniqueViolation, num, text, type Db, type Param, type Row } from './db.js';
import type { KeyLimits } from './limits.js';

/** How much a key's requests may ask of the admission queue: the highest class it may use. */
export type KeyPriority = 'interactive' | 'standard' | 'batch';

/** Where a key came from: issued through the admin API, or imported from gateway.api_keys (read-only). */
export type KeySource = 'api' | 'config';

/** One key as stored, without its secret or hash. */
export interface KeyRecord extends KeyLimits {
  readonly id: string;
  readonly team: string;
  readonly owner: string;
  readonly source: KeySource;
  readonly admin: boolean;
  /** Models the key may use; empty: every model. */
  readonly models: readonly string[];
  readonly priority: KeyPriority;
  readonly weight: number;
  readonly expiresAt: number | undefined;
  readonly createdAt: number;
  readonly updatedAt: number;
  readonly revokedAt: number | undefined;
}

/** What issuing a key takes; everything but the name has a default. */
export interface KeySpec {
  readonly name: string;
  readonly team?: string | undefined;
  readonly owner?: string | undefined;
  readonly admin?: boolean | undefined;
  readonly models?: readonly string[] | undefined;
  readonly requestsPerMinute?: number | undefined;
  readonly tokensPerMinute?: number | undefined;
  readonly tokensPerDay?: number | undefined;
  readonly tokensPerMonth?: number | undefined;
  readonly costPerDayMicros?: number | undefined;
  readonly costPerMonthMicros?: number | undefined;
  readonly priority?: KeyPriority | undefined;
  readonly weight?: number | undefined;
  readonly expiresAt?: number | undefined;
}

/** What updating a key takes: the fields given change, the others stay; expiresAt null: never expires. */
export type KeyPatch = Omit<KeySpec, 'name' | 'admin' | 'expiresAt'> & { readonly expiresAt?: number | null | undefined };

// A patch's fields as the columns they set.
const patchColumns: readonly (readonly [keyof KeyPatch, string])[] = [
  ['team', 'team'],
  ['owner', 'owner'],
  ['models', 'models'],
  ['requestsPerMinute', 'requests_per_minute'],
  ['tokensPerMinute', 'tokens_per_minute'],
  ['tokensPerDay', 'tokens_per_day'],
  ['tokensPerMonth', 'tokens_per_month'],
  ['costPerDayMicros', 'cost_per_day_micros'],
  ['costPerMonthMicros', 'cost_per_month_micros'],
  ['priority', 'priority'],
  ['weight', 'weight'],
  ['expiresAt', 'expires_at'],
];

/** A key from gateway.api_keys, as the store imports it. */
export interface ConfigKey {
  readonly name: string;
  readonly sha256: string;
  readonly requestsPerMinute: number;
  readonly tokensPerMinute: number;
  readonly admin: boolean;
}

/** sha256 hex of a secret: what is stored and looked up. */
export const sha256Of = (secret: string): string => createHash('sha256').update(secret, 'utf8').digest('hex');

/** True when the key has any limit or budget, so its admission goes through the database. */
export const isLimited = (k: KeyLimits): boolean =>
  k.requestsPerMinute > 0 || k.tokensPerMinute > 0 || k.tokensPerDay > 0 || k.tokensPerMonth > 0 || k.costPerDayMicros > 0 || k.costPerMonthMicros > 0;

const columns =
  'id, name, sha256, team, owner, source, admin, models, requests_per_minute, tokens_per_minute, tokens_per_day, tokens_per_month, ' +
  'cost_per_day_micros, cost_per_month_micros, priority, weight, expires_at, created_at, updated_at, revoked_at';

const priorities: readonly KeyPriority[] = ['interactive', 'standard', 'batch'];

function recordOf(r: Row): KeyRecord & { sha256: string } {
  const n = (c: string): number => num(r, c) ?? 0;
  const t = (c: string): string => text(r, c) ?? '';
  const models: unknown = JSON.parse(t('models') || '[]');
  const priority = priorities.find((p) => p === t('priority')) ?? 'standard';
  return {
    id: t('id'),
    name: t('name'),
    sha256: t('sha256'),
    team: t('team'),
    owner: t('owner'),
    source: t('source') === 'config' ? 'config' : 'api',
    admin: n('admin') === 1,
    models: Array.isArray(models) ? models.filter((m): m is string => typeof m === 'string') : [],
    requestsPerMinute: n('requests_per_minute'),
    tokensPerMinute: n('tokens_per_minute'),
    tokensPerDay: n('tokens_per_day'),
    tokensPerMonth: n('tokens_per_month'),
    costPerDayMicros: n('cost_per_day_micros'),
    costPerMonthMicros: n('cost_per_month_micros'),
    priority,
    weight: n('weight'),
    expiresAt: num(r, 'expires_at'),
    createdAt: n('created_at'),
    updatedAt: n('updated_at'),
    revokedAt: num(r, 'revoked_at'),
  };
}

// A gateway's clock and the database's rows may disagree by this much: a refresh reads back this far.
const skewMs = 5_000;

/** The keys table and the in-memory copy the gateway authenticates from. */
export class KeyStore {
  readonly #db: Db;
  readonly #now: () => number;
  readonly #bySha = new Map<string, KeyRecord & { sha256: string }>();
  readonly #byId = new Map<string, KeyRecord & { sha256: string }>();
  #seenUpTo = 0;

  constructor(db: Db, o: { now?: () => number } = {}) {
    this.#db = db;
    this.#now = o.now ?? Date.now;
  }

  #remember(k: KeyRecord & { sha256: string }): void {
    const old = this.#byId.get(k.id);
    if (old !== undefined) this.#bySha.delete(old.sha256);
    this.#byId.set(k.id, k);
    this.#bySha.set(k.sha256, k);
    this.#seenUpTo = Math.max(this.#seenUpTo, k.updatedAt);
  }

  /** Reads the keys changed since the last refresh (all of them the first time). */
  async refresh(): Promise<void> {
    const since = this.#seenUpTo === 0 ? -1 : this.#seenUpTo - skewMs;
    for (const r of await this.#db.all(`SELECT ${columns} FROM api_keys WHERE updated_at > $1`, [since])) this.#remember(recordOf(r));
  }

  /** The key with this sha256 as last read, revoked and expired ones included (the caller says why it refuses). */
  bySha256(sha256: string): KeyRecord | undefined {
    return this.#bySha.get(sha256);
  }

  /** Whether any key was ever stored: a gateway with none serves anonymous callers, as one without gateway.api_keys does. */
  hasKeys(): boolean {
    return this.#byId.size > 0;
  }

  /** Every key as last read, newest first; revoked ones only when asked. */
  list(o: { revoked?: boolean } = {}): KeyRecord[] {
    return [...this.#byId.values()]
      .filter((k) => o.revoked === true || k.revokedAt === undefined)
      .sort((a, b) => b.createdAt - a.createdAt || a.name.localeCompare(b.name))
      .map(({ sha256: _hidden, ...k }) => k);
  }

  /** One key by id or name. */
  get(idOrName: string): KeyRecord | undefined {
    const k = this.#byId.get(idOrName) ?? [...this.#byId.values()].find((v) => v.name === idOrName);
    if (k === undefined) return undefined;
    const { sha256: _hidden, ...rest } = k;
    return rest;
  }

  /** Issues a key; the secret is in the answer and nowhere else. */
  async create(spec: KeySpec): Promise<{ key: string; record: KeyRecord }> {
    const now = this.#now();
    const secret = `sk-llmgw-${randomBytes(32).toString('base64url')}`;
    const id = `key_${randomBytes(8).toString('hex')}`;
    const r = {
      id,
      name: spec.name,
      team: spec.team ?? spec.name,
      owner: spec.owner ?? '',
      admin: spec.admin === true ? 1 : 0,
      models: JSON.stringify(spec.models ?? []),
    };
    try {
      const rows = await this.#db.all(
        `INSERT INTO api_keys (${columns}) VALUES ($1, $2, $3, $4, $5, 'api', $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $17, NULL) RETURNING ${columns}`,
        [
          r.id,
          r.name,
          sha256Of(secret),
          r.team,
          r.owner,
          r.admin,
          r.models,
          spec.requestsPerMinute ?? 0,
          spec.tokensPerMinute ?? 0,
          spec.tokensPerDay ?? 0,
          spec.tokensPerMonth ?? 0,
          spec.costPerDayMicros ?? 0,
          spec.costPerMonthMicros ?? 0,
          spec.priority ?? 'standard',
          spec.weight ?? 1,
          spec.expiresAt ?? null,
          now,
        ],
      );
      const stored = rows[0];
      if (stored === undefined) throw new LlmgwError('LLMGW_STORE', `store: issuing key "${spec.name}" returned no row`);
      const rec = recordOf(stored);
      this.#remember(rec);
      const { sha256: _hidden, ...record } = rec;
      return { key: secret, record };
    } catch (e) {
      if (isUniqueViolation(e)) throw new RequestError('LLMGW_BAD_REQUEST', `a key named ${JSON.stringify(spec.name)} exists already; choose another name, or rotate that key`, 'name');
      throw e;
    }
  }

  #writable(idOrName: string): KeyRecord {
    const k = this.get(idOrName);
    if (k === undefined) throw new LlmgwError('LLMGW_NOT_FOUND', `no key ${JSON.stringify(idOrName)}; list them with GET /admin/v1/keys or llmgw ctl keys list`);
    if (k.source === 'config') {
      throw new RequestError('LLMGW_BAD_REQUEST', `key "${k.name}" comes from gateway.api_keys in llmgw.yaml and is read-only here; change it there and restart`, 'id');
    }
    return k;
  }

  /** Revokes a key: refused from its next request on (on other gateways, within store.refresh_ms, or at once for a key with limits). */
  async revoke(idOrName: string): Promise<KeyRecord> {
    const k = this.#writable(idOrName);
    if (k.revokedAt !== undefined) return k;
    const now = this.#now();
    const rows = await this.#db.all(`UPDATE api_keys SET revoked_at = $2, updated_at = $2 WHERE id = $1 RETURNING ${columns}`, [k.id, now]);
    return this.#stored(rows[0], k.id);
  }

  /** Gives a key a new secret; the old one is refused from now on. */
  async rotate(idOrName: string): Promise<{ key: string; record: KeyRecord }> {
    const k = this.#writable(idOrName);
    if (k.revokedAt !== undefined) throw new RequestError('LLMGW_BAD_REQUEST', `key "${k.name}" is revoked; issue a new key instead`, 'id');
    const secret = `sk-llmgw-${randomBytes(32).toString('base64url')}`;
    const rows = await this.#db.all(`UPDATE api_keys SET sha256 = $2, updated_at = $3 WHERE id = $1 RETURNING ${columns}`, [k.id, sha256Of(secret), this.#now()]);
    return { key: secret, record: this.#stored(rows[0], k.id) };
  }

  /**
   * Changes a key's limits, budgets, models, team or expiry, nothing else; its secret and usage stay.
   * Only the named columns are written, so two admins changing different fields both keep theirs.
   */
  async update(idOrName: string, patch: KeyPatch): Promise<KeyRecord> {
    // A key issued through another gateway since the last refresh is still this key's to change.
    if (this.get(idOrName) === undefined) await this.refresh();
    const k = this.#writable(idOrName);
    if (k.revokedAt !== undefined) throw new RequestError('LLMGW_BAD_REQUEST', `key "${k.name}" is revoked; issue a new key instead`, 'id');
    const sets: string[] = [];
    const params: Param[] = [k.id, this.#now()];
    for (const [field, column] of patchColumns) {
      const v = patch[field];
      if (v === undefined) continue;
      params.push(Array.isArray(v) ? JSON.stringify(v) : (v as Param));
      sets.push(`${column} = $${params.length}`);
    }
    // updated_at moves even for an empty patch: other gateways' refresh reads the row again.
    const rows = await this.#db.all(`UPDATE api_keys SET ${[...sets, 'updated_at = $2'].join(', ')} WHERE id = $1 AND revoked_at IS NULL RETURNING ${columns}`, params);
    if (rows[0] === undefined) {
      await this.refresh();
      throw new RequestError('LLMGW_BAD_REQUEST', `key "${k.name}" was revoked meanwhile; issue a new key instead`, 'id');
    }
    return this.#stored(rows[0], k.id);
  }

  #stored(row: Row | undefined, id: string): KeyRecord {
    if (row === undefined) throw new LlmgwError('LLMGW_NOT_FOUND', `key ${id} is gone from the database`);
    const rec = recordOf(row);
    this.#remember(rec);
    const { sha256: _hidden, ...record } = rec;
    return record;
  }

  /**
   * Makes the table's config keys equal gateway.api_keys: new ones inserted, changed ones updated,
   * ones no longer listed revoked. Their id is cfg_<name>, so a restart finds the same key.
   */
  async importConfig(keys: readonly ConfigKey[]): Promise<void> {
    const now = this.#now();
    await this.#db.transaction(async (tx) => {
      const listed = new Set(keys.map((k) => `cfg_${k.name}`));
      for (const k of keys) {
        await tx.run(
          `INSERT INTO api_keys (${columns}) VALUES ($1, $2, $3, $2, '', 'config', $4, '[]', $5, $6, 0, 0, 0, 0, 'standard', 1, NULL, $7, $7, NULL)
           ON CONFLICT (id) DO UPDATE SET sha256 = excluded.sha256, admin = excluded.admin, requests_per_minute = excluded.requests_per_minute,
             tokens_per_minute = excluded.tokens_per_minute, revoked_at = NULL, updated_at = excluded.updated_at`,
          [`cfg_${k.name}`, k.name, k.sha256, k.admin ? 1 : 0, k.requestsPerMinute, k.tokensPerMinute, now],
        );
      }
      for (const r of await tx.all("SELECT id FROM api_keys WHERE source = 'config' AND revoked_at IS NULL")) {
        const id = text(r, 'id') ?? '';
        if (!listed.has(id)) await tx.run('UPDATE api_keys SET revoked_at = $2, updated_at = $2 WHERE id = $1', [id, now]);
      }
    });
    await this.refresh();
  }
}
