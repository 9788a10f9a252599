// bench/epp --quick runs end to end and writes well-formed results: the decision times through
// ext_proc and in-process, and the hit rates beside the oracle's. No figure is asserted (speed
// belongs in bench/); only that every figure is there and is a number.
import { strict as assert } from 'node:assert';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { repoRoot } from '../support/shared.js';

const run = promisify(execFile);

const isNumber = (v: unknown): boolean => typeof v === 'number' && Number.isFinite(v);

void test('bench/epp --quick: prints decision times through ext_proc and in-process and both hit rates, and writes them as JSON', { timeout: 180_000 }, async () => {
  const { stdout } = await run(process.execPath, [join(repoRoot, 'dist', 'bench', 'epp.js'), '--quick'], { timeout: 170_000 });
  assert.match(stdout, /decision, 20k-token turn: ext_proc p50 [\d.]+ ms p99 [\d.]+ ms; in-process p50 [\d.]+ ms p99 [\d.]+ ms; ratio p50 [\d.]+x/);
  assert.match(stdout, /serve precise: hit [\d.]+, share of oracle [\d.]+/);
  assert.match(stdout, /epp \(ext_proc\): hit [\d.]+, share of oracle [\d.]+/);
  const out = JSON.parse(readFileSync(join(repoRoot, 'bench', 'results', 'epp-quick.json'), 'utf8')) as {
    bench: string;
    decision: Record<string, { extProcMs: Record<string, unknown>; inProcessMs: Record<string, unknown>; ratioP50: unknown; ratioP99: unknown }>;
    hitRate: { oracle: unknown; serve: Record<string, unknown>; epp: Record<string, unknown> };
  };
  assert.equal(out.bench, 'epp');
  assert.deepEqual(Object.keys(out.decision), ['20k-token turn', 'short chat']);
  for (const [name, d] of Object.entries(out.decision)) {
    for (const k of ['p50', 'p99']) assert.ok(isNumber(d.extProcMs[k]) && isNumber(d.inProcessMs[k]), `${name} ${k}`);
    assert.ok(isNumber(d.ratioP50) && isNumber(d.ratioP99), name);
  }
  assert.ok(isNumber(out.hitRate.oracle));
  for (const side of [out.hitRate.serve, out.hitRate.epp]) for (const k of ['hitRate', 'oracleShare', 'ttftP50Ms', 'failed']) assert.ok(isNumber(side[k]), k);
  assert.equal(out.hitRate.epp.failed, 0, 'every request through the EPP was answered');
});
