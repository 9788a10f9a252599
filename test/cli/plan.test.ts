// `llmgw plan`: every placed shard's command line and the variables llmgw sets, a device count by
// class, and a non-zero exit naming profile, field and reason on a bad config.
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../../src/cli/config.js';
import { defaultConfigYaml } from '../../src/cli/default-config.js';
import { configArgument, enginePorts } from '../../src/cli/node-plan.js';
import { plan, shellQuote } from '../../src/cli/plan.js';

const files: Record<string, string> = {
  'gpu.yaml': `
engines:
  vllm: { bin: /opt/vllm/bin/vllm }
kv_events: { hash_seed: "7" }
agent: { state_dir: /var/lib/llmgw }
node:
  name: gpu1
  addr: 10.0.0.5
  devices:
    - { index: 0, name: NVIDIA L4, uuid: GPU-0, class: l4, compute_capability: "8.9" }
    - { index: 1, name: NVIDIA L4, uuid: GPU-1, class: l4, compute_capability: "8.9" }
    - { index: 2, name: NVIDIA L4, uuid: GPU-2, class: l4, compute_capability: "8.9" }
  ports: { http_base: 9000, kv_events_base: 6000 }
models:
  qwen:
    served_model_name: Qwen
    profiles:
      - name: l4x2
        engine: vllm
        gpu_class: l4
        tp: 2
        model_path: /models/qwen
        kv_events: true
        env: { NCCL_DEBUG: INFO }
        args: [--max-model-len, "8192"]
      - { name: cpu, engine: llamacpp, gpu_class: cpu, model_path: /models/qwen.gguf }
replicas:
  - { model: qwen, profile: l4x2, count: 1 }
  - { model: qwen, profile: cpu, count: 1 }
`,
  'bad.yaml': `
node:
  devices: [{ index: 0, name: Tesla T4, class: t4, compute_capability: "7.5" }]
models:
  qwen:
    profiles:
      - { name: fast, engine: vllm, gpu_class: t4, model_path: /m, args: [--quantization, fp8] }
replicas: [{ model: qwen, profile: fast }]
`,
  'full.yaml': `
node:
  devices: [{ index: 0, name: NVIDIA L4, class: l4 }]
models:
  qwen:
    profiles: [{ name: one, engine: vllm, gpu_class: l4, model_path: /m }]
replicas: [{ model: qwen, profile: one, count: 2 }]
`,
  'pd.yaml': `
node:
  name: gpu1
  addr: 10.0.0.5
  devices:
    - { index: 0, name: NVIDIA L4, uuid: GPU-0, class: l4, compute_capability: "8.9" }
    - { index: 1, name: NVIDIA L4, uuid: GPU-1, class: l4, compute_capability: "8.9" }
  ports: { http_base: 9000, kv_events_base: 6000 }
models:
  qwen:
    profiles:
      - { name: p, engine: vllm, gpu_class: l4, model_path: /m, role: prefill }
      - { name: d, engine: sglang, gpu_class: l4, model_path: /m, role: decode }
replicas: [{ model: qwen, profile: p }, { model: qwen, profile: d }]
`,
};

function run(argv: string[]): { code: number; out: string; err: string } {
  let out = '';
  let err = '';
  const code = plan(argv, {
    out: (t) => (out += t),
    err: (t) => (err += t),
    readFile: (p) => {
      const f = files[p];
      if (f === undefined) throw new Error(`ENOENT: no such file, open '${p}'`);
      return f;
    },
    host: { env: { PATH: '/usr/bin', HOME: '/root' }, cpus: 8, llmgwCommand: ['/usr/bin/node', '/app/main.js'], listDir: () => undefined },
  });
  return { code, out, err };
}

