// The agent running the real sim engine (this llmgw's `sim serve`, built by the engines' Sim
// builder): loading to ready, KV events mirrored and sent upstream as deltas, a killed engine
// restarted with its event stream reset, a replay gap repaired, and a clean stop.
import * as assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { NodeAgent, type AgentConfig, type InspectRecord, type KvSink, type ReplicaPlan } from '../../src/actors/index.js';
import { defaultEnginesConfig, defaultKvEventsConfig, kvIpcPaths, Registry, type ShardSpec } from '../../src/engines/index.js';
import { StateDir } from '../../src/actors/state-dir.js';
import type { KvDelta } from '../../src/kv/index.js';
import { freePort, waitFor } from '../support/wait.js';
import { agentConfig, llmgwMain, spec } from './scripted.js';


function tmp(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-sim-agent-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

class RecordingSink implements KvSink {
  readonly deltas: KvDelta[] = [];
  readonly forgotten: string[] = [];
  delta(_replicaId: string, d: KvDelta): void {
    this.deltas.push(d);
  }
  forget(replicaId: string): void {
    this.forgotten.push(replicaId);
  }
  added(): number {
    return this.deltas.reduce((n, d) => n + d.added.length, 0);
  }
}

async function simPlan(extraArgs: readonly string[], over: Partial<ShardSpec> = {}): Promise<ReplicaPlan> {
  const base = spec();
  return {
    replicaId: 'sim0',
    model: 'qwen-sim',
    adapters: [],
    shards: [
      spec({
        replicaId: 'sim0',
        shardId: 'sim0-s0',
        httpPort: await freePort(),
        kvEventsPort: await freePort(),
        kvReplayPort: await freePort(),
        apiKey: '',
        profile: { ...base.profile, engine: 'sim', servedModelName: 'qwen-sim', modelPath: 'qwen-sim', kvEvents: true, args: ['--tokenizer', 'bytes', ...extraArgs] },
        ...over,
      }),
    ],
    blockSizeTokens: 16,
    hashSeed: defaultKvEventsConfig.hashSeed,
    dataParallelSize: 1,
    capacityBlocks: 4096,
  };
}

function simAgent(t: TestContext, sink: KvSink, onRecord: (r: InspectRecord) => void = () => undefined, dir = tmp(t), over: Partial<AgentConfig> = {}): NodeAgent {
  const agent = new NodeAgent({
    node: 'local',
    advertiseAddr: '127.0.0.1',
    config: { ...agentConfig(dir), ...over },
    engines: new Registry(defaultEnginesConfig, defaultKvEventsConfig),
    host: { env: process.env, cpus: 2, llmgwCommand: [process.execPath, llmgwMain] },
    kvSink: sink,
    onRecord,
  });
  t.after(async () => {
    agent.stopNow();
    await agent.close();
  });
  return agent;
}

async function complete(agent: NodeAgent, prompt: string): Promise<number> {
  const [r] = agent.ready('qwen-sim');
  if (r === undefined) throw new Error('no ready replica');
  const res = await request(new URL('v1/completions', r.url), {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${r.apiKey ?? ''}` },
    body: JSON.stringify({ model: 'qwen-sim', prompt, max_tokens: 2 }),
    signal: AbortSignal.timeout(10_000),
  });
  await res.body.dump();
  return res.statusCode;
}

const prompt = 'The quick brown fox jumps over the lazy dog while the agent watches every block it stores. '.repeat(3);

void test('sim agent: loading, ready, KV deltas upstream after a full copy, and a killed engine restarted with its stream reset', async (t) => {
  const sink = new RecordingSink();
  const shardPhases: string[] = [];
  const agent = simAgent(t, sink, (r) => {
    if (r.kind === 'event' || r.actor !== 'shard:sim0-s0') return;
    const p = agent.phaseOf('shard:sim0-s0');
    if (p !== undefined && shardPhases.at(-1) !== p) shardPhases.push(p);
  });
  agent.start([await simPlan(['--load-time-ms', '300'])]);
  await waitFor(() => agent.ready('qwen-sim').length === 1, { what: 'the sim replica ready', timeoutMs: 30_000 });
  assert.ok(shardPhases.includes('loading'), `it loaded first: ${shardPhases.join(' > ')}`);
  await waitFor(() => agent.phaseOf('publisher:sim0') === 'waiting', { what: 'the publisher bound and waiting' });
  assert.equal(sink.deltas[0]?.reset, 'requested', 'a new stream starts with a full copy');

  assert.equal(await complete(agent, prompt), 200, 'the engine takes the key the agent gave it');
  await waitFor(() => sink.added() > 0, { what: 'stored blocks reported upstream' });
  await waitFor(() => agent.phaseOf('publisher:sim0') === 'streaming', { what: 'publisher streaming' });

  const [first] = agent.ready('qwen-sim');
  const before = sink.deltas.length;
  const gen = first?.generation ?? 0;
  // Kill the engine: the shard fails, restarts, and the stream is reset for the new engine.
  killEngine(agent);
  await waitFor(() => agent.phaseOf('shard:sim0-s0') === 'failed', { what: 'shard failed' });
  await waitFor(() => (agent.ready('qwen-sim')[0]?.generation ?? 0) > gen, { what: 'replica ready again', timeoutMs: 30_000 });
  assert.ok(sink.deltas.slice(before).some((d) => d.reset === 'engine-restart'), 'upstream was told to drop the dead engine\'s blocks');
  const addedBefore = sink.added();
  assert.equal(await complete(agent, prompt), 200);
  await waitFor(() => sink.added() > addedBefore, { what: 'the restarted engine\'s blocks reported' });

  await agent.close();
  assert.deepEqual(sink.forgotten, ['sim0']);
});

void test('sim agent: a dropped event batch sends the publisher through resyncing and back to streaming', async (t) => {
  const sink = new RecordingSink();
  const publisherStates: string[] = [];
  const agent = simAgent(t, sink, (r) => {
    if (r.kind !== 'snapshot' || r.machine !== 'publisher') return;
    const p = agent.phaseOf('publisher:sim0');
    if (p !== undefined && publisherStates.at(-1) !== p) publisherStates.push(p);
  });
  agent.start([await simPlan(['--drop-event-batches', '1'])]);
  await waitFor(() => agent.ready('qwen-sim').length === 1, { what: 'the sim replica ready', timeoutMs: 30_000 });
  for (let i = 0; i < 4; i++) assert.equal(await complete(agent, `${i} ${prompt}`), 200);
  await waitFor(() => publisherStates.includes('resyncing') && agent.phaseOf('publisher:sim0') === 'streaming', {
    what: `publisher resynced (saw ${publisherStates.join(' > ')})`,
  });
});

function killEngine(agent: NodeAgent): void {
  const pid = agent.pidsOf('sim0-s0')[0];
  if (pid === undefined) throw new Error('no engine pid');
  process.kill(pid, 'SIGKILL');
}

// Over tcp:// the agent's SUB binds and the engine connects to it again; over ipc:// the engine binds
// and the new agent connects and asks its replay buffer for what it missed, which here is nothing:
// the stream saved before the kill is current, and the publisher says so before any new batch.
for (const transport of ['tcp', 'ipc'] as const) {
void test(`sim agent: engines adopted from a killed agent keep publishing KV events to the same ${transport === 'tcp' ? 'port' : 'socket'}`, async (t) => {
  const dir = tmp(t);
  const ipcDir = join(dir, 'kv');
  if (transport === 'ipc') mkdirSync(ipcDir, { mode: 0o700 });
  const plans = [await simPlan([], transport === 'ipc' ? { kvIpcDir: ipcDir } : {})];
  const child = spawn(process.execPath, [fileURLToPath(new URL('./agent-child.js', import.meta.url)), JSON.stringify({ dir, plans })], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  t.after(() => child.kill('SIGKILL'));
  let out = '';
  child.stdout.on('data', (b: Buffer) => (out += b.toString()));
  await waitFor(() => out.includes('ready'), { what: 'the first agent reporting ready', timeoutMs: 30_000 });
  // The first agent's engine caches a prompt, and the agent saves its KV stream before it dies.
  const [rec] = new StateDir(join(dir, 'state')).read(() => undefined);
  assert.ok(rec !== undefined);
  // The engine outlives its agent by design; should the test fail before the second agent adopts
  // and stops it, it must not outlive the test.
  t.after(() => {
    for (const p of rec.processes) {
      try {
        process.kill(p.pid, 'SIGKILL');
      } catch {
        // already stopped by the second agent
      }
    }
  });
  const res = await request(`http://127.0.0.1:${rec.shard.spec.httpPort}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${rec.shard.spec.apiKey}` },
    body: JSON.stringify({ model: 'qwen-sim', prompt, max_tokens: 2 }),
    signal: AbortSignal.timeout(10_000),
  });
  await res.body.dump();
  await waitFor(() => (new StateDir(join(dir, 'state')).readKv('sim0')?.ranks[0]?.mirror.parts.length ?? 0) > 0, { what: 'the KV stream saved', timeoutMs: 30_000 });
  child.kill('SIGKILL');
  await once(child, 'exit');

  const sink = new RecordingSink();
  const agent = simAgent(t, sink, undefined, dir);
  agent.start(plans);
  await waitFor(() => agent.ready('qwen-sim').length === 1, { what: 'the sim adopted and ready' });
  // The full copy a bound stream sends first holds what the saved stream held, before any event.
  const copy = await waitFor(() => sink.deltas.find((d) => d.reset === 'requested'), { what: 'the full copy of the adopted stream' });
  assert.ok(copy.added.length > 0, 'the blocks cached before the restart are reported at once, from the saved stream');
  if (transport === 'ipc') {
    await waitFor(() => agent.phaseOf('publisher:sim0') === 'streaming', { what: `the restored stream found current (publisher ${agent.phaseOf('publisher:sim0')})` });
  }
  assert.equal(agent.phaseOf('shard:sim0-s0'), 'ready');
  const [pid] = agent.pidsOf('sim0-s0');
  assert.equal(await complete(agent, prompt), 200, 'the adopted engine still takes the key it was started with');
  await waitFor(() => sink.added() > 0, { what: 'blocks from the adopted engine reported upstream' });
  assert.deepEqual(agent.pidsOf('sim0-s0'), [pid], 'not restarted');
});
}

