// llmgw plan on a discovered node: devices counted by class, MIG shards shown as card/migN with the
// MIG UUID as their CUDA device, and where each profile fits (one instance per replica, or nowhere).
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { plan } from '../../src/cli/plan.js';
import { inventoryFromSmi, parseSmiList, parseSmiQuery } from '../../src/discovery/index.js';
import { readFixture } from '../discovery/fixtures.js';

const discovered = inventoryFromSmi({
  list: parseSmiList(readFixture('nvidia-smi-L_4x-a100-sxm4-80gb_gpu0-mig-4x1g.20gb_driver-535.54.03.txt')),
  query: parseSmiQuery(readFixture('nvidia-smi-q-x_a100-sxm4-80gb_mig-4x1g.20gb_driver-535.54.03_dtd-v12.xml')),
  csv: undefined,
  problems: [],
});

const config = `node:
  name: n1
  devices: discover
models:
  q:
    profiles:
      - { name: mig, engine: vllm, gpu_class: a100-80g-mig-1g.20gb, model_path: /models/q }
      - { name: tp2, engine: vllm, gpu_class: a100-80g, tp: 2, model_path: /models/q }
      - { name: big, engine: vllm, gpu_class: h100-80g, model_path: /models/q }
replicas:
  - { model: q, profile: mig, count: 2 }
  - { model: q, profile: tp2, count: 1 }
`;

function runPlan(text: string): { code: number; out: string; err: string } {
  let out = '';
  let err = '';
  const code = plan(['--config', 'c.yaml'], {
    out: (t) => (out += t),
    err: (t) => (err += t),
    readFile: () => text,
    host: { env: { PATH: '/usr/bin' }, cpus: 8, listDir: () => undefined, llmgwCommand: ['node', 'main.js'] },
    discovered,
  });
  return { code, out, err };
}

void test('plan on a discovered MIG node: card/migN, MIG UUIDs, counts by class, where profiles fit', () => {
  const r = runPlan(config);
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /gpus 0\/mig0 \(a100-80g-mig-1g\.20gb\)/);
  assert.match(r.out, /gpus 0\/mig1 \(a100-80g-mig-1g\.20gb\)/);
  assert.match(r.out, /CUDA_VISIBLE_DEVICES=MIG-ce861fb0-a248-58ce-a9a8-f9adbc22a66a/);
  assert.doesNotMatch(r.out, /GGML_VK_VISIBLE_DEVICES/);
  assert.match(r.out, /a100-80g: 3 devices, 2 placed, 1 shard/);
  assert.match(r.out, /a100-80g-mig-1g\.20gb: 4 devices, 2 placed, 2 shards/);
  assert.match(r.out, /q\/mig \(vllm, gpu_class a100-80g-mig-1g\.20gb\): 1 instance per replica, 4 of class here, up to 4 replicas/);
  assert.match(r.out, /q\/tp2 \(vllm, gpu_class a100-80g\): 2 GPUs per replica, 3 of class here, up to 1 replica/);
  assert.match(r.out, /q\/big \(vllm, gpu_class h100-80g\): no device of class h100-80g on node n1/);
});

void test('plan refuses a MIG profile with tp 2 with the reason, before placing anything', () => {
  const r = runPlan(config.replace('gpu_class: a100-80g-mig-1g.20gb, model_path', 'gpu_class: a100-80g-mig-1g.20gb, tp: 2, model_path'));
  assert.equal(r.code, 1);
  assert.match(r.err, /models\.q\.profiles\[0\]\.tp: 2, but gpu_class a100-80g-mig-1g\.20gb is a MIG instance: a replica gets exactly one/);
});

void test('plan on a discovered node says why discovery found nothing, not only "0 free of 0"', () => {
  let err = '';
  const code = plan(['--config', 'c.yaml'], {
    out: () => undefined,
    err: (t) => (err += t),
    readFile: () => config,
    host: { env: { PATH: '/usr/bin' }, cpus: 8, listDir: () => undefined, llmgwCommand: ['node', 'main.js'] },
    discovered: inventoryFromSmi({ list: [], query: undefined, csv: undefined, problems: ['nvidia-smi -L: nvidia-smi: not found; install the NVIDIA driver utilities'] }),
  });
  assert.equal(code, 1);
  assert.match(err, /llmgw plan: warning: node\.devices: discover: nvidia-smi -L: nvidia-smi: not found; install the NVIDIA driver utilities\n/);
  assert.match(err, /0 free of 0/);
});
