// `llmgw sim` argv: vLLM's flag names map onto the sim's options (A's engine builder writes them),
// every fault flag reaches its option, and --list-devices prints llama.cpp's exact format.
import { strict as assert } from 'node:assert';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { test } from 'node:test';
import { simOptionsFromArgv } from '../../src/cli/sim.js';
import { hasCode } from '../../src/errors/index.js';
import { sharedDir } from '../support/shared.js';

const mainJs = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
const fixtures = join(sharedDir, 'fixtures', 'gpu');
const run = promisify(execFile);

void test('cli: the contract command line maps to options, environment included', () => {
  const o = simOptionsFromArgv(
    [
      'serve', '/models/qwen3', '--host', '127.0.0.1', '--port', '8100', '--served-model-name', 'qwen3', 'qwen', '--block-size', '32',
      '--enable-prefix-caching', '--prefix-caching-hash-algo', 'sha256_cbor',
      '--kv-events-config', '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://127.0.0.1:5600","replay_endpoint":"tcp://*:5700","topic":"kv","buffer_steps":50}',
      '--data-parallel-size', '2', '--lora-modules', 'sql=/models/sql-lora', 'chat=/models/chat', '--max-num-seqs', '8',
      '--kv-capacity-blocks', '512', '--prefill-tokens-per-s=9000', '--decode-tokens-per-s', '40', '--tokenizer', 'bytes',
    ],
    { PYTHONHASHSEED: '0', VLLM_API_KEY: 'sk-1' },
  );
  assert.equal(o.model, '/models/qwen3');
  assert.deepEqual(o.servedModelNames, ['qwen3', 'qwen']);
  assert.equal(o.port, 8100);
  assert.equal(o.blockSizeTokens, 32);
  assert.equal(o.enablePrefixCaching, true);
  assert.equal(o.hashAlgo, 'sha256_cbor');
  assert.equal(o.hashSeed, '0');
  assert.equal(o.apiKey, 'sk-1');
  assert.deepEqual(o.kvEvents, {
    enableKvCacheEvents: true, publisher: 'zmq', endpoint: 'tcp://127.0.0.1:5600', replayEndpoint: 'tcp://*:5700', bufferSteps: 50, hwm: 100_000, maxQueueSize: 100_000, topic: 'kv',
  });
  assert.equal(o.dataParallelSize, 2);
  assert.deepEqual(o.loraModules, [{ name: 'sql', path: '/models/sql-lora' }, { name: 'chat', path: '/models/chat' }]);
  assert.equal(o.maxNumSeqs, 8);
  assert.equal(o.kvCapacityBlocks, 512);
  assert.equal(o.prefillTokensPerS, 9000);
  assert.equal(o.decodeTokensPerS, 40);
  assert.equal(o.tokenizer, 'bytes');
});

void test('cli: each fault flag reaches its option', () => {
  const o = simOptionsFromArgv(
    ['serve', 'm', '--load-time-ms', '1500', '--fail-health-after-ms', '3000', '--crash-after-requests', '5', '--drop-event-batches', '3,7', '--restart-events-after-batches', '4', '--hang', '--fail-lora-loads', 'a,b', '--lora-load-time-ms', '20', '--crash-mid-stream-after-tokens', '9'],
    {},
  );
  assert.deepEqual(o.faults, { loadTimeMs: 1500, failHealthAfterMs: 3000, crashAfterRequests: 5, dropEventBatches: [3, 7], restartEventsAfterBatches: 4, hang: true, crashMidStreamAfterTokens: 9, failLoraLoads: ['a', 'b'] });
  assert.equal(o.loraLoadTimeMs, 20);
});

const badArgv = [
  { why: 'a typo must not become a default', argv: ['serve', 'm', '--prot', '1'] },
  { why: 'the subcommand and model are required', argv: ['--port', '1'] },
  { why: 'a non-number where a number belongs names the flag', argv: ['serve', 'm', '--port', 'eighty'] },
  { why: 'an unknown kv-events field is refused as vLLM refuses it', argv: ['serve', 'm', '--kv-events-config', '{"enable":true}'] },
  { why: 'an adapter needs a name and a path', argv: ['serve', 'm', '--lora-modules', 'sql'] },
  { why: 'contradicting toggles are refused', argv: ['serve', 'm', '--enable-prefix-caching', '--no-enable-prefix-caching'] },
] as const;

for (const row of badArgv) {
  void test(`cli: bad argv is refused: ${row.why}`, () => {
    assert.throws(() => simOptionsFromArgv(row.argv, {}), (e: unknown) => hasCode(e, 'LLMGW_SIM_ARGS') || hasCode(e, 'LLMGW_SIM_OPTIONS'));
  });
}

void test('cli: --list-devices with no devices prints the header and (none), like llama.cpp b10431', async () => {
  const { stdout } = await run(process.execPath, [mainJs, 'sim', '--list-devices'], { timeout: 10_000 });
  assert.equal(stdout, readFileSync(`${fixtures}/llama-server-list-devices_cpu-only_none-marker_b10431_app-captured.txt`, 'utf8'));
});

void test('cli: --list-devices prints the devices given, in llama.cpp lines', async () => {
  const fixture = readFileSync(`${fixtures}/llama-server-list-devices_cuda_2gpu_rtx3080ti+rtx-pro-4000_ollama-log-excerpt_out-of-order.txt`, 'utf8');
  const devices = fixture.split('\n').slice(1, 3).map((l) => l.trim());
  const { stdout } = await run(process.execPath, [mainJs, 'sim', '--list-devices', '--devices', ...devices], { timeout: 10_000 });
  assert.equal(stdout, fixture.split('\n').slice(0, 3).join('\n') + '\n');
});

// A bad flag is a usage error: exit 2 with the flag named, never 1 (a failed load) with a bare "llmgw:".
const usageErrors = [
  { argv: ['sim', 'serve', 'm', '--prot', '1'], says: /unknown flag "--prot"/ },
  { argv: ['sim', 'serve'], says: /expected "llmgw sim serve <model>/ },
  { argv: ['sim', 'serve', 'm', '--port'], says: /--port needs a value/ },
  { argv: ['sim', 'serve', 'm', '--port', '99999'], says: /--port: 99999 is not a TCP port/ },
] as const;
for (const { argv, says } of usageErrors) {
  void test(`cli: llmgw ${argv.join(' ')} exits 2 with the problem and the usage`, async () => {
    const r = await run(process.execPath, [mainJs, ...argv], { timeout: 10_000 }).then(
      () => assert.fail('exited 0'),
      (e: unknown) => e as { code: number; stderr: string },
    );
    assert.equal(r.code, 2);
    assert.match(r.stderr, /^llmgw sim: /);
    assert.match(r.stderr, says);
    assert.match(r.stderr, /usage:/);
  });
}
