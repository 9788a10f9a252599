// The terminal form of a log line: time, level, event name, then the fields as key=value, one line
// that a person reads across. Long values are shortened here only: the JSON line (piped, or
// LLMGW_LOG_FORMAT=json) keeps every field whole, and that is the one to grep or to hand to jq.
// The one exception is `try`, a command for the reader to run (serve.ready's curl): cut or quoted it
// cannot be pasted, so it goes whole on a line of its own below the event.

// Past this a value is cut: a command line or a reason sentence belongs in the JSON or a details view.
const MAX_VALUE_CHARS = 60;
const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const bare = /^[\w.:/@+,-]+$/;

const colors = { debug: '\x1b[90m', info: '\x1b[32m', warn: '\x1b[33m', error: '\x1b[31m' } as const;
const dim = (s: string, on: boolean): string => (on ? `\x1b[2m${s}\x1b[22m` : s);

function cut(s: string): string {
  return s.length > MAX_VALUE_CHARS ? `${s.slice(0, MAX_VALUE_CHARS - 1)}…` : s;
}

// A list of names (models, nodes) reads as the names while they fit one value; any other list, a
// log tail or a set of objects, is only counted.
function listValue(v: readonly unknown[]): string {
  const names = v.every((x) => typeof x === 'string' && bare.test(x)) ? v.join(',') : '';
  return names !== '' && names.length <= MAX_VALUE_CHARS ? names : `[${v.length}]`;
}

/**
 * One field's value as the terminal shows it: a request id by its first 8 digits (as git shortens
 * a hash; the JSON line starts with the same), an error by its message, a list of names as the
 * names and any other list by its length;
 * undefined for any other object, which is left off the line: a request's whole receipt is in its
 * JSON line and at /debug/receipts.
 */
export function prettyValue(v: unknown): string | undefined {
  if (v === null) return '-';
  if (typeof v === 'string') {
    if (uuid.test(v)) return v.slice(0, 8);
    const s = cut(v.replaceAll('\n', ' '));
    return bare.test(s) ? s : JSON.stringify(s);
  }
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  if (Array.isArray(v)) return listValue(v);
  if (typeof v === 'object' && 'message' in v && typeof v.message === 'string') return JSON.stringify(cut(v.message));
  return undefined;
}

// A duration in ms reads as one: tookMs=312 shows as took=312ms.
function field(k: string, v: unknown): [string, string | undefined] {
  if (typeof v === 'number' && k.endsWith('Ms') && k.length > 2) return [k.slice(0, -2), `${v}ms`];
  return [k, prettyValue(v)];
}

/** A JSON log record (as the logger writes it) in its terminal form; `color` for a terminal that shows it. */
export function prettyLine(record: Readonly<Record<string, unknown>>, color: boolean): string {
  const { time, level, msg, reqId, try: command, ...fields } = record;
  const clock = typeof time === 'string' ? time.slice(11, 23) : '';
  const lvl = typeof level === 'string' ? level : 'info';
  const event = String(msg);
  const tint = color && lvl in colors ? colors[lvl as keyof typeof colors] : '';
  // The request a line belongs to rides on its event name, as in a tracing UI: gateway.request#3f2a9c1e.
  const id = reqId === undefined ? '' : `#${prettyValue(reqId) ?? ''}`;
  const head = `${dim(clock, color)} ${tint}${lvl.toUpperCase()}${color ? '\x1b[39m' : ''} ${color ? `\x1b[1m${event}\x1b[22m` : event}${id}`;
  const kv = Object.entries(fields)
    // A bound subsystem the event's name already says (subsystem=gateway on gateway.request).
    .filter(([k, v]) => v !== undefined && !(k === 'subsystem' && event.startsWith(`${String(v)}.`)))
    .map(([k, v]) => field(k, v))
    .flatMap(([k, v]) => (v === undefined ? [] : [`${dim(`${k}=`, color)}${v}`]));
  const line = [head, ...kv].join(' ');
  return typeof command === 'string' ? `${line}\n  ${dim('try:', color)} ${command}` : line;
}
