// `llmgw ctl status`: every actor of a running gateway (nodes, replicas, shards, publishers) as a
// terminal table, read from the same /debug/actors endpoints as the page; `--watch` follows them live.
import { request } from 'undici';
import { priorityClasses } from '../admission/index.js';
import { LlmgwError } from '../errors/index.js';
import { columns } from './table.js';

/** One row of the table: what `/debug/actors/state` says of an actor. */
export interface StatusRow {
  readonly id: string;
  readonly parent: string | undefined;
  readonly phase: string;
  readonly since: number;
  readonly reason: string | undefined;
  /** The reason's long form (command line, advice), shown by --verbose. */
  readonly detail: string | undefined;
}

function rowOf(v: unknown, at: string): StatusRow {
  if (typeof v !== 'object' || v === null) throw new LlmgwError('LLMGW_CTL_BAD_ANSWER', `${at} is not an object`);
  const get = (k: string): unknown => (k in v ? Reflect.get(v, k) : undefined);
  const [id, phase, since, parent, reason, detail] = [get('id'), get('phase'), get('since'), get('parent'), get('reason'), get('detail')];
  if (typeof id !== 'string' || typeof phase !== 'string' || typeof since !== 'number') {
    throw new LlmgwError('LLMGW_CTL_BAD_ANSWER', `${at} lacks id, phase or since; is the URL an llmgw gateway of this version?`);
  }
  const text = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
  return { id, phase, since, parent: text(parent), reason: text(reason), detail: text(detail) };
}

/** The rows of a `/debug/actors/state` answer (or of the event stream's `actors` event). */
export function rowsOf(body: unknown): { now: number | undefined; rows: StatusRow[] } {
  const list = typeof body === 'object' && body !== null && 'actors' in body ? body.actors : undefined;
  if (!Array.isArray(list)) throw new LlmgwError('LLMGW_CTL_BAD_ANSWER', 'the answer has no actors list; is the URL an llmgw gateway?');
  const at = typeof body === 'object' && body !== null && 'at' in body && typeof body.at === 'number' ? body.at : undefined;
  const now = typeof body === 'object' && body !== null && 'now' in body && typeof body.now === 'number' ? body.now : at;
  return { now, rows: list.map((a: unknown, i) => rowOf(a, `actors[${i}]`)) };
}

const ago = (ms: number): string => {
  const s = Math.max(0, Math.round(ms / 1000));
  return s < 120 ? `${s}s` : s < 7_200 ? `${Math.round(s / 60)}m` : `${Math.round(s / 3_600)}h`;
};

/**
 * The table: each actor under the one it belongs to, indented; columns ACTOR, STATE, SINCE, REASON.
 * `details` (--verbose) adds, under an actor with a reason, its detail and the last lines of its log.
 */
export function statusTable(rows: readonly StatusRow[], now: number, details?: ReadonlyMap<string, readonly string[]>): string {
  const ids = new Set(rows.map((r) => r.id));
  const ordered: { row: StatusRow; depth: number }[] = [];
  const walk = (parent: string | undefined, depth: number): void => {
    for (const r of rows) {
      const top = r.parent === undefined || !ids.has(r.parent);
      if (parent === undefined ? top : r.parent === parent) {
        ordered.push({ row: r, depth });
        walk(r.id, depth + 1);
      }
    }
  };
  walk(undefined, 0);
  const cells = ordered.map(({ row, depth }) => ['  '.repeat(depth) + row.id, row.phase, ago(now - row.since), row.reason ?? '']);
  const head = ['ACTOR', 'STATE', 'SINCE', 'REASON'];
  const line = columns(head, cells);
  const more = (row: StatusRow): string[] => {
    if (details === undefined || row.reason === undefined) return [];
    const lines = [...(row.detail?.split('\n') ?? []), ...(details.get(row.id) ?? [])];
    return lines.map((l) => `      | ${l}`);
  };
  return [line(head), ...ordered.flatMap(({ row }, i) => [line(cells[i] ?? []), ...more(row)])].join('\n') + '\n';
}

/**
 * One frame of `--watch` on a terminal: the cursor home, each line cut to the terminal's width and
 * cleared to its end, then everything below cleared. Drawn over the last frame, so nothing scrolls
 * and the scrollback is not filled with old tables (a clear-screen pushes each into it).
 */