/** What a connection attempt got: 'connected' or the error code (EACCES, ECONNREFUSED, ...). */
function tryConnect(to: { path: string } | { port: number }): Promise<string> {
  return new Promise((resolve) => {
    const sock = 'path' in to ? connect({ path: to.path }) : connect({ host: '127.0.0.1', port: to.port });
    sock.once('connect', () => {
      sock.destroy();
      resolve('connected');
    });
    sock.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
  });
}

/** The same attempts made by another local user (nobody), as a foreign process on the node would. */
async function tryConnectAs(uid: number, paths: readonly string[]): Promise<string[]> {
  const script = `const net=require('node:net');const ps=JSON.parse(process.argv[1]);Promise.all(ps.map(p=>new Promise(r=>{const s=net.connect({path:p});s.once('connect',()=>{s.destroy();r('connected')});s.once('error',e=>r(e.code))}))).then(x=>console.log(JSON.stringify(x)))`;
  const child = spawn(process.execPath, ['-e', script, JSON.stringify(paths)], { uid, gid: uid, stdio: ['ignore', 'pipe', 'inherit'], cwd: '/' });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  const [code] = (await once(child, 'exit')) as [number | null];
  assert.equal(code, 0, 'the foreign process ran');
  return JSON.parse(out) as string[];
}

