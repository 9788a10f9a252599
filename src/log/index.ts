// Logging through pino: one JSON line per event on stderr when piped (`msg` a fixed event name,
// values as fields, so one event is one grep and jq reads the rest), the same fields as coloured
// key=value lines on a terminal (pretty.ts). Secrets never reach a line: keys that name one are
// redacted, in bound fields and logged ones alike.
import { writeSync } from 'node:fs';
import { Writable } from 'node:stream';
import { pino, type DestinationStream, type Logger as Pino } from 'pino';
import { prettyLine } from './pretty.js';
import { stderrLines } from './stderr-lines.js';

export { loggedEvents } from './events.js';

/** Severity: error needs an operator, warn is degraded but serving, info is lifecycle, debug is for us. */
export type Level = 'debug' | 'info' | 'warn' | 'error';

/** Where lines go; a test passes an array's push to read them. */
export type Sink = (line: string) => void;

/** How lines look: JSON for machines, coloured text for a person at a terminal. */
export type LogFormat = 'json' | 'pretty';

/** A structured logger; `child` binds fields (replica, shard, engine, reqId) to every line. */
export interface Logger {
  debug(fields: Record<string, unknown>, msg: string): void;
  info(fields: Record<string, unknown>, msg: string): void;
  warn(fields: Record<string, unknown>, msg: string): void;
  error(fields: Record<string, unknown>, msg: string): void;
  child(bound: Record<string, unknown>): Logger;
}

const secretKey = /^(authorization|api[_-]?key|apiKey|password|secret|token)$/i;

// An error as name, message and code, and its cause the same way: the detail a client is not told
// (an engine's malformed bytes) is in the cause, and the operator needs it.
function errorFields(v: Error): Record<string, unknown> {
  const cause = v.cause instanceof Error ? errorFields(v.cause) : undefined;
  return { name: v.name, message: v.message, code: 'code' in v ? v.code : undefined, ...(cause === undefined ? {} : { cause }) };
}

function redact(fields: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(fields)) {
    if (secretKey.test(k)) out[k] = '[redacted]';
    else if (v instanceof Error) out[k] = errorFields(v);
    else if (typeof v === 'bigint') out[k] = v.toString();
    else out[k] = v;
  }
  return out;
}

/** A writable handing each line, without its newline, to `sink`. */
function sinkStream(sink: Sink): Writable {
  return new Writable({
    write(chunk: Buffer | string, _enc, done) {
      for (const line of String(chunk).split('\n')) if (line !== '') sink(line);
      done();
    },
  });
}

/**
 * The format of stderr's log: LLMGW_LOG_FORMAT when set (JSON lines on a terminal, for jq; or
 * pretty lines into a file someone tails), else pretty on a terminal and JSON lines otherwise.
 */
export function logFormatOf(setting: string | undefined, terminal: boolean): LogFormat {
  if (setting === undefined || setting === '') return terminal ? 'pretty' : 'json';
  if (setting === 'json' || setting === 'pretty') return setting;
  throw new Error(`LLMGW_LOG_FORMAT is "${setting}"; it is json or pretty (or unset: pretty on a terminal, json otherwise)`);
}

/**
 * A logger writing lines at or above `level` to `sink` (stderr by default). `format` defaults to
 * stderr's (logFormatOf) when nothing else was given, JSON into a sink; pretty lines are coloured
 * on a terminal unless `color` says otherwise.
 */
export function createLogger(
  o: { level?: Level; sink?: Sink; bound?: Record<string, unknown>; now?: () => number; format?: LogFormat; color?: boolean } = {},
): Logger {
  const now = o.now ?? Date.now;
  const terminal = o.sink === undefined && process.stderr.isTTY === true;
  const format = o.format ?? (o.sink === undefined ? logFormatOf(process.env.LLMGW_LOG_FORMAT, terminal) : 'json');
  let destination: DestinationStream;
  if (format === 'pretty') {
    // Written as it happens: a line still in a buffer when the process dies is the line you needed.
    const out = o.sink ?? ((line: string) => writeSync(2, `${line}\n`));
    destination = sinkStream((line) => out(prettyLine(JSON.parse(line) as Record<string, unknown>, o.color ?? terminal)));
  } else {
    destination = o.sink === undefined ? stderrLines() : sinkStream(o.sink);
  }
  const logger = pino(
    {
      level: o.level ?? 'info',
      // No pid or hostname: the agent's own fields say which process and node wrote a line.
      base: undefined,
      timestamp: () => `,"time":"${new Date(now()).toISOString()}"`,
      // Errors are written by `redact` as name, message and code, under any key, as before pino.
      serializers: { err: (v: unknown) => v },
      formatters: {
        level: (label) => ({ level: label }),
        log: (f) => redact(f),
      },
    },
    destination,
  );
  return wrap(o.bound === undefined ? logger : logger.child(redact(o.bound)));
}

// pino formats bound fields once, without the log formatter: they are redacted on the way in.
function wrap(p: Pino): Logger {
  return {
    debug: (f, m) => p.debug(f, m),
    info: (f, m) => p.info(f, m),
    warn: (f, m) => p.warn(f, m),
    error: (f, m) => p.error(f, m),
    child: (bound) => wrap(p.child(redact(bound))),
  };
}

/**
 * One logger writing every event to each of `loggers`: serve's status events go to its log and, when
 * asked, to stdout as well, each event written once in the code.
 */
export function teeLogger(...loggers: readonly Logger[]): Logger {
  return {
    debug: (f, m) => loggers.forEach((l) => l.debug(f, m)),
    info: (f, m) => loggers.forEach((l) => l.info(f, m)),
    warn: (f, m) => loggers.forEach((l) => l.warn(f, m)),
    error: (f, m) => loggers.forEach((l) => l.error(f, m)),
    child: (bound) => teeLogger(...loggers.map((l) => l.child(bound))),
  };
}

/** A logger that drops everything: for tests and tools that print their own output. */
export const silentLogger: Logger = wrap(pino({ level: 'silent' }));
