// The end-to-end bench: its pure parts (the traces are reproducible and have the shapes asked for;
// the oracle replays LRU block caches the way the sim's pool evicts), and `llmgw bench e2e --quick`
// as a smoke test of the whole path: well-formed results for every policy and workload, never a speed.
import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { generateTrace, oracle, traceTokens, workloadDefaults } from '../../src/e2e/index.js';

void test('workload: the same options give the same trace, with the lengths asked for', async () => {
  const o = { ...workloadDefaults('shared-prefix'), groups: 3, perGroup: 4, prefixTokens: 500, questionTokens: 50 };
  const a = generateTrace(o);
  assert.deepEqual(a, generateTrace(o));
  assert.equal(a.requests.length, 12);
  assert.ok(a.requests.every((r, i) => i === 0 || r.atMs >= (a.requests[i - 1]?.atMs ?? 0)), 'arrivals in order');
  for (const r of a.requests) {
    assert.deepEqual(r.messages.map((m) => [m.role, m.content.length]), [['system', 500], ['user', 50]]);
  }
  // Users of one group share its system prompt; groups do not share theirs.
  const systems = new Map(a.requests.map((r) => [r.group, r.messages[0]?.content]));
  assert.equal(new Set(systems.values()).size, 3);
  assert.ok(a.requests.every((r) => r.messages[0]?.content === systems.get(r.group)));
});

void test('workload: a multi-turn session resends its history and waits for the previous turn', async () => {
  const t = generateTrace({ ...workloadDefaults('multi-turn'), groups: 2, perGroup: 3, prefixTokens: 100, questionTokens: 40, answerTokens: 30 });
  const tokens = await traceTokens(t);
  for (const g of [0, 1]) {
    const turns = t.requests.filter((r) => r.group === g);
    assert.deepEqual(turns.map((r) => r.messages.length), [2, 4, 6]);
    assert.equal(turns[0]?.after, undefined);
    assert.deepEqual(turns.slice(1).map((r) => r.after), turns.slice(0, 2).map((r) => r.id));
    // Turn k's prompt, but for its generation prompt, is a prefix of turn k+1's.
    for (let k = 0; k + 1 < turns.length; k++) {
      const a = tokens[turns[k]?.id ?? -1] ?? [];
      const b = tokens[turns[k + 1]?.id ?? -1] ?? [];
      assert.deepEqual(b.slice(0, a.length - 3), a.slice(0, a.length - 3));
    }
  }
});

const seq = (from: number, n: number): number[] => Array.from({ length: n }, (_, i) => from + i);

void test('oracle: a prefix seen before is a hit, never the last token, on the replica that holds it', () => {
  const fleet = { replicas: 2, capacityBlocks: 64, blockSizeTokens: 4 };
  const shared = seq(1000, 40);
  const r = oracle(
    [
      { tokens: [...shared, 1, 2], outputTokens: 0 },
      { tokens: seq(5000, 40), outputTokens: 0 },
      { tokens: [...shared, 3, 4], outputTokens: 0 },
      { tokens: [...shared], outputTokens: 0 },
    ],
    fleet,
  );
  assert.deepEqual(r.cachedTokens, [0, 0, 40, 36]);
  assert.deepEqual(r.replicaOf, [0, 1, 0, 0]);
  assert.equal(r.totalCachedTokens, 76);
});

void test('oracle: a full cache evicts least recently used blocks, a prompt\'s tail before its head', () => {
  // One replica of 12 blocks of 4 tokens: A (8 blocks) then B (8 blocks) leave room for only 4 of A's,
  // and A's tail went first, so A's first 4 blocks still hit.
  const fleet = { replicas: 1, capacityBlocks: 12, blockSizeTokens: 4 };
  const a = seq(100, 32);
  const b = seq(900, 32);
  const r = oracle(
    [
      { tokens: a, outputTokens: 0 },
      { tokens: b, outputTokens: 0 },
      { tokens: [...a, 7], outputTokens: 0 },
    ],
    fleet,
  );
  assert.deepEqual(r.cachedTokens, [0, 0, 16]);
});

void test('bench e2e --quick: every policy on every workload, with well-formed figures', async (t) => {
  const out = mkdtempSync(join(tmpdir(), 'llmgw-bench-test-'));
  t.after(() => rmSync(out, { recursive: true, force: true }));
  const main = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
  const child = spawn(process.execPath, [main, 'bench', 'e2e', '--quick', '--out', out], { stdio: ['ignore', 'pipe', 'pipe'] });
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
  const report = JSON.parse(readFileSync(join(out, 'e2e.json'), 'utf8')) as {
    quick: boolean;
    oracles: { shape: string; requests: number; cachedTokens: number; hitRate: number }[];
    runs: { policy: string; shape: string; requests: number; failed: number; hitRate: number; oracleShare: number; tokenMismatches: number; ttftMs: { p50: number; p90: number; p99: number }; perReplica: Record<string, number> }[];
  };
  assert.equal(report.quick, true);
  assert.deepEqual(report.oracles.map((o) => o.shape), ['shared-prefix', 'multi-turn', 'long-doc']);
  assert.ok(report.oracles.every((o) => o.requests > 0 && o.cachedTokens > 0 && o.hitRate > 0 && o.hitRate < 1));
  assert.equal(report.runs.length, 12);
  for (const r of report.runs) {
    const what = `${r.policy} on ${r.shape}`;
    assert.equal(r.failed, 0, what);
    assert.equal(r.tokenMismatches, 0, `${what}: the engines counted the prompts as the oracle did`);
    assert.ok(r.hitRate >= 0 && r.hitRate <= 1, what);
    assert.ok(r.oracleShare >= 0 && Number.isFinite(r.oracleShare), what);
    assert.ok(r.ttftMs.p50 > 0 && r.ttftMs.p50 <= r.ttftMs.p90 && r.ttftMs.p90 <= r.ttftMs.p99, what);
    assert.equal(Object.values(r.perReplica).reduce((a, b) => a + b, 0), r.requests, what);
  }
  const svg = readFileSync(join(out, 'e2e.svg'), 'utf8');
  assert.match(svg, /^<svg xmlns="http:\/\/www.w3.org\/2000\/svg"/);
  for (const p of ['round-robin', 'least-load', 'approximate', 'precise']) assert.ok(svg.includes(p), p);
});
