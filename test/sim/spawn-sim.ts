// Starts `llmgw sim serve` as a real child process for tests, and makes sure it ends with the test.
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { freePort, waitFor } from '../support/wait.js';

const mainJs = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));

/** Starts `llmgw sim serve` and registers its end; resolves with its URL once /health is 200. */
export async function spawnSim(
  t: { after(fn: () => Promise<void>): void },
  args: readonly string[],
  env: Record<string, string> = {},
  o: { waitHealthy?: boolean } = {},
): Promise<{ url: string; child: ChildProcess; stderr: string[] }> {
  const port = await freePort();
  const child = spawn(process.execPath, [mainJs, 'sim', 'serve', ...args, '--host', '127.0.0.1', '--port', String(port)], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const stderr: string[] = [];
  child.stderr?.setEncoding('utf8').on('data', (d: string) => stderr.push(d));
  t.after(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, 'exit');
    child.kill('SIGTERM');
    const done = await Promise.race([exited.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 5000).unref())]);
    if (!done) {
      child.kill('SIGKILL');
      await exited;
    }
  });
  const url = `http://127.0.0.1:${port}`;
  if (o.waitHealthy !== false) {
    await waitFor(
      async () => {
        if (child.exitCode !== null) throw new Error(`sim exited ${child.exitCode}: ${stderr.join('')}`);
        return (await fetch(`${url}/health`, { signal: AbortSignal.timeout(1000) })).status === 200;
      },
      { what: 'llmgw sim to be healthy', timeoutMs: 30_000, intervalMs: 50 },
    );
  }
  return { url, child, stderr };
}

