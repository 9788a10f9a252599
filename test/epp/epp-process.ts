// `llmgw epp` as a real process for the EPP tests: a config written to a fresh directory, the
// process's JSON log read for its ports (epp.ready), stopped by SIGTERM when the test ends; and a
// gRPC health client asking what a kubelet's probe asks.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { protoPath as healthProto } from 'grpc-health-check';
import { llmgwMain, loggedEvent } from '../support/serve.js';
import { waitFor } from '../support/wait.js';

/** A running `llmgw epp`. */
export interface EppProcess {
  readonly extProcPort: number;
  readonly healthPort: number;
  readonly metricsPort: number;
  err(): string;
  /** SIGTERM, then the exit code (SIGKILL after 15 s). */
  stop(): Promise<number | null>;
}

/** Runs `llmgw epp --config` over `config` (YAML text) until the test ends; resolves once it listens. */
export async function startEppProcess(t: TestContext, config: string, env: NodeJS.ProcessEnv = process.env): Promise<EppProcess> {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-epp-proc-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'epp.yaml');
  writeFileSync(file, config);
  const proc = spawn(process.execPath, [llmgwMain, 'epp', '--config', file], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  proc.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
  const exited = once(proc, 'exit') as Promise<[number | null]>;
  let stopping: Promise<number | null> | undefined;
  const stop = (): Promise<number | null> =>
    (stopping ??= (async () => {
      if (proc.exitCode !== null || proc.signalCode !== null) return proc.exitCode;
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 15_000);
      const [code] = await exited;
      clearTimeout(timer);
      return code;
    })());
  t.after(stop);
  const ready = await waitFor(() => {
    if (proc.exitCode !== null) throw new Error(`llmgw epp exited ${proc.exitCode}: ${err}`);
    return loggedEvent(err, 'epp.ready');
  }, { timeoutMs: 60_000, what: 'llmgw epp listening' }).catch((e: unknown) => {
    throw new Error(`${e instanceof Error ? e.message : String(e)}\n${err}`, { cause: e });
  });
  return { extProcPort: Number(ready.extProcPort), healthPort: Number(ready.healthPort), metricsPort: Number(ready.metricsPort), err: () => err, stop };
}

/** Runs `llmgw epp --config` over `config` expecting it to refuse to start; resolves with its exit code and stderr. */
export async function failedEpp(t: TestContext, config: string, env: NodeJS.ProcessEnv = process.env): Promise<{ code: number | null; err: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-epp-proc-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'epp.yaml');
  writeFileSync(file, config);
  const proc = spawn(process.execPath, [llmgwMain, 'epp', '--config', file], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  proc.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
  const timer = setTimeout(() => proc.kill('SIGKILL'), 60_000);
  const [code] = (await once(proc, 'exit')) as [number | null];
  clearTimeout(timer);
  return { code, err };
}

/** The health status gRPC's Check answers for `service`. */
export type HealthCheck = (service: string) => Promise<string | undefined>;

/** A grpc.health.v1 client on `port`, closed when the test ends. */
export function healthClient(t: TestContext, port: number): HealthCheck {
  const def = loadSync(healthProto, { keepCase: true, enums: String });
  const pkg = grpc.loadPackageDefinition(def) as unknown as { grpc: { health: { v1: { Health: grpc.ServiceClientConstructor } } } };
  const h = new pkg.grpc.health.v1.Health(`127.0.0.1:${port}`, grpc.credentials.createInsecure()) as unknown as grpc.Client & {
    Check(r: unknown, o: { deadline: number }, cb: (e: Error | null, r?: { status: string }) => void): void;
  };
  t.after(() => h.close());
  return (service) => new Promise((resolve, reject) => h.Check({ service }, { deadline: Date.now() + 10_000 }, (e, r) => (e === null ? resolve(r?.status) : reject(e))));
}
