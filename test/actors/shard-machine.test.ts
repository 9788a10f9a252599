// The shard machine with real processes: every state and transition, driven by scripted engines.
import * as assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { createActor, waitFor as waitForActor, type SnapshotFrom } from 'xstate';
import { listDevicesWith, shardMachine, shardPhase, type ShardInput, type ShardPhase } from '../../src/actors/index.js';
import { isAlive } from '../../src/actors/processes.js';
import { freePort, waitFor } from '../support/wait.js';
import { input, parseListing, script, spec } from './scripted.js';

type Shard = ReturnType<typeof createActor<typeof shardMachine>>;

function tmp(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-shard-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Starts a shard and records every phase it passes through; stopping it at the end kills what is left. */
function run(t: TestContext, i: ShardInput, machine = shardMachine): { shard: Shard; phases: ShardPhase[] } {
  const shard = createActor(machine, { input: i });
  const phases: ShardPhase[] = [];
  shard.subscribe((s) => {
    const p = shardPhase(s);
    if (phases.at(-1) !== p) phases.push(p);
  });
  shard.start();
  t.after(async () => {
    if (shard.getSnapshot().status === 'active') {
      shard.send({ type: 'stop' });
      shard.send({ type: 'stop' });
      await until(shard, (s) => s.status !== 'active');
    }
    shard.stop();
  });
  return { shard, phases };
}

function until(shard: Shard, pred: (s: SnapshotFrom<typeof shardMachine>) => boolean, timeoutMs = 20_000) {
  return waitForActor(shard, pred, { timeout: timeoutMs });
}

const phaseIs = (p: ShardPhase) => (s: SnapshotFrom<typeof shardMachine>) => shardPhase(s) === p;

void test('shard: starting, loading while health says 503, ready and routable, then drain to stopped', async (t) => {
  const port = await freePort();
  const i = input(tmp(t), [script('engine', 'http-engine.mjs', ['--port', String(port), '--loading-ms', '400'])], { spec: spec({ httpPort: port }) });
  const { shard, phases } = run(t, i);
  await until(shard, phaseIs('ready'));
  assert.ok(shard.getSnapshot().hasTag('routable'));
  assert.deepEqual(phases, ['starting', 'loading', 'ready']);
  const procs = shard.getSnapshot().context.processes;
  assert.equal(procs.length, 1);
  shard.send({ type: 'drain' });
  await until(shard, (s) => s.status === 'done');
  assert.deepEqual(phases.slice(3), ['draining', 'stopping', 'stopped']);
  assert.ok(procs.every((p) => !isAlive(p)), 'the engine process is gone after stop');
});

void test('shard: an engine that ignores SIGTERM is killed after kill_after_ms', async (t) => {
  const port = await freePort();
  const i = input(tmp(t), [script('engine', 'http-engine.mjs', ['--port', String(port), '--ignore-sigterm'])], {
    spec: spec({ httpPort: port }),
    timing: { ...input('', []).timing, killAfterMs: 300 },
  });
  const { shard } = run(t, i);
  await until(shard, phaseIs('ready'));
  const procs = shard.getSnapshot().context.processes;
  shard.send({ type: 'stop' });
  await until(shard, (s) => s.matches({ running: { stopping: 'killing' } }));
  await until(shard, (s) => s.status === 'done');
  assert.ok(procs.every((p) => !isAlive(p)));
});

void test('shard: killing the engine process fails the shard, which backs off, restarts and is ready again', async (t) => {
  const port = await freePort();
  const i = input(tmp(t), [script('engine', 'http-engine.mjs', ['--port', String(port)])], { spec: spec({ httpPort: port }) });
  const { shard, phases } = run(t, i);
  await until(shard, phaseIs('ready'));
  const first = shard.getSnapshot().context.processes[0];
  if (first === undefined) throw new Error('no process recorded');
  process.kill(first.pid, 'SIGKILL');
  await until(shard, (s) => s.matches({ failed: 'backoff' }));
  assert.match(shard.getSnapshot().context.reason ?? '', /SIGKILL|signal/i);
  await until(shard, (s) => shardPhase(s) === 'ready' && s.context.restarts === 1);
  assert.deepEqual(phases, ['starting', 'loading', 'ready', 'failed', 'starting', 'loading', 'ready']);
  const [second] = shard.getSnapshot().context.processes;
  assert.ok(second && second.pid !== first.pid);
});

void test('shard: too many restarts in the window leaves it failed with the reason and the last lines of output', async (t) => {
  const i = input(tmp(t), [script('engine', 'exits.mjs', ['3'])], { policy: { maxRestarts: 2, windowMs: 60_000, backoffBaseMs: 20, backoffMaxMs: 40 } });
  const { shard } = run(t, i);
  await until(shard, (s) => s.matches({ failed: 'given-up' }));
  const c = shard.getSnapshot().context;
  assert.equal(c.restarts, 2);
  assert.match(c.reason ?? '', /exit code 3|code 3/);
  assert.ok(c.tail.includes('fatal: scripted crash'), `tail holds the crash line: ${JSON.stringify(c.tail)}`);
  assert.ok(!shard.getSnapshot().hasTag('routable'));
});

void test('shard: a sidecar dying fails the shard and takes the main process with it', async (t) => {
  const port = await freePort();
  const i = input(tmp(t), [script('sidecar', 'exits.mjs', ['0']), script('engine', 'http-engine.mjs', ['--port', String(port), '--loading-ms', '60000'])], {
    spec: spec({ httpPort: port }),
    policy: { maxRestarts: 0, windowMs: 60_000, backoffBaseMs: 20, backoffMaxMs: 40 },
  });
  const { shard } = run(t, i);
  await until(shard, (s) => s.matches({ failed: 'given-up' }));
  assert.match(shard.getSnapshot().context.reason ?? '', /^sidecar /);
  const procs = shard.getSnapshot().context.processes;
  assert.equal(procs.length, 2);
  // SIGKILL is delivered asynchronously: wait (bounded) for the kernel to finish the job.
  await waitFor(() => procs.every((p) => !isAlive(p)), { what: 'the main process dying with its sidecar' });
});

void test('shard: a Ray-style leader waits for its head to listen before starting the server', async (t) => {
  const [leaderPort, httpPort] = [await freePort(), await freePort()];
  const s = spec({ leaderPort, httpPort });
  const i = input(tmp(t), [
    script('ray', 'ray-head.mjs', ['--port', String(leaderPort), '--delay-ms', '300'], { waitForLeaderPort: true }),
    script('engine', 'http-engine.mjs', ['--port', String(httpPort)]),
  ], { spec: s });
  const { shard, phases } = run(t, i);
  await until(shard, phaseIs('ready'));
  assert.deepEqual(phases, ['starting', 'waiting-for-leader', 'starting', 'loading', 'ready']);
  assert.equal(shard.getSnapshot().context.processes.length, 2);
});

void test('shard: a worker rank waits for the leader port, joins, and is never health-checked on a port', async (t) => {
  const [leaderPort, httpPort] = [await freePort(), await freePort()];
  const dir = tmp(t);
  // Nothing listens on httpPort: a worker health-checked there would never become ready.
  const worker = input(dir, [script('ray', 'ray-worker.mjs', ['--address', `127.0.0.1:${leaderPort}`], { waitForLeaderPort: true })], {
    spec: spec({ shardId: 'r0-s1', rank: 1, nNodes: 2, leaderPort, httpPort }),
    servesHttp: false,
    healthUrl: undefined,
  });
  const { shard, phases } = run(t, worker);
  await until(shard, phaseIs('waiting-for-leader'));
  const head = input(dir, [script('ray', 'ray-head.mjs', ['--port', String(leaderPort)])], {
    spec: spec({ leaderPort, httpPort: 0 }),
    servesHttp: false,
    healthUrl: undefined,
  });
  const { shard: leader } = run(t, head);
  await until(shard, phaseIs('ready'));
  assert.deepEqual(phases, ['starting', 'waiting-for-leader', 'starting', 'ready']);
  assert.ok(shard.getSnapshot().hasTag('routable'));
  assert.equal(shardPhase(leader.getSnapshot()), 'ready');
});

void test('shard: waiting for a leader that never listens gives up with the reason', async (t) => {
  const leaderPort = await freePort();
  const i = input(tmp(t), [script('ray', 'ray-worker.mjs', ['--address', `127.0.0.1:${leaderPort}`], { waitForLeaderPort: true })], {
    spec: spec({ rank: 1, nNodes: 2, leaderPort }),
    servesHttp: false,
    healthUrl: undefined,
    timing: { ...input('', []).timing, leaderTimeoutMs: 300 },
    policy: { maxRestarts: 0, windowMs: 60_000, backoffBaseMs: 20, backoffMaxMs: 40 },
  });
  const { shard } = run(t, i);
  await until(shard, (s) => s.matches({ failed: 'given-up' }));
  assert.match(shard.getSnapshot().context.reason ?? '', new RegExp(`leader 127.0.0.1:${leaderPort} did not accept a connection within 300 ms`));
});

void test('shard: a llama.cpp-style engine on GPUs whose device list is empty is cpu-fallback, out of routing', async (t) => {
  const port = await freePort();
  const i = input(tmp(t), [script('engine', 'http-engine.mjs', ['--port', String(port)])], {
    spec: spec({ httpPort: port, gpuIndices: [0] }),
    deviceCheck: script('list-devices', 'http-engine.mjs', ['--list-devices']),
  });
  const { shard, phases } = run(t, i, shardMachine.provide({ actors: { listDevices: listDevicesWith((_engine, out) => parseListing(out)) } }));
  await until(shard, phaseIs('cpu-fallback'));
  assert.deepEqual(phases, ['starting', 'loading', 'checking-devices', 'cpu-fallback']);
  const snap = shard.getSnapshot();
  assert.ok(!snap.hasTag('routable'));
  assert.deepEqual(snap.context.devices, []);
  assert.match(snap.context.reason ?? '', /no GPU device/);
  shard.send({ type: 'drain' });
  await until(shard, (s) => s.status === 'done');
});

void test('shard: the same engine whose listing names a GPU is ready, with the devices it saw', async (t) => {
  const port = await freePort();
  const i = input(tmp(t), [script('engine', 'http-engine.mjs', ['--port', String(port)])], {
    spec: spec({ httpPort: port, gpuIndices: [0] }),
    deviceCheck: script('list-devices', 'http-engine.mjs', ['--list-devices', '--devices', 'CUDA0: NVIDIA L4 (22994 MiB, 22713 MiB free)']),
  });
  const { shard } = run(t, i, shardMachine.provide({ actors: { listDevices: listDevicesWith((_engine, out) => parseListing(out)) } }));
  await until(shard, phaseIs('ready'));
  assert.deepEqual(shard.getSnapshot().context.devices, ['CUDA0: NVIDIA L4 (22994 MiB, 22713 MiB free)']);
});

void test('shard: a ready engine whose health fails repeatedly is failed and restarted', async (t) => {
  const port = await freePort();
  const i = input(tmp(t), [script('engine', 'http-engine.mjs', ['--port', String(port), '--fail-health-after-ms', '300'])], {
    spec: spec({ httpPort: port }),
  });
  const { shard, phases } = run(t, i);
  await until(shard, phaseIs('failed'));
  assert.match(shard.getSnapshot().context.reason ?? '', /health check .* failed 3 times in a row \(last: status 503\)/);
  await until(shard, (s) => s.context.restarts >= 1);
  assert.deepEqual(phases.slice(0, 4), ['starting', 'loading', 'ready', 'failed']);
});

void test('shard: an engine that exits with code 0 while serving is a failure too', async (t) => {
  const port = await freePort();
  const i = input(tmp(t), [script('engine', 'http-engine.mjs', ['--port', String(port), '--exit-after-ms', '600', '--exit-code', '0'])], {
    spec: spec({ httpPort: port }),
  });
  const { shard } = run(t, i);
  await until(shard, phaseIs('ready'));
  await until(shard, phaseIs('failed'));
  assert.match(shard.getSnapshot().context.reason ?? '', /exited with code 0/);
  await until(shard, (s) => s.context.restarts >= 1);
});

void test('shard: an engine binary that does not exist fails the shard with the spawn error', async (t) => {
  const i = input(tmp(t), [{ ...script('engine', 'exits.mjs', []), path: '/nonexistent/llama-server' }], {
    policy: { maxRestarts: 0, windowMs: 60_000, backoffBaseMs: 20, backoffMaxMs: 40 },
  });
  const { shard } = run(t, i);
  await until(shard, (s) => s.matches({ failed: 'given-up' }));
  assert.match(shard.getSnapshot().context.reason ?? '', /ENOENT|not found|no such file/i);
});
