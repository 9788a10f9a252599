// The operating-system edge of the supervisor: spawning Commands, signalling process groups, asking
// whether a process is still the one we started, reading a log's tail, probing ports and health.
// The machines call these only from inside their actors.
import { closeSync, copyFileSync, fstatSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, renameSync, statSync, truncateSync } from 'node:fs';
import { connect } from 'node:net';
import { dirname } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { execa } from 'execa';
import { request } from 'undici';
import type { Command } from '../engines/index.js';
import { withDeadline } from '../limits/index.js';

/** One running process of a shard, as recorded for adoption: plain data. */
export interface ProcessRecord {
  readonly name: string;
  readonly pid: number;
  /** Kernel start time (clock ticks since boot): tells our process from a later one given the same pid. */
  readonly startTime: number;
}

/** How a process ended, in words an operator reads in `failed`. */
export interface ProcessExit {
  readonly name: string;
  readonly pid: number;
  readonly exitCode: number | undefined;
  readonly signal: string | undefined;
  /** What died and how, short enough for a table: `vllm exited with code 1`, `vllm was killed by SIGKILL`. */
  readonly message: string;
  /** The whole story for the details view: the command line run, the error as execa told it. */
  readonly detail: string;
}

/** A process's end in an operator's words: by signal, by exit code, or it never started. */
export function exitWords(name: string, r: { exitCode?: number | undefined; signal?: string | undefined; originalMessage?: string | undefined }): string {
  if (r.signal !== undefined) return `${name} was killed by ${r.signal}`;
  if (r.exitCode !== undefined) return `${name} exited with code ${r.exitCode}`;
  return `${name} could not start: ${r.originalMessage ?? 'no exit code or signal reported'}`;
}

/** A spawned process: its record and the promise of its end (never rejects). */
export interface Spawned {
  readonly record: ProcessRecord;
  readonly exited: Promise<ProcessExit>;
}

/** Opens (creating its folder) a log file for appending; the caller closes the descriptor. */
export function openLog(path: string): number {
  mkdirSync(dirname(path), { recursive: true });
  return openSync(path, 'a');
}

/**
 * Rotates a shard's log once it is past `maxBytes`: .1 to .2 and so on up to `keep`, the log copied
 * to .1, then emptied in place. Copy-and-truncate, not rename, because the engine holds the file
 * open (O_APPEND, its own descriptor, kept across agent restarts) and would go on writing to the
 * renamed file; with O_APPEND its next line lands at the start of the emptied one. Lines written
 * between the copy and the truncate are lost: a few at most, for logs that otherwise grew forever.
 * Returns whether it rotated; a log that does not exist yet is left alone.
 */
export function rotateLog(path: string, o: { maxBytes: number; keep: number }): boolean {
  let size: number;
  try {
    size = statSync(path).size;
  } catch {
    return false; // no log yet: the shard has not started
  }
  if (o.maxBytes <= 0 || size <= o.maxBytes) return false;
  for (let i = o.keep - 1; i >= 1; i--) {
    try {
      renameSync(`${path}.${i}`, `${path}.${i + 1}`);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e; // fewer copies than keep so far
    }
  }
  copyFileSync(path, `${path}.1`);
  truncateSync(path, 0);
  return true;
}

/** The start time field of /proc/<pid>/stat, or undefined when the process is gone or a zombie. */
export function startTimeOf(pid: number): number | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
  } catch {
    return undefined; // no such process: it ended
  }
  // The command name is in parentheses and may hold spaces: fields are counted after the last ')'.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  if (fields[0] === 'Z' || fields[0] === 'X') return undefined;
  const start = Number(fields[19]);
  return Number.isFinite(start) ? start : undefined;
}

/** Whether this exact process (same pid and start time) still runs. */
export function isAlive(p: ProcessRecord): boolean {
  return startTimeOf(p.pid) === p.startTime;
}

/**
 * Spawns one Command in its own process group with exactly its environment (what `llmgw plan`
 * prints is what runs), stdout and stderr appended to the log descriptor. The engine writes to the
 * file itself, not through a pipe of ours, so it keeps running and logging when the agent dies and a
 * new agent adopts it.
 */
export function spawnCommand(cmd: Command, logFd: number): Spawned {
  // execa's types list descriptors 3 to 9 only, but any open descriptor is handed to spawn() as is
  // (execa lib/stdio/native.js); a file or stream option instead would pipe through this process.
  const fd = logFd as 3;
  const child = execa(cmd.path, [...cmd.args], {
    env: Object.fromEntries(cmd.env),
    extendEnv: false,
    detached: true,
    // The agent decides when an engine dies: execa's exit hook would kill engines a restarted agent should adopt.
    cleanup: false,
    stdin: 'ignore',
    stdout: fd,
    stderr: fd,
    reject: false,
    buffer: false,
  });
  const pid = child.pid;
  const exited = child.then(
    (r): ProcessExit => ({
      name: cmd.name,
      pid: pid ?? -1,
      exitCode: r.exitCode,
      signal: r.signal,
      message: exitWords(cmd.name, r),
      detail: r.shortMessage ?? `${exitWords(cmd.name, r)}: ${r.escapedCommand}`,
    }),
    (e: unknown): ProcessExit => {
      const message = `${cmd.name} could not start: ${e instanceof Error ? e.message : String(e)}`;
      return { name: cmd.name, pid: pid ?? -1, exitCode: undefined, signal: undefined, message, detail: message };
    },
  );
  const startTime = pid === undefined ? undefined : startTimeOf(pid);
  return { record: { name: cmd.name, pid: pid ?? -1, startTime: startTime ?? -1 }, exited };
}

