// gateway.batch: OpenAI's limits by default, every knob settable by its snake_case key, and each
// problem reported with its path and the fix.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { batchDefaults, parseBatchFile } from '../../src/batch/index.js';
import { ConfigError } from '../../src/errors/index.js';
import { parseGatewayConfig } from '../../src/gateway/index.js';
import { jsonl } from './harness.js';

const problems = (raw: unknown): string[] => {
  try {
    parseGatewayConfig(raw);
  } catch (e) {
    if (e instanceof ConfigError) return e.issues.map((i) => `${i.path}: ${i.message}`);
    throw e;
  }
  return [];
};

void test('batch config: OpenAI\'s limits and a gentle pace by default', () => {
  assert.deepEqual(parseGatewayConfig(undefined).batch, batchDefaults);
  assert.deepEqual(parseGatewayConfig({ batch: {} }).batch, batchDefaults);
  assert.deepEqual(batchDefaults, { maxFileBytes: 200 * 1024 * 1024, maxLines: 50_000, linesInFlight: 8, pollIntervalMs: 500, leaseMs: 30_000, maxPauseMs: 30_000 });
});

void test('batch config: every knob settable by its snake_case key', () => {
  const c = parseGatewayConfig({ batch: { max_file_bytes: 1 << 20, max_lines: 100, lines_in_flight: 2, poll_interval_ms: 100, lease_ms: 1_000, max_pause_ms: 5_000 } }).batch;
  assert.deepEqual(c, { maxFileBytes: 1 << 20, maxLines: 100, linesInFlight: 2, pollIntervalMs: 100, leaseMs: 1_000, maxPauseMs: 5_000 });
  assert.ok(Object.isFrozen(c));
});

void test('batch config: bad values and unknown keys are reported with their path and the fix', () => {
  const p = problems({ batch: { max_file_bytes: 600 * 1024 * 1024, lines_in_flight: 0, max_lines: 'many', maxLines: 3 } });
  assert.ok(p.some((x) => x.startsWith('gateway.batch.max_file_bytes: 629145600 is not a whole number from 1024 to 536870912')), p.join('\n'));
  assert.ok(p.some((x) => x.startsWith('gateway.batch.lines_in_flight: 0 is not a whole number from 1 to 10000')), p.join('\n'));
  assert.ok(p.some((x) => x.startsWith('gateway.batch.max_lines: "many" is not a whole number')), p.join('\n'));
  assert.ok(p.some((x) => x.startsWith('gateway.batch.maxLines:')), p.join('\n'));
});

void test('batch config: a lease under three poll intervals, or a pause under one, is refused', () => {
  assert.deepEqual(problems({ batch: { poll_interval_ms: 1_000, lease_ms: 2_999 } }), [
    'gateway.batch.lease_ms: 2999 is under three poll intervals (poll_interval_ms 1000): the lease would run out between renewals and another gateway would send the same lines; raise lease_ms or lower poll_interval_ms',
  ]);
  assert.deepEqual(problems({ batch: { poll_interval_ms: 1_000, lease_ms: 3_000 } }), []);
  assert.deepEqual(problems({ batch: { poll_interval_ms: 1_000, max_pause_ms: 999 } }), [
    'gateway.batch.max_pause_ms: 999 is under poll_interval_ms (1000), the shortest pause; raise max_pause_ms to at least 1000',
  ]);
});

void test('batch config: a file over max_lines fails validation as too_many_tasks naming the setting; at it, it passes', () => {
  const over = parseBatchFile(jsonl(4), '/v1/chat/completions', 3);
  assert.deepEqual(over.lines, []);
  assert.deepEqual(over.errors.map((e) => [e.code, e.message]), [['too_many_tasks', 'the input file has 4 requests; a batch takes at most 3 (gateway.batch.max_lines)']]);
  assert.equal(parseBatchFile(jsonl(3), '/v1/chat/completions', 3).lines.length, 3);
});
