// The admin API's JSON for keys, both ways: a key record as OpenAI-style JSON (snake_case, times in
// unix seconds, money in dollars), and a create or update request's body checked field by field
// with a 400 that names the field (one checker for both, so an update is refused what create is).
import { RequestError } from '../errors/index.js';
import type { KeyPatch, KeyPriority, KeyRecord, KeySpec } from './keys.js';

/** A key as the admin API shows it; the secret appears only in the answer that issued it. */
export function keyJson(k: KeyRecord): Record<string, unknown> {
  const s = (ms: number | undefined): number | null => (ms === undefined ? null : Math.floor(ms / 1000));
  return {
    object: 'api_key',
    id: k.id,
    name: k.name,
    team: k.team,
    owner: k.owner,
    source: k.source,
    admin: k.admin,
    models: k.models,
    requests_per_minute: k.requestsPerMinute,
    tokens_per_minute: k.tokensPerMinute,
    tokens_per_day: k.tokensPerDay,
    tokens_per_month: k.tokensPerMonth,
    cost_per_day: k.costPerDayMicros / 1e6,
    cost_per_month: k.costPerMonthMicros / 1e6,
    priority: k.priority,
    weight: k.weight,
    expires_at: s(k.expiresAt),
    created_at: s(k.createdAt),
    revoked_at: s(k.revokedAt),
  };
}

const known = [
  'name',
  'team',
  'owner',
  'admin',
  'models',
  'requests_per_minute',
  'tokens_per_minute',
  'tokens_per_day',
  'tokens_per_month',
  'cost_per_day',
  'cost_per_month',
  'priority',
  'weight',
  'expires_at',
  'expires_in_days',
] as const;

const bad = (param: string, message: string): RequestError => new RequestError('LLMGW_BAD_REQUEST', `${param}: ${message}`, param);

// What an update may not change: the name is how routes, ledger rows and usage name the key, and
// admin would raise what an already handed-out secret may do (issue a new admin key instead).
const fixed: Readonly<Record<string, string>> = {
  name: 'a key keeps its name (usage rows are kept by it); issue a new key for a new name',
  admin: 'admin cannot change on an issued key; issue a new key with or without admin',
};

function objectOf(body: unknown, example: string, allowed: readonly string[]): Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new RequestError('LLMGW_BAD_JSON', `the body must be a JSON object such as ${example}`);
  const b = body as Record<string, unknown>;
  for (const k of Object.keys(b)) {
    if (!allowed.includes(k)) throw bad(k, fixed[k] ?? `unknown field; a key takes ${allowed.join(', ')}`);
  }
  return b;
}

// Every field but the name, each undefined when absent; expires_at null (update only) clears the expiry.
function fieldsOf(b: Record<string, unknown>, now: number): KeyPatch & { readonly admin: boolean | undefined } {
  const str = (k: string, pattern: RegExp, want: string): string | undefined => {
    const v = b[k];
    if (v === undefined) return undefined;
    if (typeof v !== 'string' || !pattern.test(v)) throw bad(k, `${JSON.stringify(v)} is not ${want}`);
    return v;
  };
  const count = (k: string): number | undefined => {
    const v = b[k];
    if (v === undefined) return undefined;
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw bad(k, `${JSON.stringify(v)} is not a whole number of 0 or more (0: no limit)`);
    return v;
  };
  const dollars = (k: string): number | undefined => {
    const v = b[k];
    if (v === undefined) return undefined;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0 || v > 1e9) throw bad(k, `${JSON.stringify(v)} is not an amount in dollars of 0 or more (0: no budget)`);
    return Math.round(v * 1e6);
  };
  const models = b.models;
  if (models !== undefined && !(Array.isArray(models) && models.every((m) => typeof m === 'string' && m !== ''))) {
    throw bad('models', `${JSON.stringify(models)} is not a list of model names ([] or leaving it out: every model)`);
  }
  const admin = b.admin;
  if (admin !== undefined && typeof admin !== 'boolean') throw bad('admin', `${JSON.stringify(admin)} is not true or false`);
  const priority = b.priority;
  const priorities: readonly KeyPriority[] = ['interactive', 'standard', 'batch'];
  if (priority !== undefined && !priorities.some((p) => p === priority)) throw bad('priority', `${JSON.stringify(priority)} is not one of ${priorities.join(', ')}`);
  const weight = b.weight;
  if (weight !== undefined && !(typeof weight === 'number' && weight > 0 && weight <= 1000)) throw bad('weight', `${JSON.stringify(weight)} is not a fair-share weight above 0 and at most 1000`);
  if (b.expires_at !== undefined && b.expires_in_days !== undefined) throw bad('expires_at', 'give expires_at or expires_in_days, not both');
  let expiresAt: number | null | undefined;
  if (b.expires_at !== undefined && b.expires_at !== null) {
    const v = b.expires_at;
    expiresAt = typeof v === 'number' && Number.isSafeInteger(v) ? v * 1000 : typeof v === 'string' ? Date.parse(v) : NaN;
    if (!Number.isFinite(expiresAt) || expiresAt <= now) throw bad('expires_at', `${JSON.stringify(v)} is not a future time (unix seconds, or ISO such as 2027-01-01T00:00:00Z)`);
  } else if (b.expires_at === null) expiresAt = null;
  const days = b.expires_in_days;
  if (days !== undefined) {
    if (!(typeof days === 'number' && days > 0 && days <= 36_500)) throw bad('expires_in_days', `${JSON.stringify(days)} is not a number of days above 0`);
    expiresAt = now + Math.round(days * 86_400_000);
  }
  return {
    team: str('team', /^.{1,128}$/, 'a team name of 1 to 128 characters'),
    owner: str('owner', /^.{0,256}$/, 'an owner of up to 256 characters'),
    admin,
    models: models as readonly string[] | undefined,
    requestsPerMinute: count('requests_per_minute'),
    tokensPerMinute: count('tokens_per_minute'),
    tokensPerDay: count('tokens_per_day'),
    tokensPerMonth: count('tokens_per_month'),
    costPerDayMicros: dollars('cost_per_day'),
    costPerMonthMicros: dollars('cost_per_month'),
    priority: priorities.find((p) => p === priority),
    weight: typeof weight === 'number' ? weight : undefined,
    expiresAt,
  };
}

/** A create request's body as a KeySpec; throws a 400 naming the first bad field. */
export function keySpecOf(body: unknown, now: number): KeySpec {
  const b = objectOf(body, '{"name": "team-a-ci"}', known);
  const name = b.name;
  if (name === undefined) throw bad('name', 'is required, e.g. {"name": "team-a-ci"}');
  if (typeof name !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$/.test(name)) {
    throw bad('name', `${JSON.stringify(name)} is not a name of letters, digits and . _ : @ - (up to 128, starting with a letter or digit)`);
  }
  if (b.expires_at === null) throw bad('expires_at', 'null is not a future time; leave it out for a key that does not expire');
  const f = fieldsOf(b, now);
  return { ...f, name, admin: f.admin === true, expiresAt: f.expiresAt ?? undefined };
}

/** An update request's body as a KeyPatch: only the fields it names change; a 400 names the first bad field. */
export function keyPatchOf(body: unknown, now: number): KeyPatch {
  const b = objectOf(body, '{"tokens_per_day": 2000000}', known.filter((k) => fixed[k] === undefined));
  const { admin: _fixed, ...patch } = fieldsOf(b, now);
  return patch;
}
