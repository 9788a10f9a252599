// llama.cpp's command rules, GGUF directory resolution and --list-devices parsing, one row per rule.
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { LlamaCpp, Registry, Vllm, canFallBackToCpu, defaultEnginesConfig, defaultKvEventsConfig, hasCode, parseDevices, pickGguf } from './imports.js';
import type { GpuInfo, LlamaCppConfig } from './imports.js';
import { envOf, host, profile, shard } from './specs.js';

const llama = (o: Partial<LlamaCppConfig> = {}): LlamaCpp => new LlamaCpp({ ...defaultEnginesConfig.llamacpp, ...o });
const gpu = (i: number, name = 'NVIDIA L4'): GpuInfo => ({ index: i, name, computeCapability: '8.9', memoryTotalMb: undefined });

function args(l: LlamaCpp, ...a: Parameters<LlamaCpp['commands']>): readonly string[] {
  const [c] = l.commands(...a);
  assert.ok(c !== undefined);
  return c.args;
}
function valueAfter(a: readonly string[], flag: string): string | undefined {
  const i = a.indexOf(flag);
  return i < 0 ? undefined : a[i + 1];
}

// pickGguf: pure over a listing.
const ggufRows: { why: string; names: string[]; want: { model: string; projector?: string } }[] = [
  { why: 'a split model resolves to its first part (lexical order is shard order)', names: ['m-00002-of-00003.gguf', 'm-00003-of-00003.gguf', 'm-00001-of-00003.gguf'], want: { model: '/d/m-00001-of-00003.gguf' } },
  { why: 'files that are not GGUF are ignored', names: ['README.md', 'config.json', 'model.Q4_K_M.gguf'], want: { model: '/d/model.Q4_K_M.gguf' } },
  { why: 'the extension is matched in any case', names: ['MODEL.GGUF'], want: { model: '/d/MODEL.GGUF' } },
  { why: 'an mmproj file is the vision projector, loaded beside the model, not the model', names: ['mmproj-model-f16.gguf', 'model.gguf'], want: { model: '/d/model.gguf', projector: '/d/mmproj-model-f16.gguf' } },
  { why: 'the projector is found in any case and sorted too', names: ['b-MMPROJ.gguf', 'a-mmproj.gguf', 'z.gguf'], want: { model: '/d/z.gguf', projector: '/d/a-mmproj.gguf' } },
  { why: 'sorting is by code unit, as the parts are named', names: ['b.gguf', 'B.gguf', 'a.gguf'], want: { model: '/d/B.gguf' } },
];
for (const r of ggufRows) {
  void test(`pickGguf: ${r.why}`, () => assert.deepEqual(pickGguf('/d', r.names), r.want));
}
void test('pickGguf: a directory with no .gguf is an error naming it', () => {
  assert.throws(() => pickGguf('/models/x', ['README.md']), (e) => hasCode(e, 'LLMGW_GGUF') && /\/models\/x holds no \.gguf file/.test(e.message));
});
void test('pickGguf: a directory with only a projector is an error saying so', () => {
  assert.throws(() => pickGguf('/models/x', ['mmproj.gguf']), (e) => hasCode(e, 'LLMGW_GGUF') && /vision projector \(mmproj\) and no model/.test(e.message));
});

void test('llamacpp: a directory model path resolves through the host listing', () => {
  const a = args(llama(), shard({}, { modelPath: '/models/q' }), host({ listDir: (p) => (p === '/models/q' ? ['q-00001-of-00002.gguf', 'q-00002-of-00002.gguf', 'mmproj.gguf'] : undefined) }));
  assert.equal(valueAfter(a, '--model'), '/models/q/q-00001-of-00002.gguf');
  assert.equal(valueAfter(a, '--mmproj'), '/models/q/mmproj.gguf');
});
void test('llamacpp: a file model path (or a missing one, the engine reports it) is used as it is', () => {
  const a = args(llama(), shard({}, { modelPath: '/models/q.gguf' }), host({ listDir: () => undefined }));
  assert.equal(valueAfter(a, '--model'), '/models/q.gguf');
  assert.equal(a.includes('--mmproj'), false);
});
void test('llamacpp: a projector flag in the profile wins over the one found', () => {
  const a = args(llama(), shard({}, { modelPath: '/m', args: ['-mm', '/other.gguf'] }), host({ listDir: () => ['m.gguf', 'mmproj.gguf'] }));
  assert.equal(a.includes('--mmproj'), false);
});
void test('llamacpp: an empty model directory fails command construction', () => {
  assert.throws(() => llama().commands(shard(), host({ listDir: () => [] })), (e) => hasCode(e, 'LLMGW_GGUF'));
});

