// `llmgw serve` as a real process for end-to-end tests: a config in a fresh directory on free ports,
// its output captured, stopped (then killed if it must be) when the test ends.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { freePort, waitFor } from './wait.js';

/** The compiled command line. */
export const llmgwMain = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));

/** Where a served config may put things: its directory and three free ports. */
export interface ServePlaces {
  readonly dir: string;
  readonly port: number;
  readonly http: number;
  readonly kv: number;
}

/** A running `llmgw serve`. */
export interface Served extends ServePlaces {
  out(): string;
  err(): string;
  /** SIGTERM, then the exit code; rejects if it does not stop within 30 s. */
  stop(): Promise<number | null>;
}

/** Starts `llmgw serve` on the config `yaml` writes and waits until it prints that it is ready. */
export async function startServe(t: TestContext, yaml: (p: ServePlaces) => string): Promise<Served> {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-serve-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const places = { dir, port: await freePort(), http: await freePort(), kv: await freePort() };
  writeFileSync(join(dir, 'llmgw.yaml'), yaml(places));
  const child = spawn(process.execPath, [llmgwMain, 'serve', '--config', join(dir, 'llmgw.yaml')], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = once(child, 'exit');
  const running = (): boolean => child.exitCode === null && child.signalCode === null;
  t.after(async () => {
    if (!running()) return;
    child.kill('SIGTERM');
    await Promise.race([exited, new Promise((r) => setTimeout(r, 20_000))]);
    if (running()) child.kill('SIGKILL');
  });
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
  await waitFor(() => out.includes('llmgw ready'), { timeoutMs: 60_000, what: `serve to print it is ready (stderr: ${err.slice(-500)})` });
  return {
    ...places,
    out: () => out,
    err: () => err,
    stop: async () => {
      child.kill('SIGTERM');
      const [code] = await Promise.race([exited, new Promise<[null]>((_, reject) => setTimeout(() => reject(new Error(`serve did not stop: ${err.slice(-800)}`)), 30_000))]);
      return code;
    },
  };
}
