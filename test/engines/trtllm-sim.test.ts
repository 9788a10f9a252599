// TensorRT-LLM (offered only with its interpreter configured) and the sim engine.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { ProfileError, Sim, Trtllm, hasCode, hasHelpCommand, publishesKvEvents, type Command } from './imports.js';
import { envOf, host, profile, shard } from './specs.js';

function only(list: readonly Command[]): Command {
  const [c] = list;
  assert.ok(c !== undefined && list.length === 1);
  return c;
}
function valueAfter(a: readonly string[], flag: string): string | undefined {
  const i = a.indexOf(flag);
  return i < 0 ? undefined : a[i + 1];
}
const trt = new Trtllm({ python: '/opt/trt/bin/python3' });

void test('trtllm validate: refused while engines.trtllm.python is empty, saying what to write', () => {
  assert.throws(
    () => new Trtllm({ python: '' }).validate(profile(), []),
    (e) => e instanceof ProfileError && e.field === 'engine' && /engines\.trtllm\.python/.test(e.message),
  );
});
void test('trtllm validate: one node only (multi-node needs MPI, which llmgw does not drive)', () => {
  assert.throws(() => trt.validate(profile({ nodes: 2, gpusPerNode: 1, tp: 2 }), []), (e) => e instanceof ProfileError && e.field === 'nodes');
});
void test('trtllm validate: adapters come through its options file, not flags', () => {
  assert.throws(() => trt.validate(profile({ adapters: [{ name: 'a', path: '/a' }] }), []), (e) => e instanceof ProfileError && e.field === 'adapters');
});
void test('trtllm: trtllm-serve through the configured interpreter, model first', () => {
  const c = only(trt.commands(shard({ httpPort: 8000 }, { tp: 2, pp: 2, gpusPerNode: 4, servedModelName: 'llama' }), host()));
  assert.equal(c.path, '/opt/trt/bin/python3');
  assert.deepEqual(c.args.slice(0, 3), ['-m', 'tensorrt_llm.commands.serve', '/models/m']);
  assert.equal(valueAfter(c.args, '--host'), '10.0.0.5');
  assert.equal(valueAfter(c.args, '--port'), '8000');
  assert.equal(valueAfter(c.args, '--tp_size'), '2');
  assert.equal(valueAfter(c.args, '--pp_size'), '2');
  assert.equal(valueAfter(c.args, '--served_model_name'), 'llama');
});
void test('trtllm: the key is never on its command line (trtllm-serve checks none)', () => {
  const c = only(trt.commands(shard({ apiKey: 'sk-t' }), host()));
  assert.equal([c.path, ...c.args, ...c.env.map(([k, v]) => `${k}=${v}`)].some((a) => a.includes('sk-t')), false);
});
void test('trtllm: help through the interpreter, the help-command capability', () => {
  assert.ok(hasHelpCommand(trt));
  assert.deepEqual(trt.helpCommand(only(trt.commands(shard(), host()))), { path: '/opt/trt/bin/python3', args: ['-m', 'tensorrt_llm.commands.serve', 'serve', '--help'] });
});

const kv = { hashSeed: '7', hashAlgo: 'sha256_cbor' as const };
const sim = new Sim({ bin: '', blockSize: 16 }, kv);
const llmgw = host({ llmgwCommand: ['/usr/bin/node', '/app/dist/src/cli/main.js'] });

