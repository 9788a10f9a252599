// The shared environment rules of baseEnv and unsafeEnv, one row per rule, named for the failure the
// rule prevents.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { baseEnv, materializeEnv, ncclEnv, unsafeEnv, type ShardSpec } from '../../src/engines/index.js';
import { host, shard } from './specs.js';

interface Row {
  readonly why: string;
  readonly spec: ShardSpec;
  readonly key: string;
  /** undefined: the key must be absent. */
  readonly want: string | undefined;
}

const rows: Row[] = [
  { why: 'pins the shard to its GPUs so two shards cannot share a card', spec: shard({ gpuIndices: [2, 3] }), key: 'CUDA_VISIBLE_DEVICES', want: '2,3' },
  {
    why: 'a MIG instance is opened by its UUID, placement indices mean nothing to CUDA',
    spec: shard({ gpuIndices: [1000], gpuUuids: ['MIG-aaaa', 'MIG-bbbb'] }),
    key: 'CUDA_VISIBLE_DEVICES',
    want: 'MIG-aaaa,MIG-bbbb',
  },
  { why: 'a CPU shard is hidden from every GPU', spec: shard({ gpuIndices: [] }), key: 'CUDA_VISIBLE_DEVICES', want: '' },
  { why: 'CUDA counts GPUs in nvidia-smi bus order, not fastest first', spec: shard(), key: 'CUDA_DEVICE_ORDER', want: 'PCI_BUS_ID' },
  { why: 'NCCL uses only the chosen fabric adapters, never another fabric', spec: shard({ hcas: ['mlx5_0', 'mlx5_1'] }), key: 'NCCL_IB_HCA', want: 'mlx5_0,mlx5_1' },
  { why: 'with a fabric IB stays enabled', spec: shard({ hcas: ['mlx5_0'] }), key: 'NCCL_IB_DISABLE', want: '0' },
  { why: 'no fabric: NCCL stops looking for IB instead of timing out', spec: shard({ hcas: [] }), key: 'NCCL_IB_DISABLE', want: '1' },
  { why: 'no fabric: no adapter list at all', spec: shard({ hcas: [] }), key: 'NCCL_IB_HCA', want: undefined },
  { why: 'RoCE uses the routable v2 GID entry, not the link-local default', spec: shard({ hcas: ['mlx5_0'], gidIndex: 3 }), key: 'NCCL_IB_GID_INDEX', want: '3' },
  { why: 'RoCE GID index 0 is still an index', spec: shard({ hcas: ['mlx5_0'], gidIndex: 0 }), key: 'NCCL_IB_GID_INDEX', want: '0' },
  { why: 'InfiniBand needs no GID index', spec: shard({ hcas: ['mlx5_0'], gidIndex: undefined }), key: 'NCCL_IB_GID_INDEX', want: undefined },
  { why: 'a GID index without a fabric is meaningless', spec: shard({ hcas: [], gidIndex: 3 }), key: 'NCCL_IB_GID_INDEX', want: undefined },
  { why: 'multi-node NVLink domain: NCCL carries collectives over NVLink', spec: shard({ nNodes: 2, fabric: 'nvl:rack1' }), key: 'NCCL_MNNVL_ENABLE', want: '1' },
  { why: 'multi-node NVLink domain needs cuMem', spec: shard({ nNodes: 2, fabric: 'nvl:rack1' }), key: 'NCCL_CUMEM_ENABLE', want: '1' },
  { why: 'one node is never a multi-node NVLink domain', spec: shard({ nNodes: 1, fabric: 'nvl:rack1' }), key: 'NCCL_MNNVL_ENABLE', want: undefined },
  { why: 'an IB fabric is not an NVLink domain', spec: shard({ nNodes: 2, fabric: 'ib:a' }), key: 'NCCL_MNNVL_ENABLE', want: undefined },
  { why: 'bootstrap pinned to the management interface, not IB-over-IP', spec: shard({ mgmtInterface: 'eth0' }), key: 'NCCL_SOCKET_IFNAME', want: 'eth0' },
  { why: 'gloo bootstraps on the management interface too', spec: shard({ mgmtInterface: 'eth0' }), key: 'GLOO_SOCKET_IFNAME', want: 'eth0' },
  { why: 'no management interface: NCCL chooses', spec: shard({ mgmtInterface: '' }), key: 'NCCL_SOCKET_IFNAME', want: undefined },
  { why: 'profile env is the escape hatch for per-cluster tuning', spec: shard({}, { env: { NCCL_DEBUG: 'INFO' } }), key: 'NCCL_DEBUG', want: 'INFO' },
  { why: 'profile env wins over generated NCCL settings', spec: shard({ hcas: [] }, { env: { NCCL_IB_DISABLE: '0' } }), key: 'NCCL_IB_DISABLE', want: '0' },
  { why: 'a refused profile key is dropped again at command construction', spec: shard({}, { env: { LD_PRELOAD: '/tmp/x.so' } }), key: 'LD_PRELOAD', want: undefined },
  {
    why: 'a profile cannot move the shard onto another card',
    spec: shard({ gpuIndices: [1] }, { env: { CUDA_VISIBLE_DEVICES: '0' } }),
    key: 'CUDA_VISIBLE_DEVICES',
    want: '1',
  },
];

