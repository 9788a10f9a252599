// The `gateway:` section of llmgw.yaml: parsed once at startup into a frozen object, every problem
// reported at once with its YAML path, unknown keys rejected so a typo never becomes a default.
import type { ConfigIssue } from '../errors/index.js';
import { ConfigError } from '../errors/index.js';

/** One client API key: stored as the sha256 of the secret, so the config file leaks nothing usable. */
export interface ApiKeyConfig {
  readonly name: string;
  readonly sha256: string;
  /** Requests admitted per minute; 0 is unlimited. */
  readonly requestsPerMinute: number;
  /** Prompt plus completion tokens per minute, counted from the engines' `usage`; 0 is unlimited. */
  readonly tokensPerMinute: number;
}

/** How the gateway talks to the engines. */
export interface UpstreamConfig {
  /** No response headers from the engine within this: 504 (or the next replica, if one is left). */
  readonly headersTimeoutMs: number;
  /** Silence between two chunks of a response longer than this ends it as failed. */
  readonly idleTimeoutMs: number;
  /** Keep-alive connections per engine. */
  readonly connections: number;
}

/** The router's knobs; the defaults suit a small cluster of vLLM-like engines. */
export interface RouterConfig {
  readonly tokenizeTimeoutMs: number;
  readonly tokenizeCacheEntries: number;
  readonly scoreTimeoutMs: number;
  /** A replica whose queued uncached prefill takes longer than this to clear is not chosen for its cache. */
  readonly ttftBudgetMs: number;
  /** A replica with this many times the average in-flight requests (at least 2) is not chosen for its cache; 0: no bound. */
  readonly boundedLoadFactor: number;
  /** Prefill rate assumed for a replica that does not state its own. */
  readonly prefillTokensPerS: number;
  /** How long a routed request's blocks count as held by its replica before the engine's events say so. */
  readonly predictionTtlMs: number;
  /** Bound on the approximate prefix tree, in chunks remembered. */
  readonly approxMaxChunks: number;
  /** Characters per chunk of the approximate tree (about 4 characters a token). */
  readonly approxChunkChars: number;
  /** How often each engine's /metrics is read for its queue. */
  readonly loadPollIntervalMs: number;
  /** What a block held only in a CPU-offload tier is worth against one in GPU memory (0..1). */
  readonly offloadTierWeight: number;
}

/** The whole `gateway:` section. */
export interface GatewayConfig {
  readonly host: string;
  readonly port: number;
  readonly maxBodyBytes: number;
  /** Empty: no authentication (bind to loopback only). */
  readonly apiKeys: readonly ApiKeyConfig[];
  readonly upstream: UpstreamConfig;
  readonly router: RouterConfig;
}

/** Defaults for every key of the section; `parseGatewayConfig(undefined)` returns these. */
export const gatewayDefaults: GatewayConfig = Object.freeze({
  host: '127.0.0.1',
  port: 8080,
  maxBodyBytes: 16 * 1024 * 1024,
  apiKeys: Object.freeze([]),
  upstream: Object.freeze({ headersTimeoutMs: 120_000, idleTimeoutMs: 300_000, connections: 64 }),
  router: Object.freeze({
    tokenizeTimeoutMs: 250,
    tokenizeCacheEntries: 4096,
    scoreTimeoutMs: 100,
    ttftBudgetMs: 2_000,
    boundedLoadFactor: 1.5,
    prefillTokensPerS: 8_000,
    predictionTtlMs: 3_000,
    approxMaxChunks: 200_000,
    approxChunkChars: 256,
    loadPollIntervalMs: 1_000,
    offloadTierWeight: 0.5,
  }),
});

type Checker<T> = (v: unknown, path: string, issues: ConfigIssue[]) => T | undefined;

const int =
  (min: number, max = Number.MAX_SAFE_INTEGER): Checker<number> =>
  (v, path, issues) => {
    if (typeof v === 'number' && Number.isInteger(v) && v >= min && v <= max) return v;
    issues.push({ path, message: `${JSON.stringify(v)} is not a whole number from ${min} to ${max}` });
    return undefined;
  };

const fraction: Checker<number> = (v, path, issues) => {
  if (typeof v === 'number' && v >= 0 && v <= 1) return v;
  issues.push({ path, message: `${JSON.stringify(v)} is not a number from 0 to 1` });
  return undefined;
};

const loadFactor: Checker<number> = (v, path, issues) => {
  if (typeof v === 'number' && (v === 0 || (v >= 1 && v <= 100))) return v;
  issues.push({ path, message: `${JSON.stringify(v)} is not 0 (no bound) or a factor from 1 to 100 (1.5 is usual)` });
  return undefined;
};

const str: Checker<string> = (v, path, issues) => {
  if (typeof v === 'string' && v !== '') return v;
  issues.push({ path, message: `${JSON.stringify(v)} is not a non-empty string` });
  return undefined;
};

const sha256Hex: Checker<string> = (v, path, issues) => {
  if (typeof v === 'string' && /^[0-9a-f]{64}$/.test(v)) return v;
  issues.push({
    path,
    message: `${JSON.stringify(v)} is not a sha256 in lower-case hex; write the output of \`printf %s "$KEY" | sha256sum\``,
  });
  return undefined;
};

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

