// The catalog sections and their validation against engines and the node's devices: each problem is
// reported with its path, all at once.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { parseModels, parseReplicas } from '../../src/catalog/index.js';
import { loadConfig } from '../../src/cli/config.js';
import type { Issues } from '../../src/config/index.js';
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
    - { index: 2, name: Tesla T4, uuid: GPU-2, class: t4, compute_capability: "7.5" }
`;
const model = (profiles: string, replicas = ''): string => `${node}models:\n  qwen:\n    profiles:\n${profiles}${replicas === '' ? '' : `replicas:\n${replicas}`}`;

void test('catalog: profiles map to engine profiles with the model served name', () => {
  const issues: Issues = [];
  const models = parseModels({ qwen: { served_model_name: 'Qwen', profiles: [{ name: 'a', engine: 'vllm', gpu_class: 'l4', model_path: '/m', gpus_per_node: 2, tp: 2, kv_events: true, runtime_lora: true, env: { NCCL_DEBUG: 'INFO' }, adapters: [{ name: 's', path: '/s' }] }] } }, 'models', issues);
  assert.deepEqual(issues, []);
  assert.deepEqual(models.qwen?.profiles[0], {
    name: 'a',
    engine: 'vllm',
    gpuClass: 'l4',
    tp: 2,
    pp: 1,
    gpusPerNode: 2,
    nodes: 1,
    args: [],
    env: { NCCL_DEBUG: 'INFO' },
    modelPath: '/m',
    servedModelName: 'Qwen',
    adapters: [{ name: 's', path: '/s' }],
    runtimeLora: true,
    kvEvents: true,
  });
  assert.equal(models.qwen?.servedModelName, 'Qwen');
});
void test('catalog: the served name defaults to the model key', () => {
  const models = parseModels({ qwen3: { profiles: [{ name: 'a', engine: 'sim', gpu_class: 'cpu', model_path: 'q' }] } }, 'models', []);
  assert.equal(models.qwen3?.profiles[0]?.servedModelName, 'qwen3');
});
void test('catalog: replicas default to one', () => {
  assert.deepEqual(parseReplicas([{ model: 'm', profile: 'p' }], 'replicas', []), [{ model: 'm', profile: 'p', count: 1 }]);
});

const bad: { why: string; yaml: string; path: string; re: RegExp }[] = [
  { why: 'an unknown engine names the ones there are', yaml: model('      - { name: a, engine: vlm, gpu_class: l4, model_path: /m }\n'), path: 'models.qwen.profiles[0].engine', re: /unknown engine "vlm" \(have llamacpp, sglang, sim, trtllm, vllm\)/ },
  { why: 'a profile the GPUs cannot run (fp8 on a T4)', yaml: model('      - { name: fp8, engine: vllm, gpu_class: t4, model_path: /m, args: [--quantization, fp8] }\n'), path: 'models.qwen.profiles[0].args', re: /profile "fp8": fp8 quantization needs compute capability 8\.9, GPU 2 \(Tesla T4\) has 7\.5/ },
  { why: 'more GPUs than the node has of the class', yaml: model('      - { name: big, engine: vllm, gpu_class: l4, tp: 4, model_path: /m }\n'), path: 'models.qwen.profiles[0].tp', re: /profile "big": needs 4 GPUs per node, the node has 2/ },
  { why: 'llama.cpp tp says what to write instead', yaml: model('      - { name: l, engine: llamacpp, gpu_class: l4, tp: 2, model_path: /m }\n'), path: 'models.qwen.profiles[0].tp', re: /write gpus_per_node: 2 instead/ },
  { why: 'a refused env key, with the reason', yaml: model('      - { name: a, engine: vllm, gpu_class: l4, model_path: /m, env: { LD_PRELOAD: /x.so } }\n'), path: 'models.qwen.profiles[0].env.LD_PRELOAD', re: /refused: LD_PRELOAD makes the engine load other libraries/ },
  { why: 'kv_events on an engine that publishes none', yaml: model('      - { name: a, engine: llamacpp, gpu_class: cpu, model_path: /m, kv_events: true }\n'), path: 'models.qwen.profiles[0].kv_events', re: /publishes no KV events/ },
  { why: 'an unknown profile key suggests the nearest', yaml: model('      - { name: a, engine: vllm, gpu_class: l4, model_path: /m, gpus_pernode: 1 }\n'), path: 'models.qwen.profiles[0].gpus_pernode', re: /unknown key \(did you mean "gpus_per_node"\?\)/ },
  { why: 'a wrong type names the value', yaml: model('      - { name: a, engine: vllm, gpu_class: l4, model_path: /m, tp: two }\n'), path: 'models.qwen.profiles[0].tp', re: /"two" is not a whole number of at least 1/ },
  { why: 'a replica of a model that does not exist', yaml: model('      - { name: a, engine: vllm, gpu_class: l4, model_path: /m }\n', '  - { model: qwem, profile: a }\n'), path: 'replicas[0].model', re: /"qwem" is not a model under models: \(did you mean "qwen"\?\)/ },
  { why: 'a replica of a profile that does not exist', yaml: model('      - { name: a, engine: vllm, gpu_class: l4, model_path: /m }\n', '  - { model: qwen, profile: b }\n'), path: 'replicas[0].profile', re: /"b" is not a profile of qwen \(have a\)/ },
  { why: 'a disabled engine says so', yaml: `engines: { disabled: [vllm] }\n${model('      - { name: a, engine: vllm, gpu_class: l4, model_path: /m }\n')}`, path: 'models.qwen.profiles[0].engine', re: /disabled on this node/ },
  { why: 'trtllm without its interpreter', yaml: model('      - { name: t, engine: trtllm, gpu_class: l4, model_path: /m }\n'), path: 'models.qwen.profiles[0].engine', re: /engines\.trtllm\.python is empty/ },
  { why: 'two profiles of one name', yaml: model('      - { name: a, engine: sim, gpu_class: cpu, model_path: m }\n      - { name: a, engine: sim, gpu_class: cpu, model_path: m }\n'), path: 'models.qwen.profiles[1].name', re: /already a profile of qwen/ },
  { why: 'a device of class cpu', yaml: 'node:\n  devices: [{ index: 0, name: x, class: cpu }]\n', path: 'node.devices[0].class', re: /"cpu" means "no GPU"/ },
  { why: 'an unknown top-level key', yaml: 'engnes: {}\n', path: 'engnes', re: /did you mean "engines"/ },
  { why: 'an empty served name (clients could not ask for it) says what the default is', yaml: `${node}models:\n  qwen:\n    served_model_name: ""\n    profiles: [{ name: a, engine: sim, gpu_class: cpu, model_path: m }]\n`, path: 'models.qwen.served_model_name', re: /"" is empty; write a value, or leave the key out for "qwen"/ },
  { why: 'an empty node name', yaml: 'node: { name: "" }\n', path: 'node.name', re: /"" is empty; write a value, or leave the key out for "local"/ },
  { why: 'a file that is a list, not sections, says where', yaml: '- engines\n', path: '(top level)', re: /^a list is not a mapping; write it as "key: value" lines$/ },
  { why: 'one model and profile listed twice (their replica ids would collide)', yaml: model('      - { name: a, engine: sim, gpu_class: cpu, model_path: m }\n', '  - { model: qwen, profile: a }\n  - { model: qwen, profile: a }\n'), path: 'replicas[1]', re: /qwen\/a is already listed at replicas\[0\]; drop this entry and raise count there instead/ },
];
for (const r of bad) {
  void test(`catalog validation: ${r.why}`, () => {
    const found = problems(r.yaml);
    const hit = found.find((p) => p.path === r.path);
    assert.ok(hit !== undefined, `no problem at ${r.path}; got ${JSON.stringify(found)}`);
    assert.match(hit.message, r.re);
  });
}

void test('catalog validation: every problem at once', () => {
  const found = problems(model('      - { name: a, engine: vlm, gpu_class: l4, model_path: /m, env: { PATH: /x } }\n      - { name: b, engine: llamacpp, gpu_class: l4, model_path: /m, nodes: 2, gpus_per_node: 1 }\n', '  - { model: nope, profile: a }\n'));
  assert.deepEqual(found.map((p) => p.path).sort(), ['models.qwen.profiles[0].engine', 'models.qwen.profiles[0].env.PATH', 'models.qwen.profiles[1].nodes', 'replicas[0].model']);
});
void test('catalog validation: the error message carries the source and every path', () => {
  assert.throws(
    () => loadConfig(model('      - { name: a, engine: vllm, gpu_class: l4, model_path: "" }\n'), 'site.yaml'),
    (e) => e instanceof ConfigError && /^site\.yaml has 1 problem\n {2}models\.qwen\.profiles\[0\]\.model_path: profile "a": model_path is empty/.test(e.message),
  );
});
void test('config: YAML syntax errors and duplicate keys are reported with their line', () => {
  assert.throws(() => loadConfig('node:\n  name: a\n  name: b\n', 'dup.yaml'), (e) => e instanceof ConfigError && /line 3/.test(e.message));
  assert.throws(() => loadConfig('node: [\n', 'broken.yaml'), (e) => e instanceof ConfigError && /broken\.yaml/.test(e.message));
  assert.throws(
    () => loadConfig('node:\n  name: a\n  name: b\n', 'dup.yaml'),
    (e) => e instanceof ConfigError && e.issues.some((i) => i.path === 'line 3, column 3' && i.message === 'Map keys must be unique'),
  );
});
void test('config: an empty file is every default, frozen', () => {
  const c = loadConfig('', 'empty.yaml');
  assert.equal(c.node.name, 'local');
  assert.deepEqual(c.replicas, []);
  assert.ok(Object.isFrozen(c) && Object.isFrozen(c.engines.vllm) && Object.isFrozen(c.node.ports));
});
