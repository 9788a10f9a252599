// `llmgw ctl keys ...` and `llmgw ctl usage`: the admin API of a running gateway from a terminal.
// Everything goes through HTTP (the gateway validates and stores), so the CLI works the same against
// an embedded database and a shared PostgreSQL, and never opens either itself.
import { request } from 'undici';
import { LlmgwError } from '../errors/index.js';
import type { DoctorIo } from './doctor.js';
import { columns } from './table.js';
import { readOptions } from './doctor.js';

/** Usage text of both commands. */
export const adminUsage = `usage: llmgw ctl keys list [--revoked]
       llmgw ctl keys create NAME [--team T] [--owner O] [--admin] [--models m1,m2]
                                  [--requests-per-minute N] [--tokens-per-minute N]
                                  [--tokens-per-day N] [--tokens-per-month N]
                                  [--cost-per-day USD] [--cost-per-month USD]
                                  [--priority interactive|standard|batch] [--weight W] [--expires-in-days D]
       llmgw ctl keys update ID_OR_NAME [--team T] [--owner O] [--models m1,m2] [the limit, budget,
                                  priority, weight and expiry flags of create]
       llmgw ctl keys revoke|rotate ID_OR_NAME
       llmgw ctl usage [--from DATE] [--to DATE] [--group-by key,team,model,day] [--name KEY] [--team T] [--model M] [--csv]
each also takes [--url URL] [--key ADMIN_KEY]: the gateway (or LLMGW_URL; default http://127.0.0.1:8080)
and an admin key (or LLMGW_ADMIN_KEY). A new or rotated key's secret is printed once; keep it.
ctl keys update changes only the flags given (--models '*': every model) and keeps
the secret and the usage; it applies from the key's next request.
ctl usage prints a table of the totals (the last 7 days by default), --csv the API's CSV.
`;

const numeric = ['--requests-per-minute', '--tokens-per-minute', '--tokens-per-day', '--tokens-per-month', '--cost-per-day', '--cost-per-month', '--weight', '--expires-in-days'];

async function call(url: URL, key: string | undefined, method: string, path: string, body?: unknown): Promise<{ status: number; text: string }> {
  try {
    const res = await request(new URL(path, url), {
      method: method as 'GET',
      headers: { 'content-type': 'application/json', ...(key === undefined ? {} : { authorization: `Bearer ${key}` }) },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(15_000),
    });
    return { status: res.statusCode, text: await res.body.text() };
  } catch (e) {
    throw new LlmgwError('LLMGW_CTL_ADMIN', `${url.href}: ${e instanceof Error ? e.message : String(e)}; is the gateway running there? (--url)`, { cause: e });
  }
}

function answer(r: { status: number; text: string }): unknown {
  let v: unknown;
  try {
    v = JSON.parse(r.text);
  } catch {
    v = undefined;
  }
  if (r.status >= 400) {
    const err = typeof v === 'object' && v !== null && 'error' in v ? (v as { error: { message?: string } }).error.message : r.text;
    throw new LlmgwError('LLMGW_CTL_ADMIN', `the gateway answered ${r.status}: ${err ?? ''}`);
  }
  return v;
}

function keyLines(keys: readonly Record<string, unknown>[]): string {
  const cell = (v: unknown): string => (v === null || v === undefined ? '-' : Array.isArray(v) ? (v.length === 0 ? '*' : v.join(',')) : String(v));
  const head = ['id', 'name', 'team', 'models', 'rpm', 'tpm', 'tokens/day', 'tokens/month', 'admin', 'expires', 'revoked'];
  const rows = keys.map((k) => [
    k.id,
    k.name,
    k.team,
    k.models,
    k.requests_per_minute,
    k.tokens_per_minute,
    k.tokens_per_day,
    k.tokens_per_month,
    k.admin,
    typeof k.expires_at === 'number' ? new Date(k.expires_at * 1000).toISOString() : null,
    typeof k.revoked_at === 'number' ? new Date(k.revoked_at * 1000).toISOString() : null,
  ].map(cell));
  const line = columns(head, rows);
  return [head, ...rows].map(line).join('\n') + '\n';
}

// The table's heads are the names the JSON and the CSV use, so what a person reads is what a script
// asks for. Cost shows four decimals (a short chat costs a fraction of a cent); the CSV keeps every digit.
function usageLines(groupBy: readonly string[], rows: readonly Record<string, unknown>[]): string {
  const head = [...groupBy, 'requests', 'prompt_tokens', 'cached_tokens', 'completion_tokens', 'cost_usd'];
  const cell = (c: string, v: unknown): string => (c === 'cost_usd' && typeof v === 'number' ? v.toFixed(4) : String(v ?? '-'));
  const cells = rows.map((r) => head.map((c) => cell(c, r[c])));
  const line = columns(head, cells);
  return [head, ...cells].map(line).join('\n') + '\n';
}

