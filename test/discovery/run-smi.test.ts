// Running nvidia-smi: a clear error when it is missing, failing or hung, each bounded by a timeout.
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { test } from 'node:test';
import { discoverWithSmi, runNvidiaSmi } from '../../src/discovery/index.js';
import { hasCode } from '../../src/errors/index.js';
import { fakeSmi, fixture, repoRoot } from './fixtures.js';

const hang = join(repoRoot, 'test', 'discovery', 'fixtures', 'hang.mjs');

void test('runNvidiaSmi: a missing binary says so and how to point at another', async () => {
  await assert.rejects(runNvidiaSmi(['-L'], { bin: '/nonexistent/nvidia-smi', timeoutMs: 5000 }), (e: unknown) => hasCode(e, 'LLMGW_NVIDIA_SMI_MISSING') && /--nvidia-smi PATH/.test(e.message));
});

void test('runNvidiaSmi: a failing nvidia-smi gives its exit code and what it said', async () => {
  await assert.rejects(runNvidiaSmi(['-L'], { bin: fakeSmi, timeoutMs: 5000, env: { PATH: process.env.PATH } }), (e: unknown) => hasCode(e, 'LLMGW_NVIDIA_SMI') && /exited 9: NVIDIA-SMI has failed/.test(e.message));
});

void test('runNvidiaSmi: a hung nvidia-smi is stopped at the timeout', async () => {
  await assert.rejects(runNvidiaSmi(['-L'], { bin: hang, timeoutMs: 300 }), (e: unknown) => hasCode(e, 'LLMGW_NVIDIA_SMI') && /no answer within 300 ms/.test(e.message));
});

void test('discoverWithSmi: the fake serves -L, -q -x and the CSV query, joined into one inventory', async () => {
  const inv = await discoverWithSmi({
    bin: fakeSmi,
    timeoutMs: 10_000,
    env: {
      PATH: process.env.PATH,
      FAKE_SMI_LIST: fixture('nvidia-smi-L_4x-a100-sxm4-80gb_gpu0-mig-4x1g.20gb_driver-535.54.03.txt'),
      FAKE_SMI_QUERY_XML: fixture('nvidia-smi-q-x_a100-sxm4-80gb_mig-4x1g.20gb_driver-535.54.03_dtd-v12.xml'),
      FAKE_SMI_CSV: fixture('nvidia-smi-query-gpu-csv_4gpu_uuid-mig-mode-current-pending.csv'),
    },
  });
  assert.equal(inv.source, 'nvidia-smi');
  assert.equal(inv.cards.length, 4);
  assert.equal(inv.cards[0]?.instances.length, 4);
  // The CSV is from another machine: its UUIDs match none of these cards, so it changes nothing.
  assert.equal(inv.cards[1]?.migCurrent, undefined);
  assert.deepEqual(inv.problems, ['-q -x says attached_gpus 4 but holds 1 <gpu> element(s); the elements are what is used']);
});

void test('discoverWithSmi: a hung nvidia-smi costs one timeout, not one per command', async () => {
  const started = Date.now();
  const inv = await discoverWithSmi({ bin: hang, timeoutMs: 400, env: { PATH: process.env.PATH } });
  assert.ok(Date.now() - started < 1_500, `took ${Date.now() - started} ms`);
  assert.equal(inv.cards.length, 0);
  assert.match(inv.problems[0] ?? '', /^nvidia-smi -L: .*no answer within 400 ms; the driver may be hung/);
  assert.match(inv.problems[1] ?? '', /^nvidia-smi -q -x: not run: an earlier nvidia-smi command gave no answer within 400 ms/);
});
