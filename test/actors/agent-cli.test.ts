// `llmgw agent` as an operator runs it: engines from a config file, a first signal drains and stops
// everything and exits 0, a second signal does not wait for graceful exits.
import * as assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import type { ShardRecord } from '../../src/actors/index.js';
import { isAlive } from '../../src/actors/processes.js';
import { freePort, waitFor } from '../support/wait.js';
import { llmgwMain } from './scripted.js';

async function configIn(t: TestContext): Promise<{ dir: string; file: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-agent-cli-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'llmgw.yaml');
  writeFileSync(
    file,
    `node:
  name: local
  addr: 127.0.0.1
  devices: []
  ports: { http_base: ${await freePort()}, kv_events_base: ${await freePort()} }
models:
  m:
    served_model_name: m
    profiles:
      - { name: sim-cpu, engine: sim, gpu_class: cpu, tp: 1, model_path: m, kv_events: true, args: [--tokenizer, bytes] }
replicas:
  - { model: m, profile: sim-cpu, count: 1 }
agent:
  state_dir: ${join(dir, 'state')}
  log_dir: ${join(dir, 'logs')}
  kill_after_ms: 60000
`,
  );
  return { dir, file };
}

function start(t: TestContext, file: string) {
  const child = spawn(process.execPath, [llmgwMain, 'agent', '--config', file], { stdio: ['ignore', 'ignore', 'pipe'] });
  t.after(() => child.kill('SIGKILL'));
  let err = '';
  child.stderr.on('data', (b: Buffer) => (err += b.toString()));
  return { child, log: () => err };
}

const recordsIn = (dir: string): ShardRecord[] =>
  readdirSync(join(dir, 'state'))
    .filter((n) => n.endsWith('.json'))
    .map((n) => JSON.parse(readFileSync(join(dir, 'state', n), 'utf8')) as ShardRecord);

void test('llmgw agent: SIGTERM drains and stops every engine, removes their records and exits 0', async (t) => {
  const { dir, file } = await configIn(t);
  const { child, log } = start(t, file);
  await waitFor(() => log().includes('"to":"ready"'), { what: 'the sim shard ready', timeoutMs: 30_000 });
  const procs = recordsIn(dir).flatMap((r) => r.processes);
  assert.equal(procs.length, 1);
  child.kill('SIGTERM');
  const [code] = (await once(child, 'exit')) as [number | null];
  assert.equal(code, 0);
  assert.ok(procs.every((p) => !isAlive(p)), 'no engine outlives the agent');
  assert.deepEqual(recordsIn(dir), []);
  assert.match(log(), /agent\.draining/);
});

void test('llmgw agent: a second signal stops at once instead of waiting kill_after_ms', async (t) => {
  const { dir, file } = await configIn(t);
  const { child, log } = start(t, file);
  await waitFor(() => log().includes('"to":"ready"'), { what: 'the sim shard ready', timeoutMs: 30_000 });
  const procs = recordsIn(dir).flatMap((r) => r.processes);
  // Stop the engine from answering SIGTERM, so only the second signal's SIGKILL can end it.
  for (const p of procs) process.kill(p.pid, 'SIGSTOP');
  child.kill('SIGINT');
  await waitFor(() => log().includes('"to":"stopping"'), { what: 'the shard stopping' });
  child.kill('SIGINT');
  const [code] = (await once(child, 'exit')) as [number | null];
  assert.equal(code, 0);
  assert.match(log(), /agent\.stopping_now/);
  assert.ok(procs.every((p) => !isAlive(p)));
});
