// The `store:` section of llmgw.yaml: where keys, budgets and the usage ledger live, what a request
// does while that database is down, how long usage is kept, and what each model's tokens cost.
import { deepFreeze, readMap, type Issues } from '../config/index.js';

/** What a request of a key with limits or budgets does while the database cannot be reached. */
export type WhenDown = 'fail_closed' | 'serve';

/** Dollars per million tokens of one model; cost is kept in micro-dollars, so these are micro-dollars a token. */
export interface ModelPrice {
  readonly promptPerMillion: number;
  /** Prompt tokens the engine had cached; defaults to the prompt price. */
  readonly cachedPerMillion: number;
  readonly completionPerMillion: number;
}

/** The whole `store:` section. */
export interface StoreConfig {
  /** postgres://… for a shared PostgreSQL; empty: the embedded database. */
  readonly url: string;
  /** The embedded database's file; empty: llmgw.db in agent.state_dir. */
  readonly path: string;
  readonly whenDown: WhenDown;
  /** Ledger rows older than this many days are deleted (0: kept forever). */
  readonly retentionDays: number;
  /** Bound on any one database call; past it the database counts as down. */
  readonly timeoutMs: number;
  /** How long an admitted request's hold counts against its key if its gateway dies before it ends. */
  readonly holdTtlMs: number;
  /** How often keys changed by another gateway (revoked, rotated, new) are read. */
  readonly refreshMs: number;
  /** This gateway's name in the ledger and on its holds; empty: host name and port. */
  readonly gatewayId: string;
  /**
   * Whether a ledger commit waits for the disk (fsync) before the answer's last byte. Off (default),
   * a commit survives the gateway being killed but not the database host losing power; on, it
   * survives both, at an fsync per group commit on the response's path.
   */
  readonly durableCommit: boolean;
  /** Rows kept in memory while the database is down, retried until it is back; past it the oldest are logged and dropped. */
  readonly maxPendingRows: number;
  readonly prices: Readonly<Record<string, ModelPrice>>;
}

/** Defaults for every key; `parseStoreSection(undefined, …)` returns these. */
export const storeDefaults: StoreConfig = deepFreeze({
  url: '',
  path: '',
  whenDown: 'fail_closed',
  retentionDays: 90,
  timeoutMs: 2_000,
  // Longer than any answer the upstream idle timeout lets run, so a live request's hold never lapses.
  holdTtlMs: 15 * 60_000,
  refreshMs: 1_000,
  gatewayId: '',
  durableCommit: false,
  maxPendingRows: 100_000,
  prices: {},
});

const isPostgresUrl = (v: unknown): v is string => typeof v === 'string' && (v === '' || /^postgres(ql)?:\/\/\S+$/.test(v));
const isPrice = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && v >= 0;

/** Parses the `store:` section, adding its problems to `issues`. */
export function parseStoreSection(raw: unknown, path: string, issues: Issues): StoreConfig {
  const d = storeDefaults;
  const m = readMap(raw, path, issues, ['url', 'path', 'when_down', 'retention_days', 'timeout_ms', 'hold_ttl_ms', 'refresh_ms', 'gateway_id', 'durable_commit', 'max_pending_rows', 'prices']);
  if (m === undefined) return d;
  const prices: Record<string, ModelPrice> = {};
  const pm = m.map('prices', undefined);
  for (const model of Object.keys(pm?.raw ?? {})) {
    const p = pm?.map(model, ['prompt_per_million', 'cached_per_million', 'completion_per_million']);
    if (p === undefined) continue;
    const want = 'a price in dollars per million tokens (0 or more), e.g. 0.15';
    const prompt = p.value('prompt_per_million', 0, isPrice, want);
    prices[model] = {
      promptPerMillion: prompt,
      cachedPerMillion: p.value('cached_per_million', prompt, isPrice, want),
      completionPerMillion: p.value('completion_per_million', 0, isPrice, want),
    };
  }
  return deepFreeze({
    url: m.value('url', d.url, isPostgresUrl, 'a PostgreSQL URL such as postgres://llmgw:secret@db:5432/llmgw (or leave it out for the embedded database)'),
    path: m.string('path', d.path),
    whenDown: m.oneOf('when_down', ['fail_closed', 'serve'], d.whenDown),
    retentionDays: m.int('retention_days', d.retentionDays, 0),
    timeoutMs: m.int('timeout_ms', d.timeoutMs, 50, 60_000),
    holdTtlMs: m.int('hold_ttl_ms', d.holdTtlMs, 1_000),
    refreshMs: m.int('refresh_ms', d.refreshMs, 50, 600_000),
    gatewayId: m.string('gateway_id', d.gatewayId),
    durableCommit: m.bool('durable_commit', d.durableCommit),
    maxPendingRows: m.int('max_pending_rows', d.maxPendingRows, 0),
    prices,
  });
}
