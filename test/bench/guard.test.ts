// `npm run bench:guard -- --quick` end to end: both benches run, every watched figure is printed
// beside the recorded run with its ratio, the figures are written as JSON, and the recorded run in
// the repository is left alone without --record. No figure is asserted (speed belongs in bench/).
import { strict as assert } from 'node:assert';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { repoRoot } from '../support/shared.js';

const run = promisify(execFile);

void test('bench/guard --quick: decision-time and overhead figures, each beside the recorded run with a ratio, written as JSON; the recorded run untouched', { timeout: 420_000 }, async () => {
  const recordedFile = join(repoRoot, 'docs', 'perf', 'guard.json');
  const recorded = readFileSync(recordedFile, 'utf8');
  const { stdout } = await run(process.execPath, [join(repoRoot, 'dist', 'bench', 'guard.js'), '--quick'], { timeout: 400_000, maxBuffer: 64 * 1024 * 1024 });
  const lines = stdout.split('\n').filter((l) => / \(recorded .*\) ratio /.test(l));
  assert.equal(lines.length, 11, stdout);
  for (const l of lines) assert.match(l, /: [\d.]+ (ms|x) \(recorded ([\d.]+ (ms|x)|n\/a)\) ratio ([\d.]+|n\/a) \((lower|higher) is better: (better|worse|same|no recorded run to compare)\)$/);
  const out = JSON.parse(readFileSync(join(repoRoot, 'bench', 'results', 'guard-quick.json'), 'utf8')) as { mode: string; figures: Record<string, unknown> };
  assert.equal(out.mode, 'quick');
  assert.equal(Object.keys(out.figures).length, 11);
  for (const [k, v] of Object.entries(out.figures)) assert.ok(typeof v === 'number' && Number.isFinite(v), `${k} is ${JSON.stringify(v)}`);
  assert.equal(readFileSync(recordedFile, 'utf8'), recorded, 'only --record writes the recorded run');
});
