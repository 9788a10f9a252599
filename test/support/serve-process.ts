// `llmgw serve` as a real process for tests: a config written to a fresh directory, the process
// started with free ports, a bounded wait for its ready line, and a stop that never outlives itself.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { freePort, waitFor } from './wait.js';

const main = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));

/** Ports a config is written with: the gateway's, and the node's engine and KV-event bases. */
export interface ServePorts {
  readonly port: number;
  readonly http: number;
  readonly kv: number;
}

/** A running `llmgw serve`. */
export interface ServeProcess {
  readonly port: number;
  /** What it printed so far on stdout and stderr. */
  out(): string;
  err(): string;
  /** SIGTERM, then its exit code; rejects if it has not exited within `timeoutMs`. */
  stop(timeoutMs?: number): Promise<number | null>;
}

// Races `p` against a timer that is cleared when `p` settles: a timer left pending holds the test
// file's process open for its whole length after the tests are done.
async function bounded<T>(p: Promise<T>, ms: number, onLate: () => T | Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<T>((resolve, reject) => {
    timer = setTimeout(() => {
      Promise.resolve().then(onLate).then(resolve, reject);
    }, ms);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Starts `llmgw serve --config` with the YAML `config` builds from free ports; waits for "llmgw ready". */
export async function startServe(t: TestContext, config: (ports: ServePorts) => string): Promise<ServeProcess> {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-serve-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const ports: ServePorts = { port: await freePort(), http: await freePort(), kv: await freePort() };
  writeFileSync(join(dir, 'llmgw.yaml'), config(ports));
  const child = spawn(process.execPath, [main, 'serve', '--config', join(dir, 'llmgw.yaml')], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = once(child, 'exit');
  const running = (): boolean => child.exitCode === null && child.signalCode === null;
  t.after(async () => {
    if (!running()) return;
    child.kill('SIGTERM');
    await bounded(exited, 20_000, () => []);
    if (running()) child.kill('SIGKILL');
  });
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
  await waitFor(() => out.includes('llmgw ready'), { timeoutMs: 60_000, what: `serve to print it is ready (stderr: ${err.slice(-500)})` });
  return {
    port: ports.port,
    out: () => out,
    err: () => err,
    stop: async (timeoutMs = 30_000) => {
      child.kill('SIGTERM');
      const [code] = await bounded(exited, timeoutMs, () => {
        throw new Error(`serve did not stop within ${timeoutMs} ms: ${err.slice(-800)}`);
      });
      return typeof code === 'number' ? code : null;
    },
  };
}
