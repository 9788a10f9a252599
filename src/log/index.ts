// One JSON line per event on stderr: `msg` is a fixed event name, values are fields, so one event is
// one grep and jq reads the rest. Secrets never reach a line: keys that name one are redacted.

/** Severity: error needs an operator, warn is degraded but serving, info is lifecycle, debug is for us. */
export type Level = 'debug' | 'info' | 'warn' | 'error';

const order: Readonly<Record<Level, number>> = { debug: 10, info: 20, warn: 30, error: 40 };

const secretKey = /^(authorization|api[_-]?key|apiKey|password|secret|token)$/i;

/** Where lines go; a test passes an array's push to read them. */
export type Sink = (line: string) => void;

/** A structured logger; `child` binds fields (replica, shard, engine, reqId) to every line. */
export interface Logger {
  debug(fields: Record<string, unknown>, msg: string): void;
  info(fields: Record<string, unknown>, msg: string): void;
  warn(fields: Record<string, unknown>, msg: string): void;
  error(fields: Record<string, unknown>, msg: string): void;
  child(bound: Record<string, unknown>): Logger;
}

function redact(fields: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(fields)) {
    if (secretKey.test(k)) out[k] = '[redacted]';
    else if (v instanceof Error) out[k] = { name: v.name, message: v.message, code: (v as { code?: unknown }).code };
    else if (typeof v === 'bigint') out[k] = v.toString();
    else out[k] = v;
  }
  return out;
}

/** A logger writing lines at or above `level` to `sink` (stderr by default). */
export function createLogger(
  o: { level?: Level; sink?: Sink; bound?: Record<string, unknown>; now?: () => number } = {},
): Logger {
  const min = order[o.level ?? 'info'];
  const sink = o.sink ?? ((line: string) => process.stderr.write(line + '\n'));
  const bound = o.bound ?? {};
  const now = o.now ?? Date.now;
  const write = (level: Level, fields: Record<string, unknown>, msg: string): void => {
    if (order[level] < min) return;
    sink(JSON.stringify({ time: new Date(now()).toISOString(), level, msg, ...redact(bound), ...redact(fields) }));
  };
  return {
    debug: (f, m) => write('debug', f, m),
    info: (f, m) => write('info', f, m),
    warn: (f, m) => write('warn', f, m),
    error: (f, m) => write('error', f, m),
    child: (more) => createLogger({ level: o.level ?? 'info', sink, bound: { ...bound, ...more }, now }),
  };
}

/** A logger that drops everything: for tests and tools that print their own output. */
export const silentLogger: Logger = createLogger({ sink: () => undefined });
