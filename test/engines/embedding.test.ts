// A profile's task: embed and pooling, written as each engine's own switch; refused where an engine
// has none; read from the catalog.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { parseModels } from '../../src/catalog/index.js';
import { LlamaCpp, ProfileError, Sglang, Sim, Trtllm, Vllm, defaultEnginesConfig, defaultKvEventsConfig, type Command, type Engine } from './imports.js';
import { host, profile, shard } from './specs.js';

const kv = defaultKvEventsConfig;
const llmgw = host({ llmgwCommand: ['/usr/bin/node', '/app/main.js'] });
const engines: Record<string, Engine> = {
  vllm: new Vllm(defaultEnginesConfig.vllm, kv),
  sglang: new Sglang(defaultEnginesConfig.sglang),
  trtllm: new Trtllm({ python: '/opt/trt/bin/python3' }),
  llamacpp: new LlamaCpp(defaultEnginesConfig.llamacpp),
  sim: new Sim(defaultEnginesConfig.sim, kv),
};

function argsOf(engine: string, p: Parameters<typeof shard>[1]): readonly string[] {
  const e = engines[engine];
  assert.ok(e !== undefined);
  const cmds: readonly Command[] = e.commands(shard({ httpPort: 8000 }, { engine, ...p }), llmgw);
  const last = cmds.at(-1);
  assert.ok(last !== undefined);
  return last.args;
}
const valueAfter = (a: readonly string[], flag: string): string | undefined => (a.includes(flag) ? a[a.indexOf(flag) + 1] : undefined);

const cases = [
  { why: 'vLLM since 0.10.1 picks the pooling runner by --runner', engine: 'vllm', pooling: 'mean', flags: [['--runner', 'pooling'], ['--pooler-config', '{"pooling_type":"MEAN"}']], own: ['--task', 'embed'] },
  { why: 'the sim plays vLLM, so takes its flags', engine: 'sim', pooling: 'last', flags: [['--runner', 'pooling'], ['--pooler-config', '{"pooling_type":"LAST"}']], own: ['--runner', 'pooling'] },
  { why: 'SGLang serves embeddings with --is-embedding', engine: 'sglang', pooling: undefined, flags: [['--is-embedding']], own: ['--is-embedding'] },
  { why: 'llama-server needs --embeddings, and a pooling its OpenAI route accepts', engine: 'llamacpp', pooling: 'cls', flags: [['--embeddings'], ['--pooling', 'cls']], own: ['--embedding'] },
] as const;
for (const c of cases) {
  void test(`${c.engine}: task embed: ${c.why}; nothing for a generating profile; args win`, () => {
    const args = argsOf(c.engine, { task: 'embed', pooling: c.pooling });
    for (const [flag, value] of c.flags) {
      assert.ok(args.includes(flag), `${flag} in ${args.join(' ')}`);
      if (value !== undefined) assert.equal(valueAfter(args, flag), value);
    }
    const generating = argsOf(c.engine, {});
    for (const [flag] of c.flags) assert.equal(generating.includes(flag), false, `${flag} without task: embed`);
    const own = argsOf(c.engine, { task: 'embed', args: [...c.own] });
    assert.equal(own.filter((a) => a === c.own[0]).length, 1, 'the profile\'s own flag once');
    assert.equal(own.includes(c.flags[0][0]) && c.flags[0][0] !== c.own[0], false, 'and not ours beside it');
  });
}

const refusals = [
  { why: 'trtllm-serve has no embeddings endpoint', engine: 'trtllm', p: { task: 'embed' as const }, field: 'task' },
  { why: 'SGLang has no pooling flag', engine: 'sglang', p: { task: 'embed' as const, pooling: 'mean' as const }, field: 'pooling' },
  { why: 'pooling means nothing to a generating model', engine: 'vllm', p: { pooling: 'mean' as const }, field: 'pooling' },
];
for (const r of refusals) {
  void test(`${r.engine} validate: ${r.why}`, () => {
    assert.throws(
      () => engines[r.engine]?.validate(profile({ engine: r.engine, gpuClass: 'cpu', ...r.p }), []),
      (e) => e instanceof ProfileError && e.field === r.field,
    );
  });
}

void test('catalog: task and pooling are read from a profile; an unknown one is a problem at its path', () => {
  const issues: { path: string; message: string }[] = [];
  const models = parseModels({ m: { profiles: [{ name: 'p', engine: 'sim', gpu_class: 'cpu', model_path: 'e', task: 'embed', pooling: 'mean' }] } }, 'models', issues);
  assert.deepEqual(issues, []);
  assert.equal(models.m?.profiles[0]?.task, 'embed');
  assert.equal(models.m?.profiles[0]?.pooling, 'mean');
  const bad: { path: string; message: string }[] = [];
  parseModels({ m: { profiles: [{ name: 'p', engine: 'sim', gpu_class: 'cpu', model_path: 'e', task: 'rerank', pooling: 'max' }] } }, 'models', bad);
  assert.deepEqual(
    bad.map((i) => i.path),
    ['models.m.profiles[0].task', 'models.m.profiles[0].pooling'],
  );
});