for (const r of rows) {
  void test(`baseEnv: ${r.why}`, () => {
    assert.equal(baseEnv(r.spec)[r.key], r.want);
  });
}

const refused: [key: string, why: string][] = [
  ['LD_PRELOAD', 'loads a library into the root-run engine'],
  ['LD_LIBRARY_PATH', 'points the loader at other libraries'],
  ['DYLD_INSERT_LIBRARIES', 'the macOS loader equivalent'],
  ['CUDA_INJECTION64_PATH', 'the CUDA driver loads the library it names into the engine'],
  ['PYTHONPATH', 'imports other Python code'],
  ['PYTHONHOME', 'swaps the Python installation'],
  ['PYTHONSTARTUP', 'runs a file at startup'],
  ['PYTHONUSERBASE', 'adds a user site directory'],
  ['PYTHONWARNINGS', 'imports the warning category it names'],
  ['NODE_OPTIONS', "can --require code into node (the sim)"],
  ['BASH_ENV', 'runs a file in every bash the engine starts'],
  ['ENV', 'runs a file in every sh the engine starts'],
  ['PATH', 'changes which programs the engine runs'],
  ['CUDA_VISIBLE_DEVICES', 'breaks placement isolation'],
  ['CUDA_DEVICE_ORDER', 'renumbers the GPUs placement chose'],
  ['GGML_VK_VISIBLE_DEVICES', "breaks the Vulkan build's placement isolation"],
  ['VLLM_API_KEY', 'is the key llmgw sets'],
  ['LLAMA_API_KEY', 'is the key llmgw sets'],
  ['LLMGW_SGLANG_API_KEY', 'is the key llmgw sets'],
  ['PYTHONHASHSEED', 'must match the gateway hash seed'],
  ['1BAD', 'is not a variable name'],
  ['A=B', 'is not a variable name'],
  ['', 'is empty'],
];
for (const [key, why] of refused) {
  void test(`unsafeEnv refuses ${JSON.stringify(key)}: ${why}`, () => {
    const v = unsafeEnv(key);
    assert.equal(v.refused, true);
    assert.notEqual(v.why, '', 'a refusal says why');
  });
}

for (const key of ['NCCL_DEBUG', 'HF_HOME', 'VLLM_ATTENTION_BACKEND', 'OMP_NUM_THREADS', '_X']) {
  void test(`unsafeEnv lets tuning variable ${key} through`, () => {
    assert.deepEqual(unsafeEnv(key), { refused: false, why: '' });
  });
}

void test('ncclEnv shows exactly what baseEnv gives the engine', () => {
  const s = shard({ hcas: ['mlx5_0'], gidIndex: 1, mgmtInterface: 'eth1' });
  assert.deepEqual(ncclEnv(s), baseEnv(s));
});

void test('materializeEnv: the complete environment, inherited variables included (engines need PATH, HOME)', () => {
  const m = materializeEnv({ B: '2' }, host({ env: { PATH: '/bin', HOME: '/root', GONE: undefined } }));
  assert.deepEqual(m.env, [
    ['B', '2'],
    ['HOME', '/root'],
    ['PATH', '/bin'],
  ]);
  assert.deepEqual(m.generated, ['B']);
});

void test('materializeEnv: sorted by key, so a command is reproducible and diffable', () => {
  const m = materializeEnv({ Z: '1', A: '2', a: '3', M: '4' }, host({ env: { Q: 'q' } }));
  const keys = m.env.map(([k]) => k);
  assert.deepEqual(keys, ['A', 'M', 'Q', 'Z', 'a']);
});

void test('materializeEnv: generated variables win over inherited ones', () => {
  const m = materializeEnv({ CUDA_VISIBLE_DEVICES: '1' }, host({ env: { CUDA_VISIBLE_DEVICES: '0,1,2,3' } }));
  assert.deepEqual(new Map(m.env).get('CUDA_VISIBLE_DEVICES'), '1');
});
