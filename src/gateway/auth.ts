// Client authentication and per-key quotas. Keys are kept as sha256 hex only, so neither the config
// file nor a heap dump holds a usable secret; the bearer token is hashed and looked up.
import { createHash } from 'node:crypto';
import { LlmgwError } from '../errors/index.js';
import type { ApiKeyConfig } from './config.js';
import { RateLimitError } from './errors.js';

/** Who made a request: a configured key's name, or `anonymous` when the gateway has no keys. */
export interface Caller {
  readonly name: string;
  readonly limits: Pick<ApiKeyConfig, 'requestsPerMinute' | 'tokensPerMinute'>;
  /** May read the debug endpoints; everyone may when the gateway has no keys. */
  readonly admin: boolean;
}

/** sha256 hex of a client key: what goes into `gateway.api_keys[].sha256`. */
export const hashApiKey = (key: string): string => createHash('sha256').update(key, 'utf8').digest('hex');

const anonymous: Caller = Object.freeze({ name: 'anonymous', limits: { requestsPerMinute: 0, tokensPerMinute: 0 }, admin: true });

/** Resolves `Authorization: Bearer <key>` to a Caller or throws LLMGW_UNAUTHORIZED. */
export function authenticator(keys: readonly ApiKeyConfig[]): (authorization: string | undefined) => Caller {
  const byHash = new Map(keys.map((k) => [k.sha256, { name: k.name, limits: k, admin: k.admin } satisfies Caller]));
  return (authorization) => {
    if (byHash.size === 0) return anonymous;
    const m = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
    // The message never repeats the key: it would land in client logs and proxies.
    if (m?.[1] === undefined) {
      throw new LlmgwError(
        'LLMGW_UNAUTHORIZED',
        'missing API key: send "Authorization: Bearer <key>" with a key listed in gateway.api_keys',
      );
    }
    const caller = byHash.get(hashApiKey(m[1]));
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

/** Per-key request and token budgets refilled continuously over a minute (token buckets). */
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

  /** Admits one request or throws RateLimitError. Tokens are checked here and charged by `charge`. */
  admit(c: Caller): void {
    const { requestsPerMinute: rpm, tokensPerMinute: tpm } = c.limits;
    if (tpm > 0) {
      const t = this.#refill(this.#tokens, c.name, tpm);
      // Tokens are only known after the engine answers, so a key may overdraw once; it then waits.
      if (t.level <= 0) {
        throw new RateLimitError(
          `key "${c.name}" used its ${tpm} tokens per minute; wait or raise tokens_per_minute in gateway.api_keys`,
          ((1 - t.level) * 60_000) / tpm / 1000,
        );
      }
    }
    if (rpm > 0) {
      const r = this.#refill(this.#requests, c.name, rpm);
      if (r.level < 1) {
        throw new RateLimitError(
          `key "${c.name}" made its ${rpm} requests per minute; wait or raise requests_per_minute in gateway.api_keys`,
          ((1 - r.level) * 60_000) / rpm / 1000,
        );
      }
      r.level -= 1;
    }
  }

  /** Charges the tokens an engine reported for a request of this caller. */
  charge(c: Caller, tokens: number): void {
    const tpm = c.limits.tokensPerMinute;
    if (tpm <= 0 || tokens <= 0) return;
    this.#refill(this.#tokens, c.name, tpm).level -= tokens;
  }
}
