// `llmgw serve` as a real process for end-to-end tests: a config in a fresh directory on free ports,
// its output captured, stopped (then killed if it must be) when the test ends. What it says is read
// from its JSON log on stderr by event name (loggedEvent), as an operator's script would.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual } from 'node:util';
import { loggedEvents } from '../../src/log/index.js';
import { freePort, freePortRange, waitFor } from './wait.js';

/** The compiled command line. */
export const llmgwMain = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));

/** The first event named `msg` in a JSON log (a serve's or agent's stderr) whose fields hold `fields`' values. */
export function loggedEvent(log: string, msg: string, fields: Readonly<Record<string, unknown>> = {}): Record<string, unknown> | undefined {
  return loggedEvents(log, msg).find((e) => Object.entries(fields).every(([k, v]) => isDeepStrictEqual(e[k], v)));
}

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
  /** SIGKILL, as a crash: the engines it started keep running, for the next serve to adopt. */
  kill(): Promise<void>;
}

// Races `p` against a timer that is cleared when `p` settles: a timer left pending holds the test
// file's process open for its whole length after its tests have passed.
async function bounded<T>(p: Promise<T>, ms: number, onLate: () => T): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<T>((resolve, reject) => {
    timer = setTimeout(() => {
      try {
        resolve(onLate());
      } catch (e) {
        reject(e instanceof Error ? e : new Error(String(e)));
      }
    }, ms);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** A fresh directory (removed when the test ends) and free ports for a served config. */
export async function servePlaces(t: TestContext): Promise<ServePlaces> {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-serve-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return { dir, port: await freePort(), http: await freePortRange(8), kv: await freePortRange(8) };
}

/**
 * Starts `llmgw serve` on the config `yaml` writes (with `args` after it) and waits until it logs
 * serve.ready, or, with `until`, that event. `places` gives a second serve the first one's directory
 * and ports (an engine is adopted only where its spec, ports included, is unchanged).
 */
export async function startServe(
  t: TestContext,
  yaml: (p: ServePlaces) => string,
  o: { places?: ServePlaces; until?: string; args?: readonly string[] } = {},
): Promise<Served> {
  const places = o.places ?? (await servePlaces(t));
  const { dir } = places;
  const until = o.until ?? 'serve.ready';
  writeFileSync(join(dir, 'llmgw.yaml'), yaml(places));
  const child = spawn(process.execPath, [llmgwMain, 'serve', '--config', join(dir, 'llmgw.yaml'), ...(o.args ?? [])], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
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
  // The output is read when the wait ends, not when it began; a serve that exited fails at once.
  const withOutput = (why: string): Error => new Error(`${why}\nstdout: ${out.slice(-800)}\nstderr: ${err.slice(-1500)}`);
  try {
    await waitFor(() => loggedEvent(err, until) !== undefined || !running(), { timeoutMs: 60_000, what: `serve to log ${until}` });
  } catch (e) {
    throw withOutput(e instanceof Error ? e.message : String(e));
  }
  if (loggedEvent(err, until) === undefined) throw withOutput(`serve exited with ${String(child.exitCode ?? child.signalCode)} before it was ready`);
  return {
    ...places,
    out: () => out,
    err: () => err,
    stop: async () => {
      child.kill('SIGTERM');
      const [code] = await bounded(exited, 30_000, () => {
        throw new Error(`serve did not stop: ${err.slice(-800)}`);
      });
      return typeof code === 'number' ? code : null;
    },
    kill: async () => {
      child.kill('SIGKILL');
      await bounded(exited, 10_000, () => []);
    },
  };
}

/**
 * A config of `count` sim replicas of qwen3 with KV events on `places`: `profile` adds keys to the
 * profile's flow mapping, `args` adds sim flags, `gatewayExtra` lines under gateway:, `extra` top-level YAML.
 */
export function simConfig(
  p: ServePlaces,
  o: { count: number; profile?: string; args?: readonly string[]; gatewayExtra?: string; extra?: string },
): string {
  const args = ['--tokenizer', 'bytes', ...(o.args ?? [])].map((a) => JSON.stringify(a)).join(', ');
  return `engines:
  sim: { bin: "" }
kv_events: { hash_seed: "0", hash_algo: sha256_cbor }
node:
  name: local
  addr: 127.0.0.1
  devices: []
  ports: { http_base: ${p.http}, kv_events_base: ${p.kv} }
models:
  qwen3:
    served_model_name: qwen3
    profiles:
      - { name: sim-cpu, engine: sim, gpu_class: cpu, tp: 1, model_path: qwen3, kv_events: true, ${o.profile === undefined ? '' : `${o.profile}, `}args: [${args}] }
replicas:
  - { model: qwen3, profile: sim-cpu, count: ${o.count} }
gateway:
  host: 127.0.0.1
  port: ${p.port}
${o.gatewayExtra ?? ''}${o.extra ?? ''}`;
}