export function redrawFrame(table: string, columns: number): string {
  const lines = table.replace(/\n$/, '').split('\n');
  return `\x1b[H${lines.map((l) => `${l.length > columns ? `${l.slice(0, columns - 1)}…` : l}\x1b[K`).join('\n')}\n\x1b[J`;
}

/** One change of `--watch` piped: time, actor, old and new phase, and the reason, one line a change for grep and logs. */
export function changeLine(before: StatusRow | undefined, after: StatusRow): string {
  const at = new Date(after.since).toISOString().slice(11, 19);
  return `${at} ${after.id} ${before?.phase ?? '·'} -> ${after.phase}${after.reason === undefined ? '' : `  ${after.reason}`}\n`;
}

/** The last lines of each actor's log that has a reason, for --verbose. */
export async function fetchTails(t: StatusTarget, rows: readonly StatusRow[], o: { signal: AbortSignal; lines: number }): Promise<Map<string, readonly string[]>> {
  const tails = new Map<string, readonly string[]>();
  for (const r of rows) {
    if (r.reason === undefined || !r.id.startsWith('shard:')) continue;
    const url = new URL('/debug/actors/tail', t.url);
    url.searchParams.set('actor', r.id);
    const res = await request(url, { headers: headersOf(t), signal: o.signal });
    if (res.statusCode !== 200) throw await failure(res.statusCode, res.body, url);
    const body: unknown = await res.body.json();
    const lines = typeof body === 'object' && body !== null && 'lines' in body && Array.isArray(body.lines) ? body.lines.filter((l): l is string => typeof l === 'string') : [];
    tails.set(r.id, lines.slice(-o.lines));
  }
  return tails;
}

/** Where and how to reach the gateway. */
export interface StatusTarget {
  readonly url: URL;
  readonly key: string | undefined;
}

const headersOf = (t: StatusTarget): Record<string, string> => (t.key === undefined ? {} : { authorization: `Bearer ${t.key}` });

async function failure(status: number, body: { text(): Promise<string> }, url: URL): Promise<LlmgwError> {
  const text = (await body.text()).slice(0, 300);
  const fix = status === 401 || status === 403 ? '; pass an admin key with --key or LLMGW_ADMIN_KEY' : '';
  return new LlmgwError('LLMGW_CTL_STATUS', `${url.href} answered ${status}${fix}: ${text}`);
}

/** Reads the actors once. */
export async function fetchStatus(t: StatusTarget, o: { signal: AbortSignal }): Promise<{ now: number | undefined; rows: StatusRow[] }> {
  const url = new URL('/debug/actors/state', t.url);
  const res = await request(url, { headers: headersOf(t), signal: o.signal });
  if (res.statusCode !== 200) throw await failure(res.statusCode, res.body, url);
  return rowsOf(await res.body.json());
}

/** One model's admission queue as `/debug/queues` lists it. */
export interface QueueRow {
  readonly model: string;
  readonly queued: number;
  readonly bytes: number;
  readonly byClass: Readonly<Record<string, number>>;
}

/** The rows of a `/debug/queues` answer. */
export function queueRowsOf(body: unknown): QueueRow[] {
  const list = typeof body === 'object' && body !== null && 'data' in body ? body.data : undefined;
  if (!Array.isArray(list)) throw new LlmgwError('LLMGW_CTL_BAD_ANSWER', 'the /debug/queues answer has no data list; is the URL an llmgw gateway of this version?');
  return list.map((q: unknown, i) => {
    const get = (k: string): unknown => (typeof q === 'object' && q !== null && k in q ? Reflect.get(q, k) : undefined);
    const [model, queued, bytes, byClass] = [get('model'), get('queued'), get('bytes'), get('byClass')];
    if (typeof model !== 'string' || typeof queued !== 'number' || typeof bytes !== 'number') {
      throw new LlmgwError('LLMGW_CTL_BAD_ANSWER', `data[${i}] of /debug/queues lacks model, queued or bytes`);
    }
    const count = (c: string): number => {
      const v = typeof byClass === 'object' && byClass !== null && c in byClass ? Reflect.get(byClass, c) : undefined;
      return typeof v === 'number' ? v : 0;
    };
    return { model, queued, bytes, byClass: Object.fromEntries(priorityClasses.map((c) => [c, count(c)])) };
  });
}

/** The admission queues under the actors: MODEL, QUEUED, by class, MiB held. */
export function queueTable(rows: readonly QueueRow[]): string {
  if (rows.length === 0) return 'admission queues: none used yet\n';
  const cells = rows.map((r) => [r.model, String(r.queued), priorityClasses.map((c) => `${c} ${r.byClass[c] ?? 0}`).join(', '), (r.bytes / 1048576).toFixed(1)]);
  const head = ['MODEL', 'QUEUED', 'BY CLASS', 'MIB'];
  const line = columns(head, cells);
  return [line(head), ...cells.map(line)].join('\n') + '\n';
}

/** Reads the admission queues once. */
export async function fetchQueues(t: StatusTarget, o: { signal: AbortSignal }): Promise<QueueRow[]> {
  const url = new URL('/debug/queues', t.url);
  const res = await request(url, { headers: headersOf(t), signal: o.signal });
  if (res.statusCode !== 200) throw await failure(res.statusCode, res.body, url);
  return queueRowsOf(await res.body.json());
}

/** What `watchStatus` reports: every actor, and the one that changed (none for the first report). */
export interface StatusChange {
  readonly rows: readonly StatusRow[];
  readonly changed: { readonly before: StatusRow | undefined; readonly after: StatusRow } | undefined;
  /** This machine's clock minus the gateway's. */
  readonly skewMs: number;
}

/** Follows the event stream, calling `onChange` first with every actor, then after each change, until `signal` aborts or the stream ends. */
export async function watchStatus(t: StatusTarget, onChange: (c: StatusChange) => void, o: { signal: AbortSignal }): Promise<void> {
  const url = new URL('/debug/actors/events', t.url);
  const res = await request(url, { headers: { ...headersOf(t), accept: 'text/event-stream' }, signal: o.signal });
  if (res.statusCode !== 200) throw await failure(res.statusCode, res.body, url);
  const rows = new Map<string, StatusRow>();
  let skew = 0;
  let buffer = '';
  for await (const chunk of res.body) {
    buffer += typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const message = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const event = /^event: (.*)$/m.exec(message)?.[1];
      const data = /^data: (.*)$/m.exec(message)?.[1];
      if (event === undefined || data === undefined) continue; // a heartbeat comment
      const v: unknown = JSON.parse(data);
      let changed: StatusChange['changed'];
      if (event === 'actors') {
        const first = rowsOf(v);
        skew = first.now === undefined ? 0 : Date.now() - first.now;
        rows.clear();
        for (const r of first.rows) rows.set(r.id, r);
      } else if (event === 'actor') {
        const r = rowOf(v, 'actor');
        const before = rows.get(r.id);
        rows.set(r.id, r);
        // A probe every health interval changes the state inside a phase: the table shows phases only.
        if (before !== undefined && before.phase === r.phase && before.reason === r.reason) continue;
        changed = { before, after: r };
      }
      onChange({ rows: [...rows.values()], changed, skewMs: skew });
    }
  }
}
