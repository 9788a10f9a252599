// `llmgw ctl status`: every actor of a running gateway (nodes, replicas, shards, publishers) as a
// terminal table, read from the same /debug/actors endpoints as the page; `--watch` follows them live.
import { request } from 'undici';
import { LlmgwError } from '../errors/index.js';

/** One row of the table: what `/debug/actors/state` says of an actor. */
export interface StatusRow {
  readonly id: string;
  readonly parent: string | undefined;
  readonly phase: string;
  readonly since: number;
  readonly reason: string | undefined;
}

function rowOf(v: unknown, at: string): StatusRow {
  if (typeof v !== 'object' || v === null) throw new LlmgwError('LLMGW_CTL_BAD_ANSWER', `${at} is not an object`);
  const get = (k: string): unknown => (k in v ? Reflect.get(v, k) : undefined);
  const [id, phase, since, parent, reason] = [get('id'), get('phase'), get('since'), get('parent'), get('reason')];
  if (typeof id !== 'string' || typeof phase !== 'string' || typeof since !== 'number') {
    throw new LlmgwError('LLMGW_CTL_BAD_ANSWER', `${at} lacks id, phase or since; is the URL an llmgw gateway of this version?`);
  }
  return { id, phase, since, parent: typeof parent === 'string' ? parent : undefined, reason: typeof reason === 'string' ? reason : undefined };
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

/** The table: each actor under the one it belongs to, indented; columns ACTOR, STATE, SINCE, REASON. */
export function statusTable(rows: readonly StatusRow[], now: number): string {
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
  const width = head.map((h, i) => Math.max(h.length, ...cells.map((c) => (c[i] ?? '').length)));
  const line = (c: readonly string[]): string => c.map((x, i) => (i === c.length - 1 ? x : x.padEnd(width[i] ?? 0))).join('  ').trimEnd();
  return [line(head), ...cells.map(line)].join('\n') + '\n';
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

/** Follows the event stream, calling `onRows` with every actor after each change, until `signal` aborts or the stream ends. */
export async function watchStatus(t: StatusTarget, onRows: (rows: readonly StatusRow[], skewMs: number) => void, o: { signal: AbortSignal }): Promise<void> {
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
      }
      onRows([...rows.values()], skew);
    }
  }
}
