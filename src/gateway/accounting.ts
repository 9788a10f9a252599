// Who a request is, whether it may run, and its one usage record: the gateway's single place for
// keys, quotas and the ledger. Without a store, keys come from gateway.api_keys and quotas live in
// memory, as before; with one (cli wires the store in), keys, budgets and per-minute limits live in
// its database and every finished request leaves a ledger row, committed before its last byte.
import { LlmgwError } from '../errors/index.js';
import type { Logger } from '../log/index.js';
import { anonymous, authenticator, bearerKey, hashApiKey, Quotas, type Caller, type PriorityClass, type RequestBound, type TokenHold } from './auth.js';
import type { KeyLimits, UsageRow } from '../store/index.js';
import type { ApiKeyConfig } from './config.js';

/** A key as the store keeps it: what authentication and admission read, besides its limits. */
export interface StoredKey extends KeyLimits {
  readonly id: string;
  readonly team: string;
  readonly admin: boolean;
  /** Models it may use; empty: every model. */
  readonly models: readonly string[];
  readonly priority: PriorityClass;
  readonly weight: number;
  readonly expiresAt: number | undefined;
  readonly revokedAt: number | undefined;
}

/** What an admitted request holds in the store; the completion limit to impose when the client set none. */
export interface StoreHeld {
  readonly impose: number | undefined;
}

/** One finished request's ledger row, as the store writes it. */
export type LedgerRow = UsageRow;

/** The store as the gateway uses it (src/store's Store satisfies it). */
export interface AccountStore {
  bySha256(sha256: string): StoredKey | undefined;
  /** Whether any key was ever stored; a store without keys serves anonymous callers. */
  hasKeys(): boolean;
  /** Whether admission of this key goes through the database. */
  isLimited(key: StoredKey): boolean;
  admit(r: { key: StoredKey; model: string; promptTokens: number; completionTokens: number | undefined }): Promise<StoreHeld>;
  /** Resolves once the row is committed; rejects (keeping the row to retry) when the database cannot take it. */
  record(row: LedgerRow, hold?: StoreHeld): Promise<void>;
  release(hold: StoreHeld): Promise<void>;
}

/** What the gateway does with a limited key's request while the store is down. */
export type StoreDownPolicy = 'fail_closed' | 'serve';

/** An admitted request: its in-memory hold (as before), the completion limit to impose, and its store hold. */
export interface Admitted {
  readonly hold: TokenHold;
  readonly impose: number | undefined;
  readonly stored: StoreHeld | undefined;
}

/** What a finished request reports for its ledger row; the caller and model come from the request. */
export type Finished = Omit<LedgerRow, 'keyId' | 'keyName' | 'team' | 'at' | 'model'>;

const freeHold: TokenHold = Object.freeze({ tokens: 0, settle: () => undefined, release: () => undefined });

// A down store is said once a minute, not once a request.
const downLogEveryMs = 60_000;

/** Authentication, admission and the ledger row of every request, with or without a store. */
export class Accounting {
  readonly #store: AccountStore | undefined;
  readonly #yaml: (authorization: string | undefined) => Caller;
  readonly #quotas = new Quotas();
  readonly #keyOf = new WeakMap<Caller, StoredKey>();
  readonly #callers = new WeakMap<StoredKey, Caller>();
  readonly #whenDown: StoreDownPolicy;
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #onDown: (() => void) | undefined;
  #downSaidAt = -Infinity;

  constructor(o: { keys: readonly ApiKeyConfig[]; store?: AccountStore | undefined; whenDown?: StoreDownPolicy; log: Logger; now?: () => number; onDown?: () => void }) {
    this.#store = o.store;
    this.#yaml = authenticator(o.keys);
    this.#whenDown = o.whenDown ?? 'fail_closed';
    this.#log = o.log;
    this.#now = o.now ?? Date.now;
    this.#onDown = o.onDown;
  }

  /** Resolves the request's key to a Caller or throws LLMGW_UNAUTHORIZED. */
  authenticate(authorization: string | undefined): Caller {
    const store = this.#store;
    if (store === undefined) return this.#yaml(authorization);
    if (!store.hasKeys()) return anonymous;
    return this.authenticateSha256(hashApiKey(bearerKey(authorization)));
  }

