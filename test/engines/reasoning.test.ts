// A profile's reasoning_parser, in vLLM's names, written as each engine's own flag.
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
  { engine: 'vllm', parser: 'deepseek_r1', flag: '--reasoning-parser', want: 'deepseek_r1' },
  { engine: 'sim', parser: 'qwen3', flag: '--reasoning-parser', want: 'qwen3' },
  { engine: 'sglang', parser: 'deepseek_r1', flag: '--reasoning-parser', want: 'deepseek-r1' },
  { engine: 'trtllm', parser: 'deepseek_r1', flag: '--reasoning_parser', want: 'deepseek-r1' },
  { engine: 'llamacpp', parser: 'qwen3', flag: '--reasoning-format', want: 'deepseek' },
];
for (const c of cases) {
  void test(`${c.engine}: reasoning_parser ${c.parser} is ${c.flag} ${c.want}; none without it; args win`, () => {
    assert.equal(valueAfter(argsOf(c.engine, { reasoningParser: c.parser }), c.flag), c.want);
    assert.equal(argsOf(c.engine, {}).includes(c.flag), false);
    const own = argsOf(c.engine, { reasoningParser: c.parser, args: [c.flag, 'mine'] });
    assert.equal(own.filter((a) => a === c.flag).length, 1);
    assert.equal(valueAfter(own, c.flag), 'mine');
  });
}

void test('sim validate: a parser the sim does not implement is refused, naming those it does', () => {
  assert.throws(
    () => engines.sim?.validate(profile({ engine: 'sim', gpuClass: 'cpu', reasoningParser: 'granite' }), []),
    (e) => e instanceof ProfileError && e.field === 'reasoning_parser' && /qwen3, deepseek_r1/.test(e.message),
  );
});

void test('catalog: reasoning_parser is read from a profile', () => {
  const issues: { path: string; message: string }[] = [];
  const models = parseModels({ m: { profiles: [{ name: 'p', engine: 'sim', gpu_class: 'cpu', model_path: 'qwen3', reasoning_parser: 'qwen3' }] } }, 'models', issues);
  assert.deepEqual(issues, []);
  assert.equal(models.m?.profiles[0]?.reasoningParser, 'qwen3');
});
