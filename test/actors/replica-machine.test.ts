// The replica machine over real scripted shards: a Ray-style leader and worker as one unit, routable
// only when both are ready; a failing shard fails the replica until it is back; cpu-fallback keeps
// it out of routing; drain stops every shard. Plus the phase-collapsing rule, one row per reason.
import * as assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { createActor, waitFor as waitForActor, type SnapshotFrom } from 'xstate';
import {
  listDevicesWith,
  replicaMachine,
  replicaPhase,
  replicaPhaseOf,
  shardMachine,
  type ReplicaInput,
  type ReplicaPhase,
  type ShardView,
} from '../../src/actors/index.js';
import { freePort } from '../support/wait.js';
import { input, parseListing, replicaInput, script, spec } from './scripted.js';

const view = (phase: ShardView['phase'], rank = 0): ShardView => ({ phase, rank, routable: phase === 'ready', reason: undefined, restarts: 0, adopted: false });

const rows: { why: string; shards: ShardView[]; want: ReplicaPhase }[] = [
  { why: 'routable only when every shard is ready', shards: [view('ready'), view('loading', 1)], want: 'loading' },
  { why: 'every shard ready is a ready replica', shards: [view('ready'), view('ready', 1)], want: 'ready' },
  { why: 'a failed shard fails the replica even while another is ready', shards: [view('ready'), view('failed', 1)], want: 'failed' },
  { why: 'a worker waiting for its leader holds the replica there', shards: [view('loading'), view('waiting-for-leader', 1)], want: 'waiting-for-leader' },
  { why: 'a shard on the CPU keeps the whole replica out of routing', shards: [view('cpu-fallback')], want: 'cpu-fallback' },
  { why: 'a shard stopping means the replica is draining', shards: [view('ready'), view('stopping', 1)], want: 'draining' },
  { why: 'checking devices is still loading', shards: [view('checking-devices')], want: 'loading' },
  { why: 'adopted shards are adopted until they answer', shards: [view('adopted')], want: 'adopted' },
  { why: 'all shards stopped is a stopped replica', shards: [view('stopped'), view('stopped', 1)], want: 'stopped' },
];
for (const r of rows) void test(`replicaPhase: ${r.why}`, () => assert.equal(replicaPhase(r.shards), r.want));

function tmp(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-replica-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

type Replica = ReturnType<typeof createActor<typeof replicaMachine>>;

function run(t: TestContext, i: ReplicaInput) {
  const machine = replicaMachine.provide({
    actors: { shard: shardMachine.provide({ actors: { listDevices: listDevicesWith((_e, out) => parseListing(out)) } }) },
  });
  const replica = createActor(machine, { input: i });
  const phases: string[] = [];
  replica.subscribe((s) => {
    const p = replicaPhaseOf(s.value);
    if (phases.at(-1) !== p) phases.push(p);
  });
  replica.start();
  t.after(async () => {
    if (replica.getSnapshot().status === 'active') {
      replica.send({ type: 'stop' });
      await until(replica, (s) => s.status !== 'active');
    }
    replica.stop();
  });
  return { replica, phases };
}

const until = (r: Replica, pred: (s: SnapshotFrom<typeof replicaMachine>) => boolean) => waitForActor(r, pred, { timeout: 20_000 });

void test('replica: a Ray-style leader and worker are one unit, routable only once both are ready; a worker failure fails it until restarted; drain stops both', async (t) => {
  const dir = tmp(t);
  const [leaderPort, httpPort] = [await freePort(), await freePort()];
  const leader = input(dir, [
    script('ray', 'ray-head.mjs', ['--port', String(leaderPort), '--delay-ms', '200'], { waitForLeaderPort: true }),
    script('engine', 'http-engine.mjs', ['--port', String(httpPort), '--loading-ms', '200']),
  ], { spec: spec({ shardId: 'r0-s0', nNodes: 2, leaderPort, httpPort }) });
  const worker = input(dir, [script('ray', 'ray-worker.mjs', ['--address', `127.0.0.1:${leaderPort}`], { waitForLeaderPort: true })], {
    spec: spec({ shardId: 'r0-s1', rank: 1, nNodes: 2, leaderPort, httpPort: 0 }),
    servesHttp: false,
    healthUrl: undefined,
  });
  const { replica, phases } = run(t, replicaInput([leader, worker]));
  await until(replica, (s) => s.hasTag('routable'));
  assert.deepEqual(phases.slice(0, 1), ['starting']);
  assert.ok(phases.includes('waiting-for-leader'), phases.join(' > '));
  assert.equal(phases.at(-1), 'ready');
  assert.equal(replica.getSnapshot().context.generation, 1);

  // The worker's own process dies: the replica is failed (out of routing) until the worker is back.
  const pid = workerPid(replica);
  process.kill(pid, 'SIGKILL');
  await until(replica, (s) => s.matches({ active: 'failed' }));
  assert.ok(!replica.getSnapshot().hasTag('routable'));
  await until(replica, (s) => s.matches({ active: 'ready' }));
  assert.equal(replica.getSnapshot().context.generation, 2, 'a new generation: the gateway forgets what the old run cached');

  replica.send({ type: 'drain' });
  await until(replica, (s) => s.status === 'done');
  assert.ok(phases.includes('draining'));
});

void test('replica: a shard in cpu-fallback keeps the replica out of routing with its reason', async (t) => {
  const port = await freePort();
  const shard = input(tmp(t), [script('engine', 'http-engine.mjs', ['--port', String(port)])], {
    spec: spec({ httpPort: port, gpuIndices: [0] }),
    deviceCheck: script('list-devices', 'http-engine.mjs', ['--list-devices']),
  });
  const { replica } = run(t, replicaInput([shard]));
  await until(replica, (s) => s.matches({ active: 'cpu-fallback' }));
  const views = Object.values(replica.getSnapshot().context.shardViews);
  assert.match(views[0]?.reason ?? '', /serving on the CPU/);
  assert.ok(!replica.getSnapshot().hasTag('routable'));
});

function workerPid(replica: Replica): number {
  const child = replica.getSnapshot().children['r0-s1'];
  const snap: unknown = child?.getSnapshot();
  if (typeof snap !== 'object' || snap === null || !('context' in snap)) throw new Error('no worker snapshot');
  const ctx = snap.context;
  if (typeof ctx !== 'object' || ctx === null || !('processes' in ctx) || !Array.isArray(ctx.processes)) throw new Error('no worker processes');
  const [p] = ctx.processes as { pid: number }[];
  if (p === undefined) throw new Error('no worker process');
  return p.pid;
}
