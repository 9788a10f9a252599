// A failed shard's reason carries the engine's own last words, so the operator sees what to fix
// without opening the log.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { exitReason } from '../../src/actors/processes.js';

const llamaCorrupt = [
  "0.00.064.437 I srv    load_model: loading model '/m/x.gguf'",
  '0.00.216.667 E read: string length 12 exceeds remaining file size 11 bytes',
  '0.00.356.391 E cmn  common_init_: failed to load model \'/m/x.gguf\'',
  "0.00.356.417 E srv    load_model: failed to load model, '/m/x.gguf'",
  '0.00.356.438 I srv    operator(): operator(): cleaning up before exit...',
  '0.00.363.151 E srv  llama_server: exiting due to model loading error',
];

const rules = [
  { why: 'no output: the exit alone', tail: [], want: 'engine exited with code 1' },
  {
    why: "llama.cpp's last error line, its info lines after it left out",
    tail: llamaCorrupt,
    want: 'engine exited with code 1: 0.00.363.151 E srv  llama_server: exiting due to model loading error',
  },
  { why: 'nothing that looks like an error: the last line as it is', tail: ['starting', 'listening', '', 'bye', ''], want: 'engine exited with code 1: bye' },
];
for (const r of rules) void test(`exitReason: ${r.why}`, () => assert.equal(exitReason('engine exited with code 1', r.tail), r.want));

void test('exitReason: a flood of output is cut to one line a table can show', () => {
  const reason = exitReason('engine exited with code 1', ['x'.repeat(5000) + ' error']);
  assert.equal(reason.length, 'engine exited with code 1: '.length + 100);
  assert.ok(reason.endsWith('…'));
});