const rules: { why: string; run: () => void }[] = [
  { why: '--metrics always, without it the router routes blind', run: () => assert.ok(args(llama(), shard(), host()).includes('--metrics')) },
  { why: "--jinja pins the model's own chat template", run: () => assert.ok(args(llama(), shard(), host()).includes('--jinja')) },
  { why: '--no-jinja in the profile is respected', run: () => assert.equal(args(llama(), shard({}, { args: ['--no-jinja'] }), host()).filter((a) => a === '--jinja').length, 0) },
  { why: '--jinja in the profile is not doubled', run: () => assert.equal(args(llama(), shard({}, { args: ['--jinja'] }), host()).filter((a) => a === '--jinja').length, 1) },
  { why: '--alias is the served name clients use', run: () => assert.equal(valueAfter(args(llama(), shard({}, { servedModelName: 'qwen' }), host()), '--alias'), 'qwen') },
  { why: 'no served name, no alias', run: () => assert.equal(args(llama(), shard({}, { servedModelName: '' }), host()).includes('--alias'), false) },
  { why: '--parallel defaults to 4, llama.cpp alone would serve one request at a time', run: () => assert.equal(valueAfter(args(llama({ parallel: 0 }), shard(), host()), '--parallel'), '4') },
  { why: '--parallel comes from the config', run: () => assert.equal(valueAfter(args(llama({ parallel: 8 }), shard(), host()), '--parallel'), '8') },
  { why: '-np in the profile wins over the default', run: () => assert.equal(args(llama(), shard({}, { args: ['-np', '2'] }), host()).includes('--parallel'), false) },
  { why: 'GPUs assigned: every layer offloaded', run: () => assert.equal(valueAfter(args(llama(), shard({ gpuIndices: [0] }), host()), '--n-gpu-layers'), '999') },
  { why: 'no GPUs: the flag omitted, not zero, so a CPU build never sees it', run: () => assert.equal(args(llama(), shard({ gpuIndices: [] }), host()).some((a) => a === '--n-gpu-layers' || a === '-ngl'), false) },
  { why: '-ngl in the profile wins', run: () => assert.equal(args(llama(), shard({ gpuIndices: [0] }, { args: ['-ngl', '20'] }), host()).includes('--n-gpu-layers'), false) },
  { why: 'several GPUs: layers split across them', run: () => assert.equal(valueAfter(args(llama(), shard({ gpuIndices: [0, 1] }), host()), '--split-mode'), 'layer') },
  { why: 'one GPU: nothing to split', run: () => assert.equal(args(llama(), shard({ gpuIndices: [0] }), host()).includes('--split-mode'), false) },
  { why: 'threads: what placement reserved comes first', run: () => assert.equal(valueAfter(args(llama({ threads: 6 }), shard({ gpuIndices: [], threads: 3 }), host()), '--threads'), '3') },
  { why: 'threads: then the config', run: () => assert.equal(valueAfter(args(llama({ threads: 6 }), shard({ gpuIndices: [] }), host()), '--threads'), '6') },
  { why: 'threads: then half the CPUs, two servers spinning on all of them starve each other', run: () => assert.equal(valueAfter(args(llama(), shard({ gpuIndices: [] }), host({ cpus: 8 })), '--threads'), '4') },
  { why: 'threads: at least one on a one-CPU host', run: () => assert.equal(valueAfter(args(llama(), shard({ gpuIndices: [] }), host({ cpus: 1 })), '--threads'), '1') },
  { why: 'threads: a GPU shard leaves threads to llama.cpp', run: () => assert.equal(args(llama(), shard({ gpuIndices: [0] }), host()).includes('--threads'), false) },
  { why: 'threads: -t in the profile wins', run: () => assert.equal(args(llama(), shard({ gpuIndices: [] }, { args: ['-t', '2'] }), host()).includes('--threads'), false) },
  {
    why: 'LoRA adapters load at scale zero, so a request naming none gets the base model',
    run: () => {
      const a = args(llama(), shard({}, { adapters: [{ name: 'sql', path: '/l/sql' }, { name: 'x', path: '/l/x' }] }), host());
      assert.deepEqual(a.filter((_, i) => a[i - 1] === '--lora-scaled'), ['/l/sql:0', '/l/x:0']);
      assert.equal(a.includes('--lora'), false);
    },
  },
  { why: 'profile args come last', run: () => assert.deepEqual(args(llama(), shard({}, { args: ['--ctx-size', '8192'] }), host()).slice(-2), ['--ctx-size', '8192']) },
];
for (const r of rules) void test(`llamacpp: ${r.why}`, r.run);

