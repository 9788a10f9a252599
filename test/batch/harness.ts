// What the batch tests share: a gateway with a store and the Batch API in a child process (so a
// test can kill -9 it), the openai SDK pointed at it, and JSONL input files.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { hashApiKey } from '../../src/gateway/index.js';

/** The client key of the child's gateway (an admin key from gateway.api_keys, with no limits). */
export const key = 'sk-batch-test';

const childPath = join(dirname(fileURLToPath(import.meta.url)), 'batch-child.js');

/** The child's settings beyond its database and engine (batch-child.ts reads them). */
export interface ChildOptions {
  /** The gateway.batch section, in YAML's snake_case. */
  readonly batch?: Record<string, unknown>;
}

/** Starts batch-child.ts on the SQLite file `path` (its directory is the child's state dir), its one replica the engine at `engine`. */
export async function startChild(path: string, engine: { readonly url: URL }, o: ChildOptions = {}): Promise<{ proc: ChildProcess; url: URL }> {
  const proc = spawn(process.execPath, [childPath, JSON.stringify({ path, engine: engine.url.href, sha256: hashApiKey(key), ...o })], { stdio: ['ignore', 'pipe', 'inherit'] });
  const [line] = (await Promise.race([
    once(proc.stdout as NodeJS.ReadableStream, 'data', { signal: AbortSignal.timeout(20_000) }),
    once(proc, 'exit').then(() => {
      throw new Error('the batch gateway child exited before it listened');
    }),
  ])) as [Buffer];
  return { proc, url: new URL(line.toString('utf8').trim()) };
}

/** Signals the child and waits for it to exit. */
export function stop(proc: ChildProcess, signal: NodeJS.Signals): Promise<unknown> {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve();
  const exited = once(proc, 'exit');
  proc.kill(signal);
  return exited;
}

/** `n` chat lines, custom_id req-<i>, each prompt naming its line ("line <i>"). */
export const jsonl = (n: number, o: { model?: string } = {}): string =>
  Array.from({ length: n }, (_, i) => JSON.stringify({ custom_id: `req-${i}`, method: 'POST', url: '/v1/chat/completions', body: { model: o.model ?? 'm', max_tokens: 4, messages: [{ role: 'user', content: `line ${i}` }] } })).join('\n');

/** The SDK at the child's gateway, with `apiKey` (default: the admin key). */
export const client = (url: URL, apiKey = key): OpenAI => new OpenAI({ apiKey, baseURL: new URL('/v1', url).href, maxRetries: 0, timeout: 20_000 });

/** Polls `f` every 50 ms until `ok`, or throws after `timeoutMs` with the last value. */
export async function until<T>(f: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = 60_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await f();
    if (ok(v)) return v;
    if (Date.now() > end) throw new Error(`condition not met within ${timeoutMs} ms: ${JSON.stringify(v).slice(0, 400)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A fresh directory for one test's database, removed after it; answers the database's path. */
export function setup(t: { after: (f: () => unknown) => void }): string {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-batch-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return join(dir, 'llmgw.db');
}
