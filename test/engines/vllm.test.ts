// vLLM's command rules, one row per rule of the reference design, named for its reason.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { Vllm, schedulingPolicyArgs, defaultEnginesConfig, defaultKvEventsConfig, hasCode, type GpuInfo, type VllmConfig } from './imports.js';
import { envOf, host, profile, shard } from './specs.js';

const vllm = (o: Partial<VllmConfig> = {}): Vllm => new Vllm({ ...defaultEnginesConfig.vllm, ...o }, { hashSeed: '42', hashAlgo: 'sha256_cbor' });
const gpu = (o: Partial<GpuInfo> = {}): GpuInfo => ({ index: 0, name: 'NVIDIA L4', computeCapability: '8.9', memoryTotalMb: 23034, ...o });

function only<T>(list: readonly T[]): T {
  assert.equal(list.length, 1, 'one command');
  const [x] = list;
  assert.ok(x !== undefined);
  return x;
}

function valueAfter(args: readonly string[], flag: string): string | undefined {
  const i = args.indexOf(flag);
  return i < 0 ? undefined : args[i + 1];
}

void test('vllm bin: PATH name when nothing is configured or installed', () => {
  assert.equal(only(vllm().commands(shard(), host())).path, 'vllm');
});
void test('vllm bin: the configured binary when the agent installed none', () => {
  assert.equal(only(vllm({ bin: '/opt/vllm/bin/vllm' }).commands(shard(), host())).path, '/opt/vllm/bin/vllm');
});
void test('vllm bin: the installed build wins over the configuration, being the one seen to run', () => {
  const v = vllm({ bin: '/opt/vllm/bin/vllm' });
  v.useInstalled('/var/lib/llmgw/vllm/bin/vllm');
  assert.equal(only(v.commands(shard(), host())).path, '/var/lib/llmgw/vllm/bin/vllm');
});

void test('vllm single node: serve the model on the shard host and port with its tp and served name', () => {
  const c = only(vllm().commands(shard({ httpPort: 8123 }, { tp: 2, gpusPerNode: 2, servedModelName: 'qwen' }), host()));
  assert.deepEqual(c.args.slice(0, 2), ['serve', '/models/m']);
  assert.equal(valueAfter(c.args, '--host'), '10.0.0.5');
  assert.equal(valueAfter(c.args, '--port'), '8123');
  assert.equal(valueAfter(c.args, '--tensor-parallel-size'), '2');
  assert.equal(valueAfter(c.args, '--served-model-name'), 'qwen');
  assert.equal(c.args.includes('--pipeline-parallel-size'), false, 'pp 1 is the default and not written');
  assert.equal(c.args.includes('--nnodes'), false, 'single node has no multi-node flags');
  assert.equal(c.waitForLeaderPort, false);
});
void test('vllm: an empty bind address listens on every address', () => {
  assert.equal(valueAfter(only(vllm().commands(shard({ bindAddr: '' }), host())).args, '--host'), '0.0.0.0');
});
void test('vllm: pipeline parallelism is passed when above one', () => {
  const c = only(vllm().commands(shard({}, { tp: 2, pp: 2, gpusPerNode: 4 }), host()));
  assert.equal(valueAfter(c.args, '--pipeline-parallel-size'), '2');
});
void test('vllm: no served name means vLLM serves the model path', () => {
  assert.equal(only(vllm().commands(shard({}, { servedModelName: '' }), host())).args.includes('--served-model-name'), false);
});

const mpLeader = shard({ rank: 0, nNodes: 2, gpuIndices: [0, 1, 2, 3] }, { tp: 8, gpusPerNode: 4, nodes: 2 });
const mpWorker = shard({ rank: 1, nNodes: 2, gpuIndices: [0, 1, 2, 3] }, { tp: 8, gpusPerNode: 4, nodes: 2 });

void test('vllm mp: every node runs serve with the replica size, its rank and the leader address and port', () => {
  for (const s of [mpLeader, mpWorker]) {
    const c = only(vllm().commands(s, host()));
    assert.equal(c.args[0], 'serve');
    assert.equal(valueAfter(c.args, '--distributed-executor-backend'), 'mp');
    assert.equal(valueAfter(c.args, '--nnodes'), '2');
    assert.equal(valueAfter(c.args, '--node-rank'), String(s.rank));
    assert.equal(valueAfter(c.args, '--master-addr'), '10.0.0.1');
    assert.equal(valueAfter(c.args, '--master-port'), '29500');
  }
});
void test('vllm mp: workers run headless (no API server, only their GPUs)', () => {
  assert.equal(only(vllm().commands(mpWorker, host())).args.includes('--headless'), true);
  assert.equal(only(vllm().commands(mpLeader, host())).args.includes('--headless'), false);
});
void test('vllm mp: VLLM_HOST_IP is left to vLLM, given the leader every worker announced itself as leader', () => {
  for (const s of [mpLeader, mpWorker]) assert.equal(only(vllm().commands(s, host())).generated.includes('VLLM_HOST_IP'), false);
});
void test('vllm mp: an empty launch_mode means mp', () => {
  assert.equal(valueAfter(only(vllm({ launchMode: '' }).commands(mpWorker, host())).args, '--distributed-executor-backend'), 'mp');
});
void test('vllm mp: only the leader serves HTTP, health-checking a worker would fail a healthy replica', () => {
  assert.equal(vllm().servesHttp(mpLeader), true);
  assert.equal(vllm().servesHttp(mpWorker), false);
});

