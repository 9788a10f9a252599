// What each engine tells the gateway about serving an adapter: the call that loads and unloads it at
// run time and the fields a request naming it carries. One row per engine rule.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { Registry, defaultEnginesConfig, defaultKvEventsConfig, hasCode, servesAdapters, type AdapterAccess, type Profile } from './imports.js';
import { profile } from './specs.js';

const engines = new Registry(defaultEnginesConfig, defaultKvEventsConfig);
const adapters = [
  { name: 'sql', path: '/l/sql' },
  { name: 'poet', path: '/l/poet' },
];

function access(engine: string, p: Partial<Profile>): AdapterAccess {
  const e = engines.get(engine);
  assert.ok(servesAdapters(e), `${engine} serves adapters`);
  return e.adapterAccess(profile({ engine, adapters, ...p }));
}

const rules = [
  {
    why: 'vllm on demand: /v1/load_lora_adapter with name and path, the name as the model',
    engine: 'vllm',
    p: { runtimeLora: true },
    want: {
      name: 'poet',
      requestFields: {},
      load: { path: '/v1/load_lora_adapter', body: { lora_name: 'poet', lora_path: '/l/poet' } },
      unload: { path: '/v1/unload_lora_adapter', body: { lora_name: 'poet' } },
    },
  },
  { why: 'vllm at start: registered by --lora-modules, nothing to load', engine: 'vllm', p: {}, want: { name: 'poet', requestFields: {}, load: undefined, unload: undefined } },
  {
    why: 'the sim speaks vLLM: the same routes',
    engine: 'sim',
    p: { runtimeLora: true },
    want: {
      name: 'poet',
      requestFields: {},
      load: { path: '/v1/load_lora_adapter', body: { lora_name: 'poet', lora_path: '/l/poet' } },
      unload: { path: '/v1/unload_lora_adapter', body: { lora_name: 'poet' } },
    },
  },
  {
    why: 'sglang on demand: /load_lora_adapter; a request keeps the base name and names the adapter in lora_path',
    engine: 'sglang',
    p: { runtimeLora: true },
    want: {
      name: 'poet',
      requestFields: { model: 'm', lora_path: 'poet' },
      load: { path: '/load_lora_adapter', body: { lora_name: 'poet', lora_path: '/l/poet' } },
      unload: { path: '/unload_lora_adapter', body: { lora_name: 'poet' } },
    },
  },
  {
    why: 'llama.cpp applies a start-time adapter by its index in the profile at scale 1, and loads nothing',
    engine: 'llamacpp',
    p: {},
    want: { name: 'poet', requestFields: { model: 'm', lora: [{ id: 1, scale: 1 }] }, load: undefined, unload: undefined },
  },
  {
    why: 'an unnamed base model is served under its path, so that is the name a request keeps',
    engine: 'llamacpp',
    p: { servedModelName: '' },
    want: { name: 'poet', requestFields: { model: '/models/m', lora: [{ id: 1, scale: 1 }] }, load: undefined, unload: undefined },
  },
];
for (const r of rules) {
  void test(`adapter access: ${r.why}`, () => {
    const a = access(r.engine, r.p);
    assert.deepEqual(a.adapters.map((x) => x.name), ['sql', 'poet']);
    assert.deepEqual(a.adapters[1], r.want);
  });
}

const bounds = [
  { why: 'vllm holds --max-cpu-loras adapters in memory', engine: 'vllm', args: ['--max-cpu-loras', '3'], want: 3 },
  { why: 'vllm without the flag leaves the bound to the gateway', engine: 'vllm', args: [], want: undefined },
  { why: 'sglang holds --max-loaded-loras', engine: 'sglang', args: ['--max-loaded-loras=5'], want: 5 },
  { why: 'a nonsense bound is no bound', engine: 'sglang', args: ['--max-loaded-loras', 'lots'], want: undefined },
];
for (const r of bounds) {
  void test(`adapter access: ${r.why}`, () => assert.equal(access(r.engine, { runtimeLora: true, args: r.args }).maxLoaded, r.want));
}

void test('adapter access: trtllm serves no adapters through llmgw', () => assert.equal(servesAdapters(engines.get('trtllm')), false));

void test('llama.cpp refuses runtime_lora: it has no route that loads an adapter', () => {
  assert.throws(
    () => engines.get('llamacpp').validate(profile({ engine: 'llamacpp', adapters, runtimeLora: true, gpuClass: 'cpu' }), []),
    (e) => hasCode(e, 'LLMGW_PROFILE') && /runtime_lora: false/.test((e as Error).message),
  );
});