void test('llamacpp: the API key in LLAMA_API_KEY, never on the command line', () => {
  const [c] = llama().commands(shard({ apiKey: 'sk-x' }), host());
  assert.ok(c !== undefined);
  assert.equal(envOf(c).get('LLAMA_API_KEY'), 'sk-x');
  assert.equal(c.args.some((a) => a.includes('sk-x')), false);
});
void test('llamacpp: the Vulkan build is pinned by GGML_VK_VISIBLE_DEVICES', () => {
  const [c] = llama().commands(shard({ gpuIndices: [1, 2] }), host());
  assert.equal(c && envOf(c).get('GGML_VK_VISIBLE_DEVICES'), '1,2');
});
void test('llamacpp: not on MIG, which Vulkan cannot see (an index would name another card)', () => {
  const [c] = llama().commands(shard({ gpuIndices: [1000], gpuUuids: ['MIG-1234'] }), host());
  assert.equal(c && envOf(c).has('GGML_VK_VISIBLE_DEVICES'), false);
  assert.equal(c && envOf(c).get('CUDA_VISIBLE_DEVICES'), 'MIG-1234');
});
void test('llamacpp: no GPUs, no Vulkan devices variable', () => {
  const [c] = llama().commands(shard({ gpuIndices: [] }), host());
  assert.equal(c && envOf(c).has('GGML_VK_VISIBLE_DEVICES'), false);
});
void test('llamacpp bin: installed, else configured, else PATH; configured() only for a named binary', () => {
  assert.equal(llama().bin(), 'llama-server');
  assert.equal(llama().configured(), false);
  const l = llama({ bin: '/opt/llama-server' });
  assert.equal(l.bin(), '/opt/llama-server');
  assert.equal(l.configured(), true);
  l.useInstalled('/var/lib/llmgw/llama/b6000/llama-server');
  assert.equal(l.commands(shard(), host())[0]?.path, '/var/lib/llmgw/llama/b6000/llama-server');
});
void test('llamacpp: every shard serves HTTP, a llama.cpp replica is one shard', () => {
  assert.equal(llama().servesHttp(shard({ rank: 0 })), true);
});

void test('llamacpp validate: refuses nodes, naming another engine', () => {
  assert.throws(() => llama().validate(profile({ nodes: 2, gpusPerNode: 1 }), []), (e) => e instanceof Error && 'field' in e && e.field === 'nodes' && /does not span nodes/.test(e.message));
});
void test('llamacpp validate: refuses tp, saying to write gpus_per_node instead', () => {
  assert.throws(() => llama().validate(profile({ tp: 2 }), []), (e) => e instanceof Error && 'field' in e && e.field === 'tp' && /write gpus_per_node: 2 instead/.test(e.message));
});
void test('llamacpp validate: refuses pp, saying to write gpus_per_node instead', () => {
  assert.throws(() => llama().validate(profile({ pp: 3 }), []), (e) => e instanceof Error && 'field' in e && e.field === 'pp' && /write gpus_per_node: 3 instead/.test(e.message));
});
void test('llamacpp validate: gpus_per_node counts as its GPUs', () => {
  llama().validate(profile({ gpusPerNode: 2 }), [gpu(0), gpu(1)]);
  assert.throws(() => llama().validate(profile({ gpusPerNode: 3 }), [gpu(0), gpu(1)]), /needs 3 GPUs per node, the node has 2/);
});

