// The prefill/decode pool checks: each rule one row, named for the failure it prevents.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { loadConfig } from '../../src/cli/config.js';
import { ConfigError } from '../../src/errors/index.js';

function problems(yaml: string): { path: string; message: string }[] {
  try {
    loadConfig(yaml, 'test.yaml');
  } catch (e) {
    if (e instanceof ConfigError) return [...e.issues];
    throw e;
  }
  return [];
}
const node = `node:
  devices:
    - { index: 0, name: NVIDIA L4, uuid: GPU-0, class: l4, compute_capability: "8.9" }
    - { index: 1, name: NVIDIA L4, uuid: GPU-1, class: l4, compute_capability: "8.9" }
    - { index: 2, name: NVIDIA L4, uuid: GPU-2, class: l4, compute_capability: "8.9" }
    - { index: 3, name: NVIDIA L4, uuid: GPU-3, class: l4, compute_capability: "8.9" }
`;
const pool = (prefill: string, decode: string, replicas = '  - { model: qwen, profile: p }\n  - { model: qwen, profile: d }\n'): string =>
  `${node}models:\n  qwen:\n    profiles:\n      - { name: p, gpu_class: l4, role: prefill, ${prefill} }\n      - { name: d, gpu_class: l4, role: decode, ${decode} }\nreplicas:\n${replicas}`;
const vllm = 'engine: vllm, model_path: /m';

const rules: { why: string; yaml: string; path: string; re: RegExp }[] = [
  { why: 'a prefill pool with nothing to decode its blocks', yaml: pool(vllm, vllm, '  - { model: qwen, profile: p }\n'), path: 'replicas[0].profile', re: /has prefill replicas \(profile p\) and none that decode/ },
  { why: 'a role the catalog does not know', yaml: pool(vllm, vllm).replace('role: decode', 'role: decoder'), path: 'models.qwen.profiles[1].role', re: /"decoder" is not one of prefill, decode, both/ },
  { why: 'an engine that cannot hand a KV cache over', yaml: pool('engine: llamacpp, model_path: /m.gguf', vllm), path: 'models.qwen.profiles[0].role', re: /llamacpp cannot hand a KV cache to another engine/ },
  { why: 'SGLang has no both mode', yaml: pool('engine: sglang, model_path: /m', 'engine: sglang, model_path: /m').replace('role: decode', 'role: both'), path: 'models.qwen.profiles[1].role', re: /SGLang runs a replica in one --disaggregation-mode/ },
  { why: 'the two sides load different models', yaml: pool(vllm, 'engine: vllm, model_path: /other'), path: 'replicas[1].profile', re: /model_path "\/m" is not "\/other"/ },
  { why: 'the two sides move KV caches differently', yaml: pool(vllm, 'engine: sglang, model_path: /m'), path: 'replicas[1].profile', re: /move KV caches differently/ },
  { why: 'the two sides cut blocks differently', yaml: pool(`${vllm}, args: [--block-size, "32"]`, vllm), path: 'replicas[1].profile', re: /block size 32 is not default/ },
  { why: 'NIXL maps a prefill rank only onto whole decode ranks', yaml: pool(`${vllm}, tp: 2`, `${vllm}, tp: 1`), path: 'replicas[1].profile', re: /decode tp 1 is not a multiple of prefill tp 2/ },
];
for (const r of rules) {
  void test(`disagg checks: ${r.why}`, () => {
    const found = problems(r.yaml);
    const hit = found.find((p) => p.path === r.path);
    assert.ok(hit !== undefined, `no problem at ${r.path}; got ${JSON.stringify(found)}`);
    assert.match(hit.message, r.re);
  });
}

void test('disagg checks: a pool that can work passes, tp 1 prefill onto tp 2 decode included', () => {
  assert.deepEqual(problems(pool(vllm, `${vllm}, tp: 2`)), []);
  assert.deepEqual(problems(pool('engine: sglang, model_path: /m, bootstrap_port: 9000', 'engine: sglang, model_path: /m')), []);
});
