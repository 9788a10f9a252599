// Builders for the shapes engine tests work on: a complete profile and shard spec with every field at
// a harmless default, so each test row states only what its rule is about.
import type { Host, Profile, ShardSpec } from '../../src/engines/index.js';

export function profile(o: Partial<Profile> = {}): Profile {
  return {
    name: 'p',
    engine: 'vllm',
    gpuClass: 'l4',
    tp: 1,
    pp: 1,
    gpusPerNode: 0,
    nodes: 1,
    args: [],
    env: {},
    modelPath: '/models/m',
    servedModelName: 'm',
    adapters: [],
    runtimeLora: false,
    kvEvents: false,
    ...o,
  };
}

export function shard(o: Partial<ShardSpec> = {}, p: Partial<Profile> = {}): ShardSpec {
  return {
    replicaId: 'r0',
    shardId: 'r0-s0',
    rank: 0,
    nNodes: 1,
    leaderAddr: '10.0.0.1',
    leaderPort: 29500,
    gpuIndices: [0],
    gpuUuids: [],
    hcas: [],
    mgmtInterface: '',
    gidIndex: undefined,
    httpPort: 8100,
    profile: profile(p),
    bindAddr: '10.0.0.5',
    apiKey: '',
    kvEventsPort: 0,
    kvReplayPort: 0,
    threads: 0,
    pool: '',
    fabric: '',
    profileFp: '',
    ...o,
  };
}

export function host(o: Partial<Host> = {}): Host {
  return { env: { PATH: '/usr/bin', HOME: '/root' }, cpus: 8, ...o };
}

/** A command's environment as a map, for lookups. */
export function envOf(cmd: { env: readonly (readonly [string, string])[] }): Map<string, string> {
  return new Map(cmd.env);
}
