// The registry, the checks every engine shares, and the engines/kv_events config sections.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import {
  ProfileError,
  Registry,
  defaultEnginesConfig,
  defaultKvEventsConfig,
  gpusPerShard,
  hasCode,
  parseEnginesConfig,
  parseKvEventsConfig,
  quantizationOf,
  requireComputeCapability,
  validateCommon,
  type EnginesConfig,
  type GpuInfo,
  type Issues,
  type Profile,
} from './imports.js';
import { profile } from './specs.js';

const registry = (o: Partial<EnginesConfig> = {}): Registry => new Registry({ ...defaultEnginesConfig, ...o }, defaultKvEventsConfig);
const gpu = (index: number, name = 'NVIDIA L4', computeCapability = '8.9'): GpuInfo => ({ index, name, computeCapability, memoryTotalMb: 23034 });

void test('registry: the five engines', () => {
  assert.deepEqual(registry().names(), ['llamacpp', 'sglang', 'sim', 'trtllm', 'vllm']);
  for (const n of registry().names()) assert.equal(registry().get(n).name, n);
});
void test('registry: an unknown engine is refused listing the ones there are', () => {
  assert.throws(() => registry().get('x'), (e) => hasCode(e, 'LLMGW_UNKNOWN_ENGINE') && e.message === 'unknown engine "x" (have llamacpp, sglang, sim, trtllm, vllm)');
});
void test('registry: a disabled engine is refused with the reason and the fix', () => {
  assert.throws(() => registry({ disabled: ['vllm'] }).get('vllm'), (e) => hasCode(e, 'LLMGW_ENGINE_DISABLED') && /engines\.disabled/.test(e.message));
  assert.equal(registry({ disabled: ['vllm'] }).get('llamacpp').name, 'llamacpp');
});
void test('registry: useInstalled points vLLM and llama.cpp at the installed build and says which take one', () => {
  const r = registry();
  assert.equal(r.useInstalled('vllm', '/inst/vllm'), true);
  assert.equal(r.useInstalled('llamacpp', '/inst/llama-server'), true);
  assert.equal(r.useInstalled('trtllm', '/inst/x'), false, 'the agent does not install TensorRT-LLM');
  assert.equal(r.useInstalled('nope', '/x'), false);
});

const fails = (p: Profile, gpus: readonly GpuInfo[], field: string, re: RegExp) => () =>
  assert.throws(() => validateCommon(p, gpus), (e) => e instanceof ProfileError && e.field === field && re.test(e.message) && e.message.includes(`"${p.name}"`));
const common: { why: string; run: () => void }[] = [
  { why: 'a profile needs a model path', run: fails(profile({ modelPath: '' }), [], 'model_path', /model_path is empty/) },
  { why: 'tp must be positive', run: fails(profile({ tp: 0 }), [], 'tp', /tp is 0/) },
  { why: 'a multi-node profile must say its GPUs per node', run: fails(profile({ tp: 8, nodes: 2 }), [], 'gpus_per_node', /needs gpus_per_node; write gpus_per_node: 4/) },
  { why: 'nodes x GPUs per node must equal tp x pp, every GPU runs one rank', run: fails(profile({ tp: 4, nodes: 2, gpusPerNode: 4 }), [], 'gpus_per_node', /2 nodes x 4 GPUs does not match tp 4 x pp 1/) },
  { why: 'pp counts in the layout', run: fails(profile({ tp: 2, pp: 2 }), [], 'gpus_per_node', /1 nodes x 2 GPUs does not match tp 2 x pp 2/) },
  { why: 'the node must have the GPUs per node', run: fails(profile({ tp: 4 }), [gpu(0), gpu(1)], 'tp', /needs 4 GPUs per node, the node has 2/) },
  { why: 'a tensor-parallel group may not mix GPU types', run: fails(profile({ tp: 2 }), [gpu(0), gpu(1, 'NVIDIA A10')], 'gpu_class', /not uniform/) },
  { why: 'a layout that adds up passes', run: () => validateCommon(profile({ tp: 4, pp: 2, nodes: 2, gpusPerNode: 4 }), [gpu(0), gpu(1), gpu(2), gpu(3)]) },
  { why: 'no devices of the class is for placement to report', run: () => validateCommon(profile({ tp: 8 }), []) },
  { why: 'each data-parallel rank of one vllm serve needs its own tp GPUs', run: fails(profile({ tp: 2, args: ['--data-parallel-size', '2'] }), [gpu(0), gpu(1)], 'tp', /needs 4 GPUs per node, the node has 2/) },
  { why: 'data-parallel size counts in the layout', run: fails(profile({ tp: 1, gpusPerNode: 1, args: ['-dp', '2'] }), [], 'gpus_per_node', /1 nodes x 1 GPUs does not match tp 1 x pp 1 x data-parallel size 2/) },
  { why: 'args may not move the engine off the port placement gave it', run: fails(profile({ args: ['--max-model-len', '4096', '--port', '9999'] }), [], 'args', /args set --port, which placement gives each shard from node\.ports\.http_base; drop it from args/) },
  { why: 'args may not move the engine off the address placement gave it', run: fails(profile({ args: ['--host=0.0.0.0'] }), [], 'args', /args set --host, which placement gives each shard from node\.addr/) },
  { why: 'tp x data-parallel size GPUs pass', run: () => assert.equal(gpusPerShard(profile({ tp: 2, args: ['--data-parallel-size=2'] })), 4) },
];
for (const r of common) void test(`validateCommon: ${r.why}`, r.run);

