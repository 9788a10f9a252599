// Questions asked of the ledger: how many requests and tokens, and what cost, by key, team, model
// and day over a time range; answered as JSON rows or CSV.
import { RequestError } from '../errors/index.js';
import { num, text, type Db, type Dialect, type Param } from './db.js';

/** What usage may be grouped by. */
export type UsageDimension = 'key' | 'team' | 'model' | 'day';

/** Columns a group-by names, per dimension; the day is UTC. */
const dimensionSql: Readonly<Record<Dialect, Readonly<Record<UsageDimension, string>>>> = {
  sqlite: { key: 'key_name', team: 'team', model: 'model', day: "strftime('%Y-%m-%d', at / 1000, 'unixepoch')" },
  postgres: { key: 'key_name', team: 'team', model: 'model', day: "to_char(to_timestamp(at / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD')" },
};

export const usageDimensions: readonly UsageDimension[] = ['key', 'team', 'model', 'day'];

/** A usage question. */
export interface UsageQuery {
  /** Inclusive start, ms since the epoch. */
  readonly from: number;
  /** Exclusive end. */
  readonly to: number;
  readonly groupBy: readonly UsageDimension[];
  readonly key?: string | undefined;
  readonly team?: string | undefined;
  readonly model?: string | undefined;
}

/** One group's totals. */
export interface UsageTotal {
  readonly key?: string;
  readonly team?: string;
  readonly model?: string;
  readonly day?: string;
  readonly requests: number;
  readonly promptTokens: number;
  readonly cachedTokens: number;
  readonly completionTokens: number;
  readonly costUsd: number;
}

/** Totals over the query's range, one row per group, ordered by the group's columns. */
export async function usageTotals(db: Db, q: UsageQuery): Promise<UsageTotal[]> {
  const dims = dimensionSql[db.dialect];
  const where = ['at >= $1', 'at < $2'];
  const params: Param[] = [q.from, q.to];
  for (const [column, value] of [['key_name', q.key], ['team', q.team], ['model', q.model]] as const) {
    if (value === undefined) continue;
    params.push(value);
    where.push(`${column} = $${params.length}`);
  }
  const groups = q.groupBy.map((g) => `${dims[g]} AS ${g === 'key' ? 'key_name' : g}`);
  const sql =
    `SELECT ${[...groups, 'COUNT(*) AS requests', 'SUM(prompt_tokens) AS prompt', 'SUM(cached_tokens) AS cached', 'SUM(completion_tokens) AS completion', 'SUM(cost_micros) AS cost'].join(', ')} ` +
    `FROM usage_ledger WHERE ${where.join(' AND ')}` +
    (q.groupBy.length > 0 ? ` GROUP BY ${q.groupBy.map((_, i) => i + 1).join(', ')} ORDER BY ${q.groupBy.map((_, i) => i + 1).join(', ')}` : '');
  const rows = await db.all(sql, params);
  return rows
    .filter((r) => (num(r, 'requests') ?? 0) > 0)
    .map((r) => {
      const out: Record<string, string | number> = {};
      for (const g of q.groupBy) out[g] = text(r, g === 'key' ? 'key_name' : g) ?? '';
      return {
        ...out,
        requests: num(r, 'requests') ?? 0,
        promptTokens: num(r, 'prompt') ?? 0,
        cachedTokens: num(r, 'cached') ?? 0,
        completionTokens: num(r, 'completion') ?? 0,
        costUsd: (num(r, 'cost') ?? 0) / 1e6,
      };
    });
}

const csvCell = (v: unknown): string => {
  const s = v === undefined || v === null ? '' : String(v);
  // A cell a spreadsheet would run as a formula is quoted and prefixed: key and team names are user input.
  const safe = /^[=+\-@\t\r]/.test(s) ? `'${s}` : s;
  return /[",\n\r']/.test(safe) ? `"${safe.replaceAll('"', '""')}"` : safe;
};

// The API's names for a total, as the keys API and OpenAI's usage objects spell them; the JSON and the
// CSV header say the same, so a script moves between the two formats without a lookup table.
function usageRecord(groupBy: readonly UsageDimension[], r: UsageTotal): Record<string, string | number> {
  const out: Record<string, string | number> = {};
  for (const g of groupBy) out[g] = r[g] ?? '';
  return { ...out, requests: r.requests, prompt_tokens: r.promptTokens, cached_tokens: r.cachedTokens, completion_tokens: r.completionTokens, cost_usd: r.costUsd };
}

const totalColumns = ['requests', 'prompt_tokens', 'cached_tokens', 'completion_tokens', 'cost_usd'] as const;

/** The totals as the admin API's JSON rows: the group's keys, then requests, prompt_tokens, cached_tokens, completion_tokens, cost_usd. */
export function usageJson(groupBy: readonly UsageDimension[], rows: readonly UsageTotal[]): Record<string, string | number>[] {
  return rows.map((r) => usageRecord(groupBy, r));
}

/** The totals as CSV (RFC 4180, header line first), columns named as in the JSON. */
export function usageCsv(groupBy: readonly UsageDimension[], rows: readonly UsageTotal[]): string {
  const cols = [...groupBy, ...totalColumns];
  const lines = usageJson(groupBy, rows).map((r) => cols.map((c) => csvCell(r[c])).join(','));
  return [cols.join(','), ...lines].join('\r\n') + '\r\n';
}

/** Parses a query string's usage question (from, to as ISO dates or ms; group_by; key, team, model); throws a 400 naming the field. */
export function parseUsageQuery(params: URLSearchParams, now: number): UsageQuery {
  const time = (name: string, dflt: number): number => {
    const v = params.get(name);
    if (v === null || v === '') return dflt;
    const ms = /^\d+$/.test(v) ? Number(v) : Date.parse(v);
    if (!Number.isFinite(ms)) throw new RequestError('LLMGW_BAD_REQUEST', `${name}: ${JSON.stringify(v)} is not a time; write an ISO date (2026-12-01 or 2026-12-01T10:00:00Z) or milliseconds since the epoch`, name);
    return ms;
  };
  const from = time('from', now - 7 * 86_400_000);
  const to = time('to', now + 1);
  if (to <= from) throw new RequestError('LLMGW_BAD_REQUEST', `to must be after from (got from ${new Date(from).toISOString()}, to ${new Date(to).toISOString()})`, 'to');
  const raw = params.get('group_by');
  const groupBy = raw === null || raw === '' ? [] : raw.split(',');
  const bad = groupBy.filter((g) => !usageDimensions.some((d) => d === g));
  if (bad.length > 0) throw new RequestError('LLMGW_BAD_REQUEST', `group_by: ${bad.map((b) => JSON.stringify(b)).join(', ')} not known; group by any of ${usageDimensions.join(', ')}`, 'group_by');
  return {
    from,
    to,
    groupBy: usageDimensions.filter((d) => groupBy.includes(d)),
    key: params.get('key') ?? undefined,
    team: params.get('team') ?? undefined,
    model: params.get('model') ?? undefined,
  };
}