// Edit distance, for "did you mean": a typo is usually one or two keystrokes from the key meant.
function distance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row.push(Math.min((prev[j] ?? 0) + 1, (row[j - 1] ?? 0) + 1, (prev[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1)));
    }
    prev = row;
  }
  return prev[b.length] ?? 0;
}

function closest(key: string, known: readonly string[]): string | undefined {
  let best: { k: string; d: number } | undefined;
  for (const k of known) {
    const d = distance(key, k);
    if (best === undefined || d < best.d) best = { k, d };
  }
  return best !== undefined && best.d <= Math.max(2, Math.floor(key.length / 3)) ? best.k : undefined;
}

// Reads one mapping: each known key through its checker (default when absent), unknown keys are issues.
function section<T extends object>(
  raw: unknown,
  path: string,
  defaults: T,
  fields: { readonly [K in keyof T]: readonly [yamlKey: string, check: Checker<T[K]>] },
  issues: ConfigIssue[],
): T {
  if (raw === undefined || raw === null) return defaults;
  if (!isRecord(raw)) {
    issues.push({ path, message: `${JSON.stringify(raw)} is not a mapping` });
    return defaults;
  }
  const out: Record<string, unknown> = { ...(defaults as Record<string, unknown>) };
  const known = Object.values<readonly [string, unknown]>(fields).map(([k]) => k);
  for (const key of Object.keys(raw)) {
    if (!known.includes(key)) {
      const near = closest(key, known);
      issues.push({ path: `${path}.${key}`, message: `unknown key${near ? ` (did you mean "${near}"?)` : ''}` });
    }
  }
  for (const [field, [yamlKey, check]] of Object.entries<readonly [string, Checker<unknown>]>(fields)) {
    if (raw[yamlKey] === undefined) continue;
    const v = check(raw[yamlKey], `${path}.${yamlKey}`, issues);
    if (v !== undefined) out[field] = v;
  }
  return Object.freeze(out) as T;
}

const apiKeys: Checker<readonly ApiKeyConfig[]> = (v, path, issues) => {
  if (!Array.isArray(v)) {
    issues.push({ path, message: `${JSON.stringify(v)} is not a list of { name, sha256 }` });
    return undefined;
  }
  const out: ApiKeyConfig[] = [];
  const seen = new Set<string>();
  v.forEach((item: unknown, i) => {
    const p = `${path}[${i}]`;
    const k = section<ApiKeyConfig>(
      item,
      p,
      { name: '', sha256: '', requestsPerMinute: 0, tokensPerMinute: 0 },
      {
        name: ['name', str],
        sha256: ['sha256', sha256Hex],
        requestsPerMinute: ['requests_per_minute', int(0)],
        tokensPerMinute: ['tokens_per_minute', int(0)],
      },
      issues,
    );
    if (isRecord(item) && (k.name === '' || k.sha256 === '')) {
      issues.push({ path: p, message: 'needs both name and sha256' });
    }
    if (seen.has(k.sha256) && k.sha256 !== '') issues.push({ path: `${p}.sha256`, message: 'the same key is listed twice' });
    seen.add(k.sha256);
    out.push(k);
  });
  return Object.freeze(out);
};

/** Parses the `gateway:` section (undefined: all defaults); throws ConfigError naming every problem. */
export function parseGatewayConfig(raw: unknown, source = 'llmgw.yaml'): GatewayConfig {
  const issues: ConfigIssue[] = [];
  const out = parseGatewaySection(raw, 'gateway', issues);
  if (issues.length > 0) throw new ConfigError(source, issues);
  return out;
}

/** The same parse, adding its problems to `issues` (for a loader that reports all sections at once). */
export function parseGatewaySection(raw: unknown, path: string, issues: ConfigIssue[]): GatewayConfig {
  const d = gatewayDefaults;
  return section<GatewayConfig>(
    raw,
    path,
    d,
    {
      host: ['host', str],
      port: ['port', int(0, 65_535)],
      maxBodyBytes: ['max_body_bytes', int(1024)],
      apiKeys: ['api_keys', apiKeys],
      upstream: [
        'upstream',
        (v, p, is) =>
          section<UpstreamConfig>(
            v,
            p,
            d.upstream,
            {
              headersTimeoutMs: ['headers_timeout_ms', int(1)],
              idleTimeoutMs: ['idle_timeout_ms', int(1)],
              connections: ['connections', int(1, 10_000)],
            },
            is,
          ),
      ],
      router: [
        'router',
        (v, p, is) =>
          section<RouterConfig>(
            v,
            p,
            d.router,
            {
              tokenizeTimeoutMs: ['tokenize_timeout_ms', int(1)],
              tokenizeCacheEntries: ['tokenize_cache_entries', int(0)],
              scoreTimeoutMs: ['score_timeout_ms', int(1)],
              ttftBudgetMs: ['ttft_budget_ms', int(1)],
              boundedLoadFactor: ['bounded_load_factor', loadFactor],
              prefillTokensPerS: ['prefill_tokens_per_s', int(1)],
              predictionTtlMs: ['prediction_ttl_ms', int(0)],
              approxMaxChunks: ['approx_max_chunks', int(0)],
              approxChunkChars: ['approx_chunk_chars', int(16)],
              loadPollIntervalMs: ['load_poll_interval_ms', int(0)],
              offloadTierWeight: ['offload_tier_weight', fraction],
            },
            is,
          ),
      ],
    },
    issues,
  );
}