void test('sim agent: KV events over ipc:// in a 0700 directory: events flow, no TCP port is open, and another local user cannot connect', async (t) => {
  const root = tmp(t);
  // Only the socket directory may stand between another user and the sockets: everything above it is open.
  chmodSync(root, 0o755);
  const ipcDir = join(root, 'kv');
  mkdirSync(ipcDir, { mode: 0o777 });
  chmodSync(ipcDir, 0o777);
  const sink = new RecordingSink();
  // A tiny log limit, so this test also sees the agent rotate a running engine's log.
  const agent = simAgent(t, sink, () => undefined, join(root, 'state'), { logMaxBytes: 100, logKeep: 2 });
  const plan = await simPlan([], { kvIpcDir: ipcDir });
  const shard = plan.shards[0];
  assert.ok(shard !== undefined);
  agent.start([plan]);
  assert.equal(statSync(ipcDir).mode & 0o777, 0o700, 'the agent made the socket directory private before starting the engine');
  await waitFor(() => agent.ready('qwen-sim').length === 1, { what: 'the sim replica ready', timeoutMs: 30_000 });
  assert.equal(await complete(agent, prompt), 200);
  await waitFor(() => sink.added() > 0, { what: 'stored blocks reported upstream over ipc://' });

  const paths = kvIpcPaths(ipcDir, shard.kvEventsPort);
  assert.ok(statSync(paths.events).isSocket() && statSync(paths.replay).isSocket(), 'the engine bound both sockets in the directory');
  assert.deepEqual(await Promise.all([tryConnect({ path: paths.events }), tryConnect({ path: paths.replay })]), ['connected', 'connected'], 'the agent\'s user can');
  // Nothing listens on the ports that name the sockets: no local process reaches them over TCP.
  assert.deepEqual(await Promise.all([tryConnect({ port: shard.kvEventsPort }), tryConnect({ port: shard.kvReplayPort })]), ['ECONNREFUSED', 'ECONNREFUSED']);
  const log = join(root, 'state', 'logs', 'sim0-s0.log');
  await waitFor(() => statSync(log).size > 100, { what: 'the engine log past 100 bytes' });
  agent.rotateLogs();
  assert.ok(statSync(`${log}.1`).size > 100, 'the agent rotated the running engine\'s log');
  if (process.getuid?.() !== 0) {
    t.diagnostic('not root: the foreign-user check needs to run a process as nobody; the 0700 mode was checked above');
    return;
  }
  assert.deepEqual(await tryConnectAs(65534, [paths.events, paths.replay]), ['EACCES', 'EACCES'], 'user nobody can reach neither socket');
});
