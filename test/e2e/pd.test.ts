// `llmgw bench e2e --shape pd --quick` as a smoke test of the whole path: both fleets ran the trace,
// every request answered, the disaggregated one through prefill hops, figures well formed; never a speed.
import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { PdReport } from '../../src/e2e/index.js';

void test('bench e2e --shape pd --quick: 2P+2D and 4 aggregated on one trace, with TTFT and ITL of both', async (t) => {
  const out = mkdtempSync(join(tmpdir(), 'llmgw-bench-pd-'));
  t.after(() => rmSync(out, { recursive: true, force: true }));
  const main = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
  const child = spawn(process.execPath, [main, 'bench', 'e2e', '--shape', 'pd', '--quick', '--out', out], { stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = once(child, 'exit');
  t.after(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      await exited;
    }
  });
  let output = '';
  child.stdout.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr.on('data', (c: Buffer) => (output += c.toString()));
  const timer = setTimeout(() => child.kill('SIGTERM'), 240_000);
  const [code] = await exited;
  clearTimeout(timer);
  assert.equal(code, 0, output);
  const report = JSON.parse(readFileSync(join(out, 'pd.json'), 'utf8')) as PdReport;
  assert.deepEqual(report.runs.map((r) => [r.label, r.failed]), [['2P+2D', 0], ['4 aggregated', 0]]);
  const [pd, agg] = report.runs;
  assert.ok(pd && agg);
  assert.ok((pd.prefillHops.sent ?? 0) > 0, JSON.stringify(pd.prefillHops));
  assert.deepEqual(agg.prefillHops, {});
  for (const r of report.runs) assert.ok(Number.isFinite(r.ttftMs.p99) && Number.isFinite(r.itlMs.p99), JSON.stringify(r));
  assert.match(output, /TTFT p50\/p99 .* ITL p50\/p99/);
});