const fixtures = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'test', 'engines', 'fixtures');
const fixture = (name: string): string => readFileSync(join(fixtures, name), 'utf8');
const deviceRows: { why: string; file: string; want: string[] }[] = [
  { why: 'an old build prints only the header when there are none', file: 'llama-server-list-devices_cpu-only_empty_b7839_windows_app-captured.txt', want: [] },
  { why: 'a new build prints (none), which is not a device', file: 'llama-server-list-devices_cpu-only_none-marker_b10431_app-captured.txt', want: [] },
  { why: 'backend log lines before the header are skipped', file: 'llama-cli-list-devices_cpu-only_empty_windows_llama-agent-fork.txt', want: [] },
  { why: 'Vulkan init lines before the header are skipped', file: 'llama-server-list-devices_vulkan_rtx2060_freebsd_b6795.txt', want: ['Vulkan0: NVIDIA GeForce RTX 2060 (6144 MiB, 5136 MiB free)'] },
  { why: 'dynamically loaded backends log before the header', file: 'llama-server-list-devices_vulkan_rtx4060-laptop_windows_backend-dl.txt', want: ['Vulkan0: NVIDIA GeForce RTX 4060 Laptop GPU (7957 MiB, 7189 MiB free)'] },
  {
    why: 'the listing ends at the next unindented line, so the CUDA init "Device 0:" lines after it are not devices',
    file: 'llama-server-list-devices_cuda_2gpu_rtx3080ti+rtx-pro-4000_ollama-log-excerpt_out-of-order.txt',
    want: ['CUDA0: NVIDIA GeForce RTX 3080 Ti (11909 MiB, 11650 MiB free)', 'CUDA1: NVIDIA RTX PRO 4000 Blackwell SFF Edition (24026 MiB, 23795 MiB free)'],
  },
  {
    why: 'RPC devices, whose names hold a colon, and anonymised sizes are listed as they are',
    file: 'llama-server-list-devices_cuda+rpc_anonymised-by-poster.txt',
    want: ['CUDA0: NVIDIA GeForce RTX XXXX (A MiB, B MiB free)', 'CUDA1: NVIDIA GeForce GTX YYYY (A MiB, B MiB free)', 'RPC[IP1:PORT1]: RPC[IP1:PORT1] (A MiB, B MiB free)', 'RPC[IP2:PORT2]: RPC[IP2:PORT2] (A MiB, B MiB free)'],
  },
  {
    why: 'one APU under two backends is two entries, and a description with parentheses stays whole',
    file: 'llama-server-list-devices_rocm+vulkan_radeon-8060s-strix-halo_no-log-lines-shown.txt',
    want: ['ROCm0: AMD Radeon 8060S Graphics (98304 MiB, 19195 MiB free)', 'Vulkan0: AMD Radeon 8060S Graphics (RADV STRIX_HALO) (114163 MiB, 80334 MiB free)'],
  },
];
for (const r of deviceRows) void test(`parseDevices: ${r.why}`, () => assert.deepEqual(parseDevices(fixture(r.file)), r.want));
void test('parseDevices: no header at all is no devices', () => assert.deepEqual(parseDevices('ggml_cuda_init: failed to initialize CUDA\n'), []));
void test('parseDevices: Windows line endings', () => assert.deepEqual(parseDevices('Available devices:\r\n  CUDA0: NVIDIA L4 (22994 MiB, 22713 MiB free)\r\n'), ['CUDA0: NVIDIA L4 (22994 MiB, 22713 MiB free)']));

void test('llamacpp is a CPU-fallback engine; vLLM is not', () => {
  assert.equal(canFallBackToCpu(llama()), true);
  assert.equal(canFallBackToCpu(new Vllm(defaultEnginesConfig.vllm, defaultKvEventsConfig)), false);
  const e = new Registry(defaultEnginesConfig, defaultKvEventsConfig).get('llamacpp');
  assert.ok(canFallBackToCpu(e));
  assert.deepEqual(e.parseDevices('Available devices:\n  (none)\n'), []);
});
void test('llamacpp --list-devices runs with the shard environment, so it lists what the shard sees', () => {
  const c = llama({ bin: '/opt/llama-server' }).listDevicesCommand(shard({ gpuIndices: [2] }), host());
  assert.equal(c.path, '/opt/llama-server');
  assert.deepEqual(c.args, ['--list-devices']);
  assert.equal(envOf(c).get('CUDA_VISIBLE_DEVICES'), '2');
  assert.equal(envOf(c).get('GGML_VK_VISIBLE_DEVICES'), '2');
});