void test('vllm ray: the leader starts the head, then the server after it', () => {
  const cmds = vllm({ launchMode: 'ray', rayBin: '/opt/ray' }).commands(mpLeader, host());
  assert.deepEqual(cmds.map((c) => c.name), ['ray', 'vllm']);
  const [ray, server] = cmds;
  assert.ok(ray !== undefined && server !== undefined);
  assert.equal(ray.path, '/opt/ray');
  assert.deepEqual(ray.args.slice(0, 2), ['start', '--block']);
  assert.equal(ray.args.includes('--head'), true);
  assert.equal(valueAfter(ray.args, '--port'), '29500');
  assert.equal(valueAfter(server.args, '--distributed-executor-backend'), 'ray');
});
void test('vllm ray: the head runs without its dashboard, an unauthenticated way to run code on the node', () => {
  const [ray] = vllm({ launchMode: 'ray' }).commands(mpLeader, host());
  assert.equal(ray?.args.includes('--include-dashboard=false'), true);
});
void test('vllm ray: ray claims the shard GPUs with --num-gpus', () => {
  const [ray] = vllm({ launchMode: 'ray' }).commands(mpLeader, host());
  assert.equal(valueAfter(ray?.args ?? [], '--num-gpus'), '4');
});
void test('vllm ray: the head must listen before anything else starts (waitForLeaderPort)', () => {
  const [ray, server] = vllm({ launchMode: 'ray' }).commands(mpLeader, host());
  assert.equal(ray?.waitForLeaderPort, true);
  assert.equal(server?.waitForLeaderPort, false);
});
void test('vllm ray: a worker is only the join, whose exit is the shard exit', () => {
  const c = only(vllm({ launchMode: 'ray' }).commands(mpWorker, host()));
  assert.equal(c.name, 'ray');
  assert.equal(valueAfter(c.args, '--address'), '10.0.0.1:29500');
  assert.equal(c.args.includes('--head'), false);
  assert.equal(c.waitForLeaderPort, true);
});
void test('vllm ray: the server finds the cluster through RAY_ADDRESS and VLLM_HOST_IP', () => {
  const [, server] = vllm({ launchMode: 'ray' }).commands(mpLeader, host());
  assert.ok(server !== undefined);
  assert.equal(envOf(server).get('RAY_ADDRESS'), '10.0.0.1:29500');
  assert.equal(envOf(server).get('VLLM_HOST_IP'), '10.0.0.1');
});
void test('vllm ray: a single-node replica needs no Ray at all', () => {
  assert.equal(only(vllm({ launchMode: 'ray' }).commands(shard(), host())).name, 'vllm');
});
void test('vllm: an unknown launch_mode is an error naming the key and the choices', () => {
  assert.throws(
    () => vllm({ launchMode: 'slurm' }).commands(mpLeader, host()),
    (e) => hasCode(e, 'LLMGW_LAUNCH_MODE') && /launch_mode/.test(e.message) && /"slurm"/.test(e.message) && /mp/.test(e.message),
  );
});

void test('vllm validate: fp8 needs compute capability 8.9 (an older card falls back silently, which is worse)', () => {
  const p = profile({ args: ['--quantization', 'fp8'] });
  assert.throws(() => vllm().validate(p, [gpu({ name: 'NVIDIA A100', computeCapability: '8.0' })]), /fp8 quantization needs compute capability 8.9/);
});
void test('vllm validate: fp8 runs on Ada and Hopper', () => {
  const p = profile({ args: ['--quantization=fp8'] });
  vllm().validate(p, [gpu({ computeCapability: '8.9' })]);
  vllm().validate(p, [gpu({ computeCapability: '9.0' })]);
  vllm().validate(p, [gpu({ computeCapability: '12.0' })]);
});
void test('vllm validate: an unknown capability lets fp8 through rather than blocking a launch on parsing', () => {
  vllm().validate(profile({ args: ['--quantization', 'fp8'] }), [gpu({ computeCapability: '' }), gpu({ index: 1, computeCapability: 'N/A' })]);
});
void test('vllm validate: other quantizations have no capability rule', () => {
  vllm().validate(profile({ args: ['--quantization', 'awq'] }), [gpu({ computeCapability: '7.5' })]);
});