// The body of create and update from their flags: the flags given, nothing else.
function keyBody(v: Readonly<Record<string, string | undefined>>): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  for (const f of ['--team', '--owner', '--priority']) if (v[f] !== undefined) body[f.slice(2)] = v[f];
  // '*' is every model, as the table prints it: how update widens a key that had a list.
  if (v['--models'] !== undefined) body.models = v['--models'] === '*' ? [] : v['--models'].split(',').filter((m) => m !== '');
  for (const f of numeric) {
    const x = v[f];
    // Sent as given when not a number, so the gateway's 400 names the field and the value.
    if (x !== undefined) body[f.slice(2).replaceAll('-', '_')] = Number.isFinite(Number(x)) ? Number(x) : x;
  }
  return body;
}

/** Runs `ctl keys ...` or `ctl usage`; 0 done, 1 the gateway refused or failed, 2 bad usage. */
export async function ctlAdmin(what: 'keys' | 'usage', argv: readonly string[], io: DoctorIo): Promise<number> {
  const flags = new Set<string>(argv.filter((a) => a === '--admin' || a === '--revoked' || a === '--csv'));
  const rest = argv.filter((a) => !flags.has(a));
  const verb = what === 'keys' ? rest[0] : 'usage';
  const positional = what === 'keys' && ['create', 'update', 'revoke', 'rotate'].includes(verb ?? '') ? rest[1] : undefined;
  const optionArgs = what === 'keys' ? rest.slice(positional === undefined ? 1 : 2) : rest;
  const names = ['--url', '--key', ...(what === 'usage' ? ['--from', '--to', '--group-by', '--name', '--team', '--model'] : ['--team', '--owner', '--models', '--priority', ...numeric])];
  const opts = readOptions(optionArgs, names);
  if (opts.help === true || verb === '--help' || verb === '-h') {
    io.out(adminUsage);
    return 0;
  }
  const known = what === 'usage' || verb === 'list' || positional !== undefined;
  if (opts.error !== undefined || !known) {
    io.err(`llmgw ctl ${what}: ${opts.error ?? (verb === undefined ? 'which action? list, create, update, revoke or rotate' : `unknown action or missing name: ${JSON.stringify(verb)}`)}\n${adminUsage}`);
    return 2;
  }
  const v = opts.values;
  const url = new URL(v['--url'] ?? (io.host.env.LLMGW_URL || 'http://127.0.0.1:8080/'));
  const key = v['--key'] ?? io.host.env.LLMGW_ADMIN_KEY;
  try {
    if (what === 'usage') {
      const q = new URLSearchParams();
      for (const [flag, param] of [['--from', 'from'], ['--to', 'to'], ['--group-by', 'group_by'], ['--name', 'key'], ['--team', 'team'], ['--model', 'model']] as const) {
        const x = v[flag];
        if (x !== undefined) q.set(param, x);
      }
      if (flags.has('--csv')) q.set('format', 'csv');
      const r = await call(url, key, 'GET', `/admin/v1/usage?${q.toString()}`);
      if (flags.has('--csv')) {
        answer({ status: r.status, text: r.status >= 400 ? r.text : '{}' });
        io.out(r.text);
      } else {
        const totals = answer(r) as { group_by: string[]; data: Record<string, unknown>[] };
        io.out(usageLines(totals.group_by, totals.data));
      }
      return 0;
    }
    if (verb === 'list') {
      const list = answer(await call(url, key, 'GET', `/admin/v1/keys${flags.has('--revoked') ? '?revoked=true' : ''}`)) as { data: Record<string, unknown>[] };
      io.out(keyLines(list.data));
      return 0;
    }
    const target = encodeURIComponent(positional ?? '');
    if (verb === 'revoke' || verb === 'update') {
      const r = verb === 'revoke' ? await call(url, key, 'POST', `/admin/v1/keys/${target}/revoke`) : await call(url, key, 'PATCH', `/admin/v1/keys/${target}`, { ...keyBody(v), ...(flags.has('--admin') ? { admin: true } : {}) });
      io.out(keyLines([answer(r) as Record<string, unknown>]));
      return 0;
    }
    let issued: Record<string, unknown>;
    if (verb === 'rotate') issued = answer(await call(url, key, 'POST', `/admin/v1/keys/${target}/rotate`)) as Record<string, unknown>;
    else {
      const body: Record<string, unknown> = { name: positional, ...keyBody(v) };
      if (flags.has('--admin')) body.admin = true;
      issued = answer(await call(url, key, 'POST', '/admin/v1/keys', body)) as Record<string, unknown>;
    }
    io.out(`key ${String(issued.name)} (${String(issued.id)}): ${String(issued.key)}\nthis secret is shown once; store it now\n`);
    return 0;
  } catch (e) {
    if (!(e instanceof LlmgwError)) throw e;
    io.err(`llmgw ctl ${what}: ${e.message}\n`);
    return 1;
  }
}