// Lines an engine writes when it gives up: llama.cpp marks them " E ", Python tracebacks and C++
// aborts name themselves.
const errorLine = /\b(error|failed|fatal|panic|exception|traceback|abort(ed)?)\b|\sE\s/i;
const REASON_LINE_CHARS = 100;

/**
 * Why a process ended, short enough for a table cell: the exit, then one line in the engine's own
 * words, its last error line (or its last line, when none looks like one). "exited with code 1"
 * alone sends the operator to the log; "failed to load model '/models/x.gguf'" says what to fix.
 * The command line and the rest of the log are the reason's detail and tail, one step away.
 */
export function exitReason(message: string, tail: readonly string[]): string {
  const lines = tail.map((l) => l.trim()).filter((l) => l !== '');
  const line = lines.findLast((l) => errorLine.test(l)) ?? lines.at(-1);
  if (line === undefined) return message;
  return `${message}: ${line.length > REASON_LINE_CHARS ? `${line.slice(0, REASON_LINE_CHARS - 1)}…` : line}`;
}

/** Sends `signal` to the process group led by `pid`; false when nothing is left to signal. */
export function signalGroup(pid: number, signal: NodeJS.Signals | 0): boolean {
  if (pid <= 0) return false;
  try {
    process.kill(-pid, signal);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ESRCH') return false; // the group is empty: done
    throw e;
  }
}

/** Whether any member of the group led by `pid` is still running (zombies awaiting reaping do not count). */
export function groupAlive(p: ProcessRecord): boolean {
  if (!signalGroup(p.pid, 0)) return false;
  // The leader may be a zombie nobody has reaped yet while the group is otherwise empty.
  return isAlive(p) || groupHasLiveMember(p.pid);
}

function groupHasLiveMember(pgid: number): boolean {
  let names: string[];
  try {
    names = readdirNumeric('/proc');
  } catch {
    return true; // no /proc: trust kill(0), which said someone is there
  }
  for (const name of names) {
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'latin1');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[2]) === pgid && fields[0] !== 'Z' && fields[0] !== 'X') return true;
    } catch {
      continue; // it ended while we looked
    }
  }
  return false;
}

function readdirNumeric(dir: string): string[] {
  return readdirSync(dir).filter((n) => /^\d+$/.test(n));
}

/** Sends `sig` to every group still running and resolves once all of them are gone; polls, bounded by `signal`. */
export async function signalAndWait(
  procs: readonly ProcessRecord[],
  sig: NodeJS.Signals,
  o: { signal: AbortSignal; pollMs?: number },
): Promise<void> {
  for (const p of procs) if (groupAlive(p)) signalGroup(p.pid, sig);
  while (procs.some(groupAlive)) await sleep(o.pollMs ?? 50, undefined, { signal: o.signal });
}

/** The last `lines` lines of a log file (reading at most its last 64 KiB), for a failure report. */
export function readTail(path: string, lines: number): string[] {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch {
    return []; // no log yet: the process never started
  }
  try {
    const size = fstatSync(fd).size;
    const len = Math.min(size, 65_536);
    const buf = Buffer.alloc(len);
    readSync(fd, buf, 0, len, size - len);
    const all = buf.toString('utf8').split('\n');
    if (all.at(-1) === '') all.pop();
    return all.slice(-lines);
  } finally {
    closeSync(fd);
  }
}

/** Resolves once host:port accepts a TCP connection; retries until `signal` aborts. */
export async function waitForTcp(host: string, port: number, o: { signal: AbortSignal; intervalMs?: number }): Promise<void> {
  for (;;) {
    o.signal.throwIfAborted();
    const ok = await new Promise<boolean>((resolve) => {
      const sock = connect({ host, port });
      const done = (v: boolean): void => {
        sock.destroy();
        o.signal.removeEventListener('abort', onAbort);
        resolve(v);
      };
      const onAbort = (): void => done(false);
      o.signal.addEventListener('abort', onAbort, { once: true });
      sock.once('connect', () => done(true));
      sock.once('error', () => done(false));
    });
    if (ok) return;
    await sleep(o.intervalMs ?? 200, undefined, { signal: o.signal });
  }
}

/** One health probe: the HTTP status, or undefined when nothing answered (not listening yet, reset). */
export async function probeOnce(url: string, o: { signal: AbortSignal; timeoutMs: number }): Promise<number | undefined> {
  o.signal.throwIfAborted();
  try {
    // One explicit timer (withDeadline), not AbortSignal.any with AbortSignal.timeout: on Node 20 a
    // full GC could drop that timeout, and a SIGSTOPped engine then stayed ready forever.
    return await withDeadline(o.signal, o.timeoutMs, `health probe ${url}`, async (signal) => {
      const res = await request(url, { method: 'GET', signal });
      await res.body.dump();
      return res.statusCode;
    });
  } catch (e) {
    if (o.signal.aborted) throw e;
    return undefined; // connection refused or timed out: the server is not up yet
  }
}

/** Runs a short-lived command (a device listing) with exactly its environment; returns its combined output. */
export async function runForOutput(cmd: Command, o: { signal: AbortSignal; timeoutMs: number }): Promise<string> {
  const r = await execa(cmd.path, [...cmd.args], {
    env: Object.fromEntries(cmd.env),
    extendEnv: false,
    stdin: 'ignore',
    all: true,
    reject: false,
    cancelSignal: o.signal,
    timeout: o.timeoutMs,
  });
  if (r.failed) throw new Error(`${cmd.name}: ${r.shortMessage}: ${(r.all ?? '').trim().slice(0, 500)}`);
  return r.all ?? '';
}