const adapters = [
  { name: 'sql', path: '/lora/sql' },
  { name: 'chat', path: '/lora/chat' },
];
void test('vllm LoRA at start: --enable-lora and each adapter registered under its name', () => {
  const c = only(vllm().commands(shard({}, { adapters }), host()));
  assert.equal(c.args.includes('--enable-lora'), true);
  const i = c.args.indexOf('--lora-modules');
  assert.deepEqual(c.args.slice(i + 1, i + 3), ['sql=/lora/sql', 'chat=/lora/chat']);
});
void test('vllm LoRA on demand: LoRA enabled, nothing registered, runtime updating allowed', () => {
  const c = only(vllm().commands(shard({}, { adapters, runtimeLora: true }), host()));
  assert.equal(c.args.includes('--enable-lora'), true);
  assert.equal(c.args.includes('--lora-modules'), false);
  assert.equal(envOf(c).get('VLLM_ALLOW_RUNTIME_LORA_UPDATING'), 'True');
});
void test('vllm: no adapters, no LoRA flags', () => {
  const c = only(vllm().commands(shard(), host()));
  assert.equal(c.args.includes('--enable-lora'), false);
  assert.equal(envOf(c).has('VLLM_ALLOW_RUNTIME_LORA_UPDATING'), false);
});

const kvShard = (o: Parameters<typeof shard>[0] = {}) => shard({ kvEventsPort: 5600, kvReplayPort: 5601, ...o }, { kvEvents: true });
void test('vllm KV events: prefix caching with the reproducible hash and the agent endpoint (vLLM connects)', () => {
  const c = only(vllm().commands(kvShard(), host()));
  assert.equal(c.args.includes('--enable-prefix-caching'), true);
  assert.equal(valueAfter(c.args, '--prefix-caching-hash-algo'), 'sha256_cbor');
  const cfg: unknown = JSON.parse(valueAfter(c.args, '--kv-events-config') ?? '');
  assert.deepEqual(cfg, {
    enable_kv_cache_events: true,
    publisher: 'zmq',
    endpoint: 'tcp://127.0.0.1:5600',
    replay_endpoint: 'tcp://127.0.0.1:5601',
    topic: 'kv-events',
  });
});
void test('vllm KV events: the hash seed and the int block-hash form are fixed in the environment', () => {
  const env = envOf(only(vllm().commands(kvShard(), host())));
  assert.equal(env.get('PYTHONHASHSEED'), '42');
  assert.equal(env.get('VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES'), '1');
});
void test('vllm KV events: no replay port, no replay endpoint', () => {
  const c = only(vllm().commands(kvShard({ kvReplayPort: 0 }), host()));
  const cfg = JSON.parse(valueAfter(c.args, '--kv-events-config') ?? '{}') as Record<string, unknown>;
  assert.equal('replay_endpoint' in cfg, false);
});
void test('vllm KV events: only the leader has a scheduler to publish from', () => {
  const c = only(vllm().commands(shard({ rank: 1, nNodes: 2, kvEventsPort: 5600 }, { kvEvents: true, tp: 2, gpusPerNode: 1, nodes: 2 }), host()));
  assert.equal(c.args.includes('--kv-events-config'), false);
  assert.equal(envOf(c).has('PYTHONHASHSEED'), false);
});
void test('vllm KV events: without a port the agent is not listening, so nothing is published', () => {
  const c = only(vllm().commands(shard({ kvEventsPort: 0 }, { kvEvents: true }), host()));
  assert.equal(c.args.includes('--kv-events-config'), false);
});
void test('vllm KV events: only when the profile asks', () => {
  const c = only(vllm().commands(shard({ kvEventsPort: 5600 }, { kvEvents: false }), host()));
  assert.equal(c.args.includes('--kv-events-config'), false);
  assert.equal(c.args.includes('--enable-prefix-caching'), false);
});
void test('vllm KV events: the default hash seed is the config default', () => {
  const v = new Vllm(defaultEnginesConfig.vllm, defaultKvEventsConfig);
  assert.equal(envOf(only(v.commands(kvShard(), host()))).get('PYTHONHASHSEED'), '0');
});

void test('vllm: the API key goes in the environment, never on the command line every user can read', () => {
  const c = only(vllm().commands(shard({ apiKey: 'sk-secret' }), host()));
  assert.equal(envOf(c).get('VLLM_API_KEY'), 'sk-secret');
  assert.equal([c.path, ...c.args].some((a) => a.includes('sk-secret')), false);
});
void test('vllm: profile args come last so an operator can override anything generated', () => {
  const c = only(vllm().commands(shard({ apiKey: 'k', kvEventsPort: 5600 }, { kvEvents: true, adapters, args: ['--max-model-len', '4096', '--port', '9'] }), host()));
  assert.deepEqual(c.args.slice(-4), ['--max-model-len', '4096', '--port', '9']);
});
void test('vllm: the generated environment is the base environment plus its own keys', () => {
  const c = only(vllm().commands(shard({ gpuIndices: [3] }), host()));
  assert.equal(envOf(c).get('CUDA_VISIBLE_DEVICES'), '3');
  assert.equal(envOf(c).get('PATH'), '/usr/bin', 'inherited');
  assert.equal(c.generated.includes('PATH'), false);
});

void test('vllm: scheduled by priority, so the gateway\'s classes reach the engine\'s queue; a profile\'s own policy wins', () => {
  assert.deepEqual(schedulingPolicyArgs([]), ['--scheduling-policy', 'priority']);
  assert.deepEqual(schedulingPolicyArgs(['--scheduling-policy', 'fcfs']), []);
  assert.deepEqual(schedulingPolicyArgs(['--scheduling-policy=fcfs']), []);
});
