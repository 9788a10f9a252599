// Scripted processes for the actor tests: Commands running the node scripts in fixtures/, and shard
// specs and inputs around them. Every command carries this process's environment, so the suite's
// marker reaches each child and the runner can prove none outlives it.
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Command, Engine, ShardSpec } from '../../src/engines/index.js';
import { defaultAgentConfig, type AgentConfig, type ReplicaInput, type ReplicaPlan, type ShardInput } from '../../src/actors/index.js';

const root = join(fileURLToPath(new URL('.', import.meta.url)), '..', '..', '..');

/** The compiled llmgw command line, which runs `sim serve` for the sim engine. */
export const llmgwMain = join(root, 'dist', 'src', 'cli', 'main.js');

/** The folder of the scripted processes (sources are run as they are: plain node scripts). */
export const fixtures = join(root, 'test', 'actors', 'fixtures');

/** This process's environment as a Command's sorted, complete env, plus `extra`. */
export function testEnv(extra: Record<string, string> = {}): readonly (readonly [string, string])[] {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined) env[k] = v;
  Object.assign(env, extra);
  return Object.entries(env).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/** A Command running one fixture script with node. */
export function script(name: string, file: string, args: readonly string[], o: { waitForLeaderPort?: boolean; env?: Record<string, string> } = {}): Command {
  return { name, path: process.execPath, args: [join(fixtures, file), ...args], env: testEnv(o.env), waitForLeaderPort: o.waitForLeaderPort ?? false, generated: [] };
}

/** A single-node CPU shard spec; override what a test needs. */
export function spec(over: Partial<ShardSpec> = {}): ShardSpec {
  return {
    replicaId: 'r0',
    shardId: 'r0-s0',
    rank: 0,
    nNodes: 1,
    leaderAddr: '127.0.0.1',
    leaderPort: 0,
    gpuIndices: [],
    gpuUuids: [],
    hcas: [],
    mgmtInterface: '',
    gidIndex: undefined,
    httpPort: 0,
    profile: {
      name: 'scripted',
      engine: 'scripted',
      gpuClass: 'cpu',
      tp: 1,
      pp: 1,
      gpusPerNode: 0,
      nodes: 1,
      args: [],
      env: {},
      modelPath: 'scripted',
      servedModelName: 'scripted',
      adapters: [],
      runtimeLora: false,
      kvEvents: false,
    },
    bindAddr: '127.0.0.1',
    apiKey: 'test-key',
    kvEventsPort: 0,
    kvReplayPort: 0,
    threads: 0,
    pool: '',
    fabric: '',
    profileFp: 'fp0',
    ...over,
  };
}

/** Fast timings for real-process tests: every bound still generous for a loaded 2-core box. */
export const fastTiming = {
  ...defaultAgentConfig.timing,
  loadTimeoutMs: 20_000,
  leaderTimeoutMs: 20_000,
  drainTimeoutMs: 2_000,
  killAfterMs: 2_000,
  healthIntervalMs: 50,
  healthFailures: 3,
};

/** A ShardInput over `commands`, logging into `logDir`. */
export function input(logDir: string, commands: readonly Command[], over: Partial<ShardInput> = {}): ShardInput {
  const s = over.spec ?? spec();
  return {
    spec: s,
    commands,
    servesHttp: true,
    healthUrl: `http://127.0.0.1:${s.httpPort}/health`,
    deviceCheck: undefined,
    logPath: join(logDir, `${s.shardId}.log`),
    policy: { maxRestarts: 3, windowMs: 60_000, backoffBaseMs: 50, backoffMaxMs: 200 },
    timing: fastTiming,
    tailLines: 10,
    adopt: undefined,
    jitterSeed: 1,
    ...over,
  };
}

/** llama.cpp's --list-devices format: the lines after "Available devices:", "(none)" when empty. */
export function parseListing(out: string): string[] {
  const lines = out.split('\n').map((l) => l.trim());
  const at = lines.findIndex((l) => l.startsWith('Available devices'));
  return at < 0 ? [] : lines.slice(at + 1).filter((l) => l !== '' && l !== '(none)');
}

/** An Engine over the scripted http-engine: its rank 0 serves HTTP; profile args are passed on. */
export const scriptedEngine: Engine = {
  name: 'scripted',
  healthPath: '/health',
  metricsPath: '/metrics',
  validate: () => undefined,
  servesHttp: (s) => s.rank === 0,
  commands: (s, host) => {
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(host.env)) if (v !== undefined) env[k] = v;
    env.VLLM_API_KEY = s.apiKey;
    return [
      {
        name: 'engine',
        path: process.execPath,
        args: [join(fixtures, 'http-engine.mjs'), '--port', String(s.httpPort), ...s.profile.args],
        env: Object.entries(env).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
        waitForLeaderPort: false,
        generated: ['VLLM_API_KEY'],
      },
    ];
  },
};

/** A replica plan of one scripted shard on `httpPort`. */
export function scriptedPlan(replicaId: string, httpPort: number, args: readonly string[] = []): ReplicaPlan {
  const base = spec();
  return {
    replicaId,
    model: 'scripted',
    adapters: [],
    shards: [spec({ replicaId, shardId: `${replicaId}-s0`, httpPort, apiKey: '', profile: { ...base.profile, args } })],
    blockSizeTokens: 16,
    hashSeed: '0',
    dataParallelSize: 1,
    capacityBlocks: 1024,
  };
}

/** Agent config for tests: fast bounds, directories under `dir`. */
export function agentConfig(dir: string): AgentConfig {
  return {
    ...defaultAgentConfig,
    stateDir: join(dir, 'state'),
    logDir: join(dir, 'logs'),
    restart: { maxRestarts: 3, windowMs: 60_000, backoffBaseMs: 50, backoffMaxMs: 200 },
    timing: fastTiming,
  };
}

/** Replica r0 of model "scripted" over `shards`, served at its leader's port; no KV events, no publisher. */
export function replicaInput(shards: readonly ShardInput[]): ReplicaInput {
  const leader = shards.find((s) => s.spec.rank === 0);
  return {
    replicaId: 'r0',
    node: 'local',
    model: 'scripted',
    adapters: [],
    url: leader === undefined ? undefined : `http://127.0.0.1:${leader.spec.httpPort}/`,
    apiKey: 'k',
    kvEvents: false,
    blockSizeTokens: 16,
    hashSeed: '0',
    dataParallelSize: 1,
    fingerprint: 'fp',
    shards,
    publisher: undefined,
    retire: false,
  };
}