  /** The Caller of the stored key with this sha256 (a batch's line runs as its creator), or throws LLMGW_UNAUTHORIZED. */
  authenticateSha256(sha256: string): Caller {
    const store = this.#store;
    if (store === undefined || !store.hasKeys()) return anonymous;
    const k = store.bySha256(sha256);
    if (k === undefined) throw new LlmgwError('LLMGW_UNAUTHORIZED', 'unknown API key: use a key issued by this gateway\'s admin (llmgw ctl keys create) or listed in gateway.api_keys');
    if (k.revokedAt !== undefined) throw new LlmgwError('LLMGW_UNAUTHORIZED', `API key "${k.name}" was revoked; ask its admin for a new key`);
    if (k.expiresAt !== undefined && k.expiresAt <= this.#now()) {
      throw new LlmgwError('LLMGW_UNAUTHORIZED', `API key "${k.name}" expired at ${new Date(k.expiresAt).toISOString()}; ask its admin for a new key`);
    }
    let c = this.#callers.get(k);
    if (c === undefined) {
      c = Object.freeze({
        name: k.name,
        limits: { requestsPerMinute: k.requestsPerMinute, tokensPerMinute: k.tokensPerMinute },
        admin: k.admin,
        tenant: k.team,
        priority: k.priority,
        weight: k.weight,
      });
      this.#callers.set(k, c);
      this.#keyOf.set(c, k);
    }
    return c;
  }

  /** Admits one request for `model` or throws (403 a model the key may not use, 429 a limit or budget, 503 a down store). */
  async admit(caller: Caller, model: string, bound: RequestBound): Promise<Admitted> {
    const k = this.#keyOf.get(caller);
    if (k === undefined) return { ...this.#quotas.admit(caller, bound), stored: undefined };
    if (k.models.length > 0 && !k.models.includes(model)) {
      throw new LlmgwError('LLMGW_MODEL_NOT_ALLOWED', `key "${k.name}" may not use model "${model}" (it may use ${k.models.map((m) => `"${m}"`).join(', ')}); ask its admin to add the model`);
    }
    const store = this.#store;
    if (store === undefined || !store.isLimited(k)) return { hold: freeHold, impose: undefined, stored: undefined };
    try {
      const stored = await store.admit({ key: k, model, promptTokens: bound.promptTokens, completionTokens: bound.completionTokens });
      return { hold: freeHold, impose: stored.impose, stored };
    } catch (e) {
      if (!(e instanceof LlmgwError && e.code === 'LLMGW_STORE_DOWN')) throw e;
      this.#down(e);
      if (this.#whenDown === 'fail_closed') throw e;
      // Serve and remember: the per-minute limits hold on this gateway alone; day and month budgets
      // cannot be checked until the store is back, and the rows wait in memory to be written.
      return { ...this.#quotas.admit(caller, bound), stored: undefined };
    }
  }

  /**
   * Writes the request's ledger row; resolves once it is committed, or at once when the store cannot
   * take it (the row is kept and retried; the answer is not held back for it). Without a store, or
   * for a request refused before it was authenticated, there is nothing to write.
   */
  async finish(caller: Caller | undefined, model: string, admitted: Admitted | undefined, f: Finished): Promise<void> {
    if (this.#store === undefined || caller === undefined) return;
    // A gateway without keys still has a ledger: its callers are all `anonymous`.
    const k = this.#keyOf.get(caller) ?? { id: caller.name, name: caller.name, team: caller.tenant };
    try {
      await this.#store.record({ ...f, model, at: this.#now(), keyId: k.id, keyName: k.name, team: k.team }, admitted?.stored);
    } catch (e) {
      if (!(e instanceof LlmgwError && e.code === 'LLMGW_STORE_DOWN')) throw e;
      this.#down(e);
    }
  }

  /** The request never reached an engine: its store hold goes back (in the background: nothing waits on it). */
  release(admitted: Admitted): void {
    admitted.hold.release();
    const s = admitted.stored;
    if (s === undefined || this.#store === undefined) return;
    void this.#store.release(s).catch((e: unknown) => this.#log.warn({ err: e }, 'store.release_failed'));
  }

  #down(e: LlmgwError): void {
    this.#onDown?.();
    const now = this.#now();
    if (now - this.#downSaidAt < downLogEveryMs) return;
    this.#downSaidAt = now;
    this.#log.error({ err: e, whenDown: this.#whenDown }, 'store.down');
  }
}