void test('plan: every shard with its full command line, shell-quoted', () => {
  const r = run(['--config', 'gpu.yaml']);
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /replica qwen-l4x2-0 \/ shard qwen-l4x2-0-r0: model Qwen, profile l4x2, engine vllm/);
  assert.match(r.out, /gpus 0,1 \(l4\), http 10\.0\.0\.5:9000\n {2}kv events ipc:\/\/\/var\/lib\/llmgw\/kv\/kv-6000\.pub \(replay ipc:\/\/\/var\/lib\/llmgw\/kv\/kv-6000\.replay\), in a directory only the agent's user can enter\n/);
  assert.match(r.out, /\n {4}\/opt\/vllm\/bin\/vllm serve \/models\/qwen --host 10\.0\.0\.5 --port 9000 --tensor-parallel-size 2 --served-model-name Qwen --enable-prefix-caching/);
  assert.match(r.out, /--kv-events-config '\{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"ipc:\/\/\/var\/lib\/llmgw\/kv\/kv-6000\.pub","replay_endpoint":"ipc:\/\/\/var\/lib\/llmgw\/kv\/kv-6000\.replay","topic":"kv-events"\}' --scheduling-policy priority --max-model-len 8192\n/);
  assert.match(r.out, /replica qwen-cpu-0 .* engine llamacpp/);
  assert.match(r.out, /llama-server --model \/models\/qwen\.gguf --host 10\.0\.0\.5 --port 9001 --metrics --jinja --alias Qwen --parallel 4 --threads 4\n/);
});
void test('plan: the environment llmgw sets, marked, and not the inherited one', () => {
  const r = run(['--config', 'gpu.yaml']);
  assert.match(r.out, /CUDA_VISIBLE_DEVICES=0,1 {2}# set by llmgw/);
  assert.match(r.out, /PYTHONHASHSEED=7 {2}# set by llmgw/);
  assert.match(r.out, /NCCL_DEBUG=INFO {2}# set by profile/);
  assert.doesNotMatch(r.out, /PATH=/);
  assert.match(r.out, /\(\+ 2 variables inherited from the environment llmgw runs in\)/);
});
void test('plan: a device count by class', () => {
  const r = run(['--config', 'gpu.yaml']);
  assert.match(r.out, /devices by class on node gpu1:\n {2}cpu: 1 shard, no GPUs\n {2}l4: 3 devices, 2 placed, 1 shard\n/);
});
void test('plan: a bad profile exits non-zero naming profile, field and reason', () => {
  const r = run(['--config', 'bad.yaml']);
  assert.equal(r.code, 1);
  assert.equal(r.out, '');
  assert.match(r.err, /bad\.yaml has 1 problem/);
  assert.match(r.err, /models\.qwen\.profiles\[0\]\.args: profile "fast": fp8 quantization needs compute capability 8\.9, GPU 0 \(Tesla T4\) has 7\.5/);
});
void test('plan: replicas that do not fit the node exit non-zero saying which and why', () => {
  const r = run(['--config', 'full.yaml']);
  assert.equal(r.code, 1);
  assert.match(r.err, /replicas\[0\]: replica 2 of 2 of qwen\/one needs 1 GPU of class "l4"/);
});
void test('plan: a missing file and bad arguments', () => {
  assert.equal(run(['--config', 'nope.yaml']).code, 1);
  assert.match(run(['--config', 'nope.yaml']).err, /cannot read nope\.yaml/);
  assert.equal(run(['--conf', 'x']).code, 2);
  assert.equal(run(['--config']).code, 2);
  assert.match(run(['--status']).err, /^llmgw plan: unknown argument "--status"\nusage:/, 'plan prints, it has no status events');
  for (const argv of [['--config', '--help'], ['--config='], ['--config', '']]) {
    const r = run(argv);
    assert.equal(r.code, 2, argv.join(' '));
    assert.match(r.err, /^llmgw plan: --config needs a file name\nusage:/);
  }
  // serve and agent read the same argument the same way.
  for (const argv of [['--config', '--help'], ['--config='], ['--config', '']]) assert.deepEqual(configArgument(argv), { error: '--config needs a file name' });
  assert.deepEqual(configArgument(['--config=a.yaml']), { file: 'a.yaml' });
  // --status (status events on stdout too) goes with or without a file, before or after it.
  assert.deepEqual(configArgument(['--status', '--config', 'a.yaml']), { file: 'a.yaml', status: true });
  assert.deepEqual(configArgument(['--status']), { status: true });
  assert.deepEqual(configArgument(['--status=yes']), { error: 'unknown argument "--status=yes"' });
  assert.equal(run(['--help']).code, 0);
});
void test('plan: no --config plans the embedded default, two sim replicas of qwen3 with KV events', () => {
  const r = run([]);
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /from the built-in default config: 2 shards/);
  assert.equal(r.out.match(/\/usr\/bin\/node \/app\/main\.js sim serve qwen3 /g)?.length, 2);
  assert.match(r.out, /--port 8100 .*"endpoint":"ipc:\/\/\/\S+\/kv\/kv-5600\.pub"/);
  assert.match(r.out, /--port 8101 .*"endpoint":"ipc:\/\/\/\S+\/kv\/kv-5602\.pub"/);
});
void test('plan: a data-parallel engine keeps loopback TCP for its KV events (vLLM refuses ipc:// above rank 0), and says what that exposes', () => {
  files['dp.yaml'] = files['gpu.yaml']?.replace('tp: 2', 'tp: 1').replace('args: [--max-model-len, "8192"]', 'args: [--max-model-len, "8192", --data-parallel-size, "2"]') ?? '';
  const r = run(['--config', 'dp.yaml']);
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /kv events tcp:\/\/127\.0\.0\.1:6000 \(replay tcp:\/\/127\.0\.0\.1:6002\) on loopback TCP \(data parallel: vLLM refuses ipc:\/\/ for ranks above 0\): any local process can read its prompt token ids and forge events/);
  assert.match(r.out, /"endpoint":"tcp:\/\/127\.0\.0\.1:6000","replay_endpoint":"tcp:\/\/127\.0\.0\.1:6002"/);
});
void test('the default config parses to two sim replicas on the CPU', () => {
  const c = loadConfig(defaultConfigYaml, 'default');
  assert.deepEqual(c.replicas, [{ model: 'qwen3', profile: 'sim-cpu', count: 2 }]);
  assert.equal(c.models.qwen3?.profiles[0]?.engine, 'sim');
  assert.equal(c.models.qwen3?.profiles[0]?.gpuClass, 'cpu');
  assert.equal(c.models.qwen3?.profiles[0]?.kvEvents, true);
});
void test('shellQuote: plain words bare, everything else single-quoted so the line pastes', () => {
  assert.equal(shellQuote('--port'), '--port');
  assert.equal(shellQuote(''), "''");
  assert.equal(shellQuote('a b'), "'a b'");
  assert.equal(shellQuote(`it's`), `'it'\\''s'`);
  assert.equal(shellQuote('{"a":1}'), `'{"a":1}'`);
});

const main = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'src', 'cli', 'main.js');
void test('llmgw plan as a process: the default plan prints and exits 0', () => {
  const r = spawnSync(process.execPath, [main, 'plan'], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, new RegExp(`${process.execPath.replaceAll('/', '\\/')} \\S+main\\.js sim serve qwen3`));
});
void test('llmgw plan as a process: a bad config exits 1 with the problem on stderr', () => {
  const r = spawnSync(process.execPath, [main, 'plan', '--config', '/nonexistent/llmgw.yaml'], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(r.status, 1);
  assert.match(r.stderr, /cannot read \/nonexistent\/llmgw\.yaml/);
});
void test('llmgw with no command: the usage on stderr, nothing on stdout, exit 2; --help on stdout, exit 0', () => {
  const r = spawnSync(process.execPath, [main], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(r.status, 2);
  assert.equal(r.stdout, '');
  assert.match(r.stderr, /^usage: llmgw <command>/);
  const h = spawnSync(process.execPath, [main, '--help'], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(h.status, 0);
  assert.match(h.stdout, /^usage: llmgw <command>/);
});

// The gateway binds first; an engine given the same port fails to bind and restarts forever.
test('serve refuses a gateway port that placement also gave an engine, naming both', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-clash-'));
  const file = join(dir, 'clash.yaml');
  writeFileSync(file, defaultConfigYaml.replace(/port: \d+/, 'port: 8101'));
  try {
    const r = spawnSync(process.execPath, [main, 'serve', '--config', file], { encoding: 'utf8', timeout: 30_000 });
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, /gateway\.port: 8101 is also qwen3-sim-cpu-1-r0's HTTP port/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('enginePorts counts every data-parallel rank of the event and replay ports', () => {
  const spec = { shardId: 's0', httpPort: 9000, kvEventsPort: 6000, kvReplayPort: 6100 } as const;
  const uses = enginePorts([{ shards: [spec], dataParallelSize: 2 }] as unknown as Parameters<typeof enginePorts>[0]);
  assert.deepEqual([...uses.keys()].sort(), [6000, 6001, 6100, 6101, 9000]);
});

void test('plan: a disaggregated replica shows its role and protocol, and its connector flags', () => {
  // A pool of two engine families is refused before anything is planned; one family is planned.
  const r = run(['--config', 'pd.yaml']);
  assert.match(r.err, /move KV caches differently/);
  files['pd.yaml'] = (files['pd.yaml'] ?? '').replace('engine: sglang', 'engine: vllm');
  const ok = run(['--config', 'pd.yaml']);
  assert.equal(ok.code, 0, ok.err);
  assert.match(ok.out, /\n {2}role prefill \(prefill\/decode disaggregation over vLLM's NixlConnector\)\n/);
  assert.match(ok.out, /--kv-transfer-config '\{"kv_connector":"NixlConnector","kv_role":"kv_both"\}'/);
  assert.match(ok.out, /\n {2}role decode \(prefill\/decode disaggregation over vLLM's NixlConnector\)\n/);
});