void test('requireComputeCapability: names the card and what it has', () => {
  assert.throws(() => requireComputeCapability(profile(), [gpu(0), gpu(3, 'Tesla T4', '7.5')], 8.9, 'fp8 quantization'), /GPU 3 \(Tesla T4\) has 7\.5/);
});
void test('requireComputeCapability: unparsable capability is let through', () => {
  requireComputeCapability(profile(), [gpu(0, 'x', '8.9x'), gpu(1, 'y', '')], 9, 'z');
});
void test('quantizationOf: both spellings, absent is empty', () => {
  assert.equal(quantizationOf(['--quantization', 'fp8']), 'fp8');
  assert.equal(quantizationOf(['--x', '--quantization=awq']), 'awq');
  assert.equal(quantizationOf(['--quantization']), '');
  assert.equal(quantizationOf([]), '');
});

function parse<T>(fn: (raw: unknown, path: string, issues: Issues) => T, raw: unknown): { value: T; issues: Issues } {
  const issues: Issues = [];
  return { value: fn(raw, 'engines', issues), issues };
}
void test('engines config: absent is the defaults', () => {
  const { value, issues } = parse(parseEnginesConfig, undefined);
  assert.deepEqual(issues, []);
  assert.deepEqual(value, defaultEnginesConfig);
  assert.ok(Object.isFrozen(value) && Object.isFrozen(value.vllm));
});
void test('engines config: snake_case keys map to camelCase', () => {
  const { value, issues } = parse(parseEnginesConfig, { vllm: { launch_mode: 'ray', ray_bin: '/r' }, llamacpp: { parallel: 2, threads: 3 }, sim: { block_size: 32 }, disabled: ['trtllm'] });
  assert.deepEqual(issues, []);
  assert.equal(value.vllm.launchMode, 'ray');
  assert.equal(value.vllm.rayBin, '/r');
  assert.equal(value.llamacpp.parallel, 2);
  assert.equal(value.sim.blockSize, 32);
  assert.deepEqual(value.disabled, ['trtllm']);
});
void test('engines config: every problem at once, with path and fix; a typo is never a default', () => {
  const { issues } = parse(parseEnginesConfig, { vlm: {}, vllm: { launch_mode: 'slurm' }, llamacpp: { parallel: 'four' }, disabled: ['vllmm'] });
  assert.deepEqual(
    issues.map((i) => i.path),
    ['engines.vlm', 'engines.disabled[0]', 'engines.vllm.launch_mode', 'engines.llamacpp.parallel'],
  );
  assert.match(issues[0]?.message ?? '', /unknown key \(did you mean "vllm"\?\)/);
  assert.match(issues[2]?.message ?? '', /"slurm" is not one of "mp", "ray"/);
  assert.match(issues[3]?.message ?? '', /"four" is not a whole number/);
});
void test('kv_events config: the seed must be a string, so 00 never becomes "0"', () => {
  const { value, issues } = parse(parseKvEventsConfig, { hash_seed: 0 });
  assert.equal(issues.length, 1);
  assert.match(issues[0]?.message ?? '', /not a string; write it in quotes/);
  assert.equal(value.hashSeed, '0');
  assert.deepEqual(parse(parseKvEventsConfig, { hash_seed: 'llmgw' }).value, { hashSeed: 'llmgw', hashAlgo: 'sha256_cbor' });
});
void test('kv_events config: only hash algorithms the gateway reproduces', () => {
  assert.match(parse(parseKvEventsConfig, { hash_algo: 'xxhash' }).issues[0]?.message ?? '', /not one of "sha256_cbor", "sha256"/);
});
