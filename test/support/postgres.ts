// A real PostgreSQL for tests: initdb into a temporary directory and pg_ctl on a free port of
// 127.0.0.1, never a mock. PostgreSQL refuses to run as root, so as root (CI containers) its
// commands run as the `postgres` user through runuser; as anyone else they run as that user.
import { execFileSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './wait.js';

/** A running test database server. */
export interface TestPostgres {
  /** A fresh database's URL each call (so tests do not see each other's rows). */
  database(): string;
  /** Stops the server at once, as a crash would (the database is "down"). */
  stop(): void;
  /** Starts it again on the same port and data. */
  start(): void;
  /** Stops it and removes its files. */
  close(): void;
}

const binDirs = ['/usr/lib/postgresql/17/bin', '/usr/lib/postgresql/16/bin', '/usr/lib/postgresql/15/bin'];

/** The directory holding initdb and pg_ctl, or undefined when PostgreSQL is not installed. */
export function postgresBin(): string | undefined {
  return binDirs.find((d) => existsSync(join(d, 'pg_ctl')));
}

/** Starts a server; throws naming the package when PostgreSQL is not installed. */
export async function startPostgres(): Promise<TestPostgres> {
  const bin = postgresBin();
  if (bin === undefined) throw new Error(`PostgreSQL is not installed (looked in ${binDirs.join(', ')}); apt-get install postgresql`);
  const root = process.getuid?.() === 0;
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-pg-'));
  if (root) {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    chownSync(dir, uid, gid);
  }
  const run = (cmd: string, args: readonly string[]): void => {
    const full = join(bin, cmd);
    if (root) execFileSync('runuser', ['-u', 'postgres', '--', full, ...args], { stdio: 'pipe', timeout: 60_000 });
    else execFileSync(full, [...args], { stdio: 'pipe', timeout: 60_000 });
  };
  const port = await freePort();
  const data = join(dir, 'data');
  run('initdb', ['-D', data, '-A', 'trust', '-U', 'llmgw', '--no-sync', '-E', 'UTF8']);
  const start = (): void => run('pg_ctl', ['-D', data, '-o', `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1`, '-l', join(dir, 'log'), '-w', '-t', '30', 'start']);
  const stop = (): void => run('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']);
  start();
  let n = 0;
  return {
    database: () => {
      const name = `t${++n}`;
      run('createdb', ['-h', '127.0.0.1', '-p', String(port), '-U', 'llmgw', name]);
      return `postgres://llmgw@127.0.0.1:${port}/${name}`;
    },
    stop,
    start,
    close: () => {
      try {
        stop();
      } catch {
        // Already stopped (a test left it down): the files go either way.
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
