// SGLang's commands: documented launch options, multi-node by dist-init address, and the API key kept
// off the command line although SGLang takes it only as a flag.
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { Sglang, hasHelpCommand, sglangKeyVar, type Command } from './imports.js';
import { envOf, host, shard } from './specs.js';

const sglang = new Sglang({ python: '/opt/sglang/bin/python3' });
function only(list: readonly Command[]): Command {
  const [c] = list;
  assert.ok(c !== undefined && list.length === 1);
  return c;
}
function valueAfter(a: readonly string[], flag: string): string | undefined {
  const i = a.indexOf(flag);
  return i < 0 ? undefined : a[i + 1];
}

void test('sglang: the launcher module under the configured interpreter, with model, host, port, tp and name', () => {
  const c = only(sglang.commands(shard({ httpPort: 30000 }, { tp: 2, gpusPerNode: 2, servedModelName: 'qwen' }), host()));
  assert.equal(c.path, '/opt/sglang/bin/python3');
  assert.deepEqual(c.args.slice(0, 2), ['-m', 'sglang.launch_server']);
  assert.equal(valueAfter(c.args, '--model-path'), '/models/m');
  assert.equal(valueAfter(c.args, '--host'), '10.0.0.5');
  assert.equal(valueAfter(c.args, '--port'), '30000');
  assert.equal(valueAfter(c.args, '--tp-size'), '2');
  assert.equal(valueAfter(c.args, '--served-model-name'), 'qwen');
  assert.equal(c.args.includes('--pp-size'), false);
});
void test('sglang: pipeline parallelism when above one', () => {
  assert.equal(valueAfter(only(sglang.commands(shard({}, { tp: 2, pp: 2, gpusPerNode: 4 }), host())).args, '--pp-size'), '2');
});
void test('sglang multi-node: every node runs the launcher with its rank and the leader dist-init address', () => {
  const c = only(sglang.commands(shard({ rank: 1, nNodes: 2 }, { tp: 8, gpusPerNode: 4, nodes: 2 }), host()));
  assert.equal(valueAfter(c.args, '--nnodes'), '2');
  assert.equal(valueAfter(c.args, '--node-rank'), '1');
  assert.equal(valueAfter(c.args, '--dist-init-addr'), '10.0.0.1:29500');
  assert.equal(valueAfter(c.args, '--tp-size'), '8', 'tp is the whole replica degree');
});
void test('sglang: only rank 0 serves HTTP', () => {
  assert.equal(sglang.servesHttp(shard({ rank: 0, nNodes: 2 })), true);
  assert.equal(sglang.servesHttp(shard({ rank: 1, nNodes: 2 })), false);
});
void test('sglang: --enable-metrics, without it there is no /metrics to route by', () => {
  assert.ok(only(sglang.commands(shard(), host())).args.includes('--enable-metrics'));
});
void test('sglang LoRA at start: adapters registered by name', () => {
  const c = only(sglang.commands(shard({}, { adapters: [{ name: 'sql', path: '/l/sql' }] }), host()));
  assert.equal(valueAfter(c.args, '--lora-paths'), 'sql=/l/sql');
});
void test('sglang LoRA on demand: LoRA switched on, nothing loaded', () => {
  const c = only(sglang.commands(shard({}, { adapters: [{ name: 'sql', path: '/l/sql' }], runtimeLora: true }), host()));
  assert.ok(c.args.includes('--enable-lora'));
  assert.equal(c.args.includes('--lora-paths'), false);
});
void test('sglang: profile args last', () => {
  assert.deepEqual(only(sglang.commands(shard({}, { args: ['--mem-fraction-static', '0.8'] }), host())).args.slice(-2), ['--mem-fraction-static', '0.8']);
});
void test('sglang: the API key travels in the environment, never on the command line', () => {
  const c = only(sglang.commands(shard({ apiKey: 'sk-sg' }), host()));
  assert.equal(envOf(c).get(sglangKeyVar), 'sk-sg');
  assert.equal([c.path, ...c.args].some((a) => a.includes('sk-sg')), false);
  assert.equal(c.args[0], '-c', 'a bootstrap moves it into sys.argv inside the process');
});
void test('sglang: help through the interpreter (its path is python, not SGLang)', () => {
  assert.ok(hasHelpCommand(sglang));
  const c = only(sglang.commands(shard({ apiKey: 'k' }), host()));
  assert.deepEqual(sglang.helpCommand(c), { path: '/opt/sglang/bin/python3', args: ['-m', 'sglang.launch_server', '--help'] });
});

// The bootstrap run for real against a stand-in sglang.launch_server: the key reaches the launcher's
// argv, is gone from the environment its children inherit, and never appears in the kernel's copy of
// the command line (/proc/<pid>/cmdline), which every user can read.
void test('sglang key bootstrap: the launcher gets --api-key; /proc cmdline and child env never hold it', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-sglang-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  mkdirSync(join(dir, 'sglang'));
  writeFileSync(join(dir, 'sglang', '__init__.py'), '');
  writeFileSync(
    join(dir, 'sglang', 'launch_server.py'),
    [
      'import json, os, sys',
      'if __name__ == "__main__":',
      '    cmdline = open("/proc/self/cmdline", "rb").read().decode().split("\\0")',
      `    print(json.dumps({"argv": sys.argv[1:], "env": "${sglangKeyVar}" in os.environ, "cmdline": cmdline}))`,
    ].join('\n'),
  );
  const c = only(new Sglang({ python: '/usr/bin/python3' }).commands(shard({ apiKey: 'sk-proof' }), host()));
  const out = execFileSync('/usr/bin/python3', c.args, {
    env: { ...Object.fromEntries(c.env), PYTHONPATH: dir },
    encoding: 'utf8',
    timeout: 20_000,
  });
  const r = JSON.parse(out) as { argv: string[]; env: boolean; cmdline: string[] };
  assert.deepEqual(r.argv.slice(0, 2), ['--api-key', 'sk-proof']);
  assert.equal(r.argv.includes('--model-path'), true);
  assert.equal(r.env, false);
  assert.equal(r.cmdline.some((a) => a.includes('sk-proof')), false);
});
