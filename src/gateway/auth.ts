// Client authentication and per-key quotas. Keys are kept as sha256 hex only, so neither the config
// file nor a heap dump holds a usable secret; the bearer token is hashed and looked up.
import { createHash } from 'node:crypto';
import { defaultPriority } from '../admission/index.js';
import type { PriorityClass } from '../admission/index.js';
import { LlmgwError, RateLimitError } from '../errors/index.js';
import type { ApiKeyConfig } from './config.js';

/** A request's class in the admission queue, highest first. */
export type { PriorityClass };

/** Who made a request: a configured key's name, or `anonymous` when the gateway has no keys. */
export interface Caller {
  readonly name: string;
  readonly limits: Pick<ApiKeyConfig, 'requestsPerMinute' | 'tokensPerMinute'>;
  /** May read the debug endpoints; everyone may when the gateway has no keys. */
  readonly admin: boolean;
  /** The team the key belongs to, which admission shares capacity between (default: the key's name). */
  readonly tenant: string;
  /** The highest class the key's requests may ask for (default: standard). */
  readonly priority: PriorityClass;
  /** Its tenant's fair-share weight (default 1). */
  readonly weight: number;
}

/** sha256 hex of a client key: what goes into `gateway.api_keys[].sha256`. */
export const hashApiKey = (key: string): string => createHash('sha256').update(key, 'utf8').digest('hex');

/** The caller of a gateway without keys. */
export const anonymous: Caller = Object.freeze({
  name: 'anonymous',
  limits: { requestsPerMinute: 0, tokensPerMinute: 0 },
  admin: true,
  tenant: 'anonymous',
  priority: defaultPriority,
  weight: 1,
});

/** The key of `Authorization: Bearer <key>`, or throws LLMGW_UNAUTHORIZED. */
export function bearerKey(authorization: string | undefined): string {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
  // The message never repeats the key: it would land in client logs and proxies.
  if (m?.[1] === undefined) {
    throw new LlmgwError('LLMGW_UNAUTHORIZED', 'missing API key: send "Authorization: Bearer <key>" with a key issued to you');
  }
  return m[1];
}

/** Resolves `Authorization: Bearer <key>` to a Caller or throws LLMGW_UNAUTHORIZED. */
export function authenticator(keys: readonly ApiKeyConfig[]): (authorization: string | undefined) => Caller {
  const byHash = new Map(
    keys.map((k) => [k.sha256, { name: k.name, limits: k, admin: k.admin, tenant: k.tenant === undefined || k.tenant === '' ? k.name : k.tenant, priority: k.priority ?? defaultPriority, weight: k.weight ?? 1 } satisfies Caller]),
  );
  return (authorization) => {
    if (byHash.size === 0) return anonymous;
    const caller = byHash.get(hashApiKey(bearerKey(authorization)));
    if (caller === undefined) {
      throw new LlmgwError('LLMGW_UNAUTHORIZED', 'unknown API key: use a key whose sha256 is listed in gateway.api_keys');
    }
    return caller;
  };
}

interface Bucket {
  level: number;
  at: number;
}

/** Tokens a request holds against its key's budget from admission until the engine says what it used. */
export interface TokenHold {
  /** The request's bound: prompt tokens (at most) plus every completion token it may produce. */
  readonly tokens: number;
  /** Charges what the engine reported instead of the bound; the rest goes back. Once only. */
  settle(usedTokens: number): void;
  /** The engine never ran the request: the whole hold goes back. Once only. */
  release(): void;
}

/** What a request may cost, as known before it is sent. */
export interface RequestBound {
  /** An upper bound on the prompt's tokens. */
  readonly promptTokens: number;
  /** The completion tokens the client allows (max_tokens x n); undefined when it set no limit. */
  readonly completionTokens: number | undefined;
}

/** An admitted request: what it holds, and the completion limit the gateway must set when the client set none. */
export interface Admission {
  readonly hold: TokenHold;
  readonly impose: number | undefined;
}

const freeHold: TokenHold = Object.freeze({ tokens: 0, settle: () => undefined, release: () => undefined });

/**
 * Per-key request and token budgets refilled continuously over a minute (token buckets). A request
 * reserves its bound before it is sent and settles with the engine's usage, so sixteen concurrent
 * requests of one key cannot together spend more than the key has: charging after the fact let each
 * of them pass the check before any was charged.
 */
export class Quotas {
  readonly #requests = new Map<string, Bucket>();
  readonly #tokens = new Map<string, Bucket>();
  readonly #now: () => number;

  constructor(o: { now?: () => number } = {}) {
    this.#now = o.now ?? Date.now;
  }

  // A bucket holds up to one minute's allowance and refills at perMinute/60 000 per ms.
  #refill(map: Map<string, Bucket>, name: string, perMinute: number): Bucket {
    const now = this.#now();
    const b = map.get(name) ?? { level: perMinute, at: now };
    b.level = Math.min(perMinute, b.level + ((now - b.at) * perMinute) / 60_000);
    b.at = now;
    map.set(name, b);
    return b;
  }

  /**
   * Admits one request or throws RateLimitError, holding its token bound. A request with no
   * completion limit of its own gets one (`impose`): what the key has left after its prompt, since
   * without a limit the engine may write until the context is full and the key would overdraw.
   */
  admit(c: Caller, bound: RequestBound): Admission {
    const { requestsPerMinute: rpm, tokensPerMinute: tpm } = c.limits;
    const r = rpm > 0 ? this.#refill(this.#requests, c.name, rpm) : undefined;
    if (r !== undefined && r.level < 1) {
      throw new RateLimitError(
        `key "${c.name}" made its ${rpm} requests per minute; wait or raise requests_per_minute in gateway.api_keys`,
        ((1 - r.level) * 60_000) / rpm / 1000,
      );
    }
    if (tpm <= 0) {
      if (r !== undefined) r.level -= 1;
      return { hold: freeHold, impose: undefined };
    }
    const t = this.#refill(this.#tokens, c.name, tpm);
    const prompt = Math.max(0, Math.ceil(bound.promptTokens));
    const impose = bound.completionTokens === undefined ? Math.floor(t.level - prompt) : undefined;
    const need = prompt + (bound.completionTokens ?? Math.max(1, impose ?? 1));
    if (need > tpm) {
      throw new RateLimitError(
        `key "${c.name}": this request may use ${need} tokens (prompt at most ${prompt} plus max_tokens), more than its ${tpm} tokens per minute; ` +
          'lower max_tokens or shorten the prompt, or raise tokens_per_minute in gateway.api_keys',
        60,
      );
    }
    if (t.level < need || (impose !== undefined && impose < 1)) {
      throw new RateLimitError(
        `key "${c.name}" has ${Math.max(0, Math.floor(t.level))} of its ${tpm} tokens per minute left and this request may use ${need}; ` +
          'wait, lower max_tokens, or raise tokens_per_minute in gateway.api_keys',
        ((need - t.level) * 60_000) / tpm / 1000,
      );
    }
    if (r !== undefined) r.level -= 1;
    t.level -= need;
    let open = true;
    const give = (tokens: number): void => {
      if (!open) return;
      open = false;
      const b = this.#refill(this.#tokens, c.name, tpm);
      b.level = Math.min(tpm, b.level + tokens);
    };
    return {
      hold: { tokens: need, settle: (used) => give(need - Math.max(0, used)), release: () => give(need) },
      impose: impose === undefined ? undefined : Math.max(1, impose),
    };
  }
}
