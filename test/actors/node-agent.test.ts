// The node agent with real processes: replicas from plans, ready directory, desired-set changes,
// adoption of engines a killed agent left running, and a clean stop that leaves nothing behind.
import * as assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { NodeAgent, type ReplicaPlan, type ShardRecord } from '../../src/actors/index.js';
import type { ReplicaDirectory } from '../../src/routing/index.js';
import { isAlive } from '../../src/actors/processes.js';
import { freePort, waitFor } from '../support/wait.js';
import { agentConfig, scriptedEngine, scriptedPlan } from './scripted.js';

function tmp(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-agent-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function agentIn(t: TestContext, dir: string): NodeAgent {
  const agent = new NodeAgent({
    node: 'local',
    advertiseAddr: '127.0.0.1',
    config: agentConfig(dir),
    engines: { get: () => scriptedEngine },
    host: { env: process.env, cpus: 1 },
  });
  t.after(async () => {
    agent.stopNow();
    await agent.close();
  });
  return agent;
}

function records(dir: string): ShardRecord[] {
  const d = join(dir, 'state');
  return readdirSync(d)
    .filter((n) => n.endsWith('.json'))
    .map((n) => JSON.parse(readFileSync(join(d, n), 'utf8')) as ShardRecord);
}

const pidsOf = (dir: string, shardId: string): number[] => records(dir).find((r) => r.shard.spec.shardId === shardId)?.processes.map((p) => p.pid) ?? [];

void test('agent: replicas from plans become ready in the directory with their URL and a random API key each', async (t) => {
  const dir = tmp(t);
  const agent = agentIn(t, dir);
  // The gateway declares what it needs; the agent satisfies it without importing it.
  const directory: ReplicaDirectory = agent;
  const [p1, p2] = [await freePort(), await freePort()];
  let changes = 0;
  agent.onChange(() => changes++);
  agent.start([scriptedPlan('a', p1), scriptedPlan('b', p2)]);
  const ready = await waitFor(() => (directory.ready('scripted').length === 2 ? agent.ready('scripted') : undefined), { what: 'two ready replicas' });
  assert.deepEqual(ready.map((r) => r.url.href).sort(), [`http://127.0.0.1:${p1}/`, `http://127.0.0.1:${p2}/`].sort());
  const keys = ready.map((r) => r.apiKey ?? '');
  assert.ok(keys.every((k) => k.length >= 32), 'every replica has a random key');
  assert.notEqual(keys[0], keys[1]);
  assert.ok(changes >= 2);
  assert.deepEqual(agent.models(), ['scripted']);
  assert.ok(agent.tail('a-s0').includes('api key present'), 'the key reached the engine through its environment');
  assert.equal(records(dir).length, 2, 'each running shard is recorded for adoption');
  assert.equal(agent.phaseOf('replica:a'), 'ready');

  // Removing a replica from the desired set drains it; its record goes with it.
  agent.setDesired([scriptedPlan('b', p2)]);
  await waitFor(() => agent.phaseOf('replica:a') === 'stopped', { what: 'replica a stopped' });
  assert.deepEqual(agent.ready('scripted').map((r) => r.id), ['b']);
  assert.deepEqual(records(dir).map((r) => r.shard.spec.shardId), ['b-s0']);

  // A changed spec drains the running replica and starts the new one on the same port.
  const before = pidsOf(dir, 'b-s0');
  const old = records(dir).find((r) => r.shard.spec.shardId === 'b-s0')?.processes[0];
  if (old === undefined) throw new Error('no record of b-s0');
  agent.setDesired([scriptedPlan('b', p2, ['--loading-ms', '100'])]);
  await waitFor(() => {
    const now = pidsOf(dir, 'b-s0');
    return now.length > 0 && now[0] !== before[0] && agent.ready('scripted').length === 1;
  }, { what: 'replica b restarted with its new spec' });
  assert.ok(!isAlive(old), 'the engine of the old spec was stopped');

  const last = records(dir).flatMap((r) => r.processes);
  await agent.close();
  assert.deepEqual(records(dir), [], 'a clean stop leaves nothing to adopt');
  assert.ok(last.every((p) => !isAlive(p)), 'every engine is gone after close');
});

void test('agent: a restarted agent adopts the engines a killed agent left running, without restarting them', async (t) => {
  const dir = tmp(t);
  const plans: ReplicaPlan[] = [scriptedPlan('a', await freePort()), scriptedPlan('b', await freePort())];
  const child = spawn(process.execPath, [fileURLToPath(new URL('./agent-child.js', import.meta.url)), JSON.stringify({ dir, plans })], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  t.after(() => child.kill('SIGKILL'));
  let out = '';
  child.stdout.on('data', (b: Buffer) => (out += b.toString()));
  await waitFor(() => out.includes('ready'), { what: 'the first agent reporting ready', timeoutMs: 20_000 });
  const started = records(dir).flatMap((r) => r.processes);
  assert.equal(started.length, 2);
  child.kill('SIGKILL');
  await once(child, 'exit');
  assert.ok(started.every(isAlive), 'the engines outlive their killed agent');

  const agent = agentIn(t, dir);
  const seen = new Set<string>();
  agent.onChange(() => undefined);
  const phases: string[] = [];
  const poll = setInterval(() => {
    const p = agent.phaseOf('shard:a-s0');
    if (p !== undefined && phases.at(-1) !== p) phases.push(p);
    for (const r of agent.ready('scripted')) seen.add(r.id);
  }, 5);
  t.after(() => clearInterval(poll));
  agent.start(plans);
  await waitFor(() => agent.ready('scripted').length === 2, { what: 'both replicas adopted and ready' });
  clearInterval(poll);
  const now = records(dir).flatMap((r) => r.processes);
  assert.deepEqual(now.map((p) => p.pid).sort(), started.map((p) => p.pid).sort(), 'the same processes, not restarted ones');
  assert.ok(!phases.includes('starting') && !phases.includes('loading'), `adopted, never started: ${phases.join(' > ')}`);
  assert.ok(records(dir).every((r) => r.shard.spec.apiKey !== ''), 'the adopted engines keep their keys');

  await agent.close();
  assert.ok(started.every((p) => !isAlive(p)));
});

void test('agent: an engine left running under a spec that changed meanwhile is drained and started again', async (t) => {
  const dir = tmp(t);
  const port = await freePort();
  const child = spawn(process.execPath, [fileURLToPath(new URL('./agent-child.js', import.meta.url)), JSON.stringify({ dir, plans: [scriptedPlan('a', port)] })], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  t.after(() => child.kill('SIGKILL'));
  let out = '';
  child.stdout.on('data', (b: Buffer) => (out += b.toString()));
  await waitFor(() => out.includes('ready'), { what: 'the first agent reporting ready', timeoutMs: 20_000 });
  const [old] = records(dir).flatMap((r) => r.processes);
  if (old === undefined) throw new Error('no recorded process');
  child.kill('SIGKILL');
  await once(child, 'exit');

  const agent = agentIn(t, dir);
  agent.start([scriptedPlan('a', port, ['--loading-ms', '50'])]);
  await waitFor(() => {
    const [p] = records(dir).flatMap((r) => r.processes);
    return p !== undefined && p.pid !== old.pid && agent.ready('scripted').length === 1;
  }, { what: 'the replica restarted under its new spec' });
  assert.ok(!isAlive(old), 'the engine with the old spec was stopped');
});
