// A replica spanning two nodes: its leader on one agent's node, its worker on the other's, started
// with vLLM's mp flags by the sim. The leader serves only once its worker joined; killing the worker
// breaks the group, so the leader fails too and the replica restarts and serves again.
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { waitFor } from '../support/wait.js';
import { loggedEvent } from '../support/serve.js';
import { ask, cluster, main, nodesView, run } from './cluster-harness.js';

const catalog = `models:
  qwen3:
    profiles:
      - { name: two, engine: sim, gpu_class: t4, tp: 2, gpus_per_node: 1, nodes: 2, model_path: qwen3, kv_events: true, args: [--tokenizer, bytes] }
replicas:
  - { model: qwen3, profile: two, count: 1 }`;

function pidOf(stateDir: string, shardId: string): number {
  const rec: unknown = JSON.parse(readFileSync(join(stateDir, `${encodeURIComponent(shardId)}.json`), 'utf8'));
  if (typeof rec !== 'object' || rec === null || !('processes' in rec) || !Array.isArray(rec.processes)) throw new Error('no processes in the state record');
  const [first]: unknown[] = rec.processes;
  if (typeof first !== 'object' || first === null || !('pid' in first) || typeof first.pid !== 'number') throw new Error('no pid');
  return first.pid;
}

void test('cluster: a 2-node replica waits for its worker, fails when the worker dies, restarts and serves again', { timeout: 180_000 }, async (t) => {
  const c = await cluster(t, ['a', 'b']);
  const [a, b] = c.nodes;
  if (a === undefined || b === undefined) throw new Error('two nodes');
  const gw = run(t, ['serve', '--config', c.gatewayConfig(catalog)], c.dir);
  await waitFor(() => loggedEvent(gw.err, 'serve.listening', { nodes: ['a', 'b'] }), { timeoutMs: 20_000, what: `the gateway to bind its link (stderr: ${gw.err.slice(-400)})` });
  const agentA = run(t, ['agent', '--config', c.agentConfig(a)], a.dir);
  // With one node the replica cannot be placed: it waits, it is not an error.
  await waitFor(() => gw.err.includes('link.placement.waiting'), { timeoutMs: 20_000, what: 'placement to wait for a second node' });
  run(t, ['agent', '--config', c.agentConfig(b)], b.dir);
  await waitFor(() => loggedEvent(gw.err, 'serve.ready', { replicas: 1 }), { timeoutMs: 60_000, what: `the 2-node replica ready (gateway: ${gw.err.slice(-800)})` });
  // Unasked (no --status), serve and agent say everything in their logs and nothing on stdout.
  assert.ok(loggedEvent(agentA.err, 'agent.joining', { node: 'a', addr: a.addr, gateway: `tcp://127.0.0.1:${c.linkPort}` }), agentA.err.slice(0, 800));
  assert.deepEqual([gw.out, agentA.out], ['', '']);

  const leaderLog = join(a.dir, 'logs', 'qwen3-two-0-r0.log');
  const led = readFileSync(leaderLog, 'utf8');
  assert.ok(led.indexOf('sim.worker.joined') >= 0 && led.indexOf('sim.worker.joined') < led.indexOf('sim.group.ready'), 'the leader waited for its worker before serving');
  const nodes = await nodesView(c.gatewayPort);
  assert.deepEqual(nodes.get('a')?.ready, ['qwen3-two-0'], 'the leader node serves the replica');
  assert.deepEqual(nodes.get('b')?.ready, [], 'the worker node serves nothing');
  assert.equal((await ask(c.gatewayPort, 'hello across two nodes')).status, 200);

  // The operator's view of every node, from the running gateway.
  const ctl = (args: string[]): string => {
    const r = spawnSync(process.execPath, [main, 'ctl', ...args, '--gateway', `http://127.0.0.1:${c.gatewayPort}`], { encoding: 'utf8', timeout: 20_000 });
    assert.equal(r.status, 0, r.stderr);
    return r.stdout;
  };
  const listed = ctl(['nodes']);
  assert.match(listed, /^node a \(127\.0\.0\.2\): up, last heard \d+ ms ago; 1 t4, \d+ cores$/m);
  assert.match(listed, /^node b \(127\.0\.0\.3\): up/m);
  assert.match(listed, /placed: qwen3-two-0 \(rank 0\)/);
  assert.match(listed, /placed: qwen3-two-0 \(rank 1\)/);
  assert.match(listed, /shard:qwen3-two-0-r0: ready/);
  assert.match(listed, /shard:qwen3-two-0-r1: ready/);

  // Kill the worker: the leader loses its group and fails; both shards restart; the replica serves again.
  const worker = pidOf(join(b.dir, 'state'), 'qwen3-two-0-r1');
  process.kill(worker, 'SIGKILL');
  await waitFor(() => readFileSync(leaderLog, 'utf8').includes('sim.group.lost'), { timeoutMs: 20_000, what: 'the leader to fail when its worker died' });
  // The restarted leader waited for the restarted worker again before serving.
  await waitFor(() => readFileSync(leaderLog, 'utf8').split('sim.group.ready').length - 1 >= 2, { timeoutMs: 60_000, what: 'the leader restarted and its group formed again' });
  await waitFor(
    async () => {
      const n = await nodesView(c.gatewayPort);
      return n.get('a')?.ready.length === 1 && pidOf(join(b.dir, 'state'), 'qwen3-two-0-r1') !== worker;
    },
    { timeoutMs: 60_000, what: 'the replica restarted with a new worker' },
  );
  assert.equal((await ask(c.gatewayPort, 'hello again across two nodes')).status, 200);
});