void test('sim: this llmgw sim serve, with exactly the contract flags', () => {
  const c = only(sim.commands(shard({ httpPort: 8100 }, { modelPath: 'qwen3', servedModelName: 'qwen3' }), llmgw));
  assert.equal(c.path, '/usr/bin/node');
  assert.deepEqual(c.args, ['/app/dist/src/cli/main.js', 'sim', 'serve', 'qwen3', '--host', '10.0.0.5', '--port', '8100', '--served-model-name', 'qwen3', '--block-size', '16', '--scheduling-policy', 'priority']);
});
void test('sim: engines.sim.bin wins over this llmgw', () => {
  const c = only(new Sim({ bin: '/usr/local/bin/llmgw', blockSize: 32 }, kv).commands(shard(), llmgw));
  assert.equal(c.path, '/usr/local/bin/llmgw');
  assert.deepEqual(c.args.slice(0, 2), ['sim', 'serve']);
  assert.equal(valueAfter(c.args, '--block-size'), '32');
});
void test('sim: no bin and no host command is an error saying what to write', () => {
  assert.throws(() => sim.commands(shard(), host()), (e) => hasCode(e, 'LLMGW_SIM_BIN') && /engines\.sim\.bin/.test(e.message));
});
void test("sim: KV events with vLLM's flags and environment", () => {
  const c = only(sim.commands(shard({ kvEventsPort: 5600, kvReplayPort: 5601 }, { kvEvents: true }), llmgw));
  assert.ok(c.args.includes('--enable-prefix-caching'));
  assert.equal(valueAfter(c.args, '--prefix-caching-hash-algo'), 'sha256_cbor');
  assert.deepEqual(JSON.parse(valueAfter(c.args, '--kv-events-config') ?? ''), {
    enable_kv_cache_events: true,
    publisher: 'zmq',
    endpoint: 'tcp://127.0.0.1:5600',
    replay_endpoint: 'tcp://127.0.0.1:5601',
    topic: 'kv-events',
  });
  assert.equal(envOf(c).get('VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES'), '1');
});
void test('sim: PYTHONHASHSEED is the configured seed, so its block hashes are reproducible', () => {
  assert.equal(envOf(only(sim.commands(shard(), llmgw))).get('PYTHONHASHSEED'), '7');
});
void test('sim: the key in VLLM_API_KEY, never on the command line', () => {
  const c = only(sim.commands(shard({ apiKey: 'sk-sim' }), llmgw));
  assert.equal(envOf(c).get('VLLM_API_KEY'), 'sk-sim');
  assert.equal(c.args.some((a) => a.includes('sk-sim')), false);
});
void test('sim: adapters as --lora-modules at start, none on demand; profile args last', () => {
  const ad = [{ name: 'sql', path: '/l/sql' }];
  const c = only(sim.commands(shard({}, { adapters: ad, args: ['--max-num-seqs', '8'] }), llmgw));
  assert.equal(valueAfter(c.args, '--lora-modules'), 'sql=/l/sql');
  assert.deepEqual(c.args.slice(-2), ['--max-num-seqs', '8']);
  assert.equal(only(sim.commands(shard({}, { adapters: ad, runtimeLora: true }), llmgw)).args.includes('--lora-modules'), false);
});
void test('sim: spans nodes with vLLM\'s mp flags, the workers headless', () => {
  sim.validate(profile({ nodes: 2, gpusPerNode: 1, tp: 2 }), []);
  const leader = only(sim.commands(shard({ rank: 0, nNodes: 2, leaderAddr: '10.0.0.1', leaderPort: 29500 }, { nodes: 2, gpusPerNode: 1, tp: 2 }), llmgw));
  assert.equal(valueAfter(leader.args, '--nnodes'), '2');
  assert.equal(valueAfter(leader.args, '--node-rank'), '0');
  assert.equal(valueAfter(leader.args, '--master-addr'), '10.0.0.1');
  assert.equal(valueAfter(leader.args, '--master-port'), '29500');
  assert.equal(leader.args.includes('--headless'), false);
  const worker = only(sim.commands(shard({ rank: 1, nNodes: 2, leaderAddr: '10.0.0.1', leaderPort: 29500 }, { nodes: 2, gpusPerNode: 1, tp: 2 }), llmgw));
  assert.equal(valueAfter(worker.args, '--node-rank'), '1');
  assert.equal(worker.args.includes('--headless'), true);
});
void test('vllm and sim publish KV events; the others do not', () => {
  assert.equal(publishesKvEvents(sim), true);
  assert.equal(publishesKvEvents(trt), false);
});
