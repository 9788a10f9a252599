// The benches' --quick mode runs end to end and writes well-formed results: what `npm run bench`
// prints must not rot between the times someone measures. No figure is asserted (speed belongs in
// bench/, on a quiet machine); only that every figure is there and is a number.
import { strict as assert } from 'node:assert';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { repoRoot } from '../support/shared.js';

const run = promisify(execFile);

function numbers(o: unknown, path: string, keys: readonly string[]): void {
  for (const k of keys) {
    const v: unknown = typeof o === 'object' && o !== null && k in o ? Object.entries(o).find(([key]) => key === k)?.[1] : undefined;
    assert.equal(typeof v, 'number', `${path}.${k} is ${JSON.stringify(v)}`);
    assert.ok(Number.isFinite(v), `${path}.${k} is not finite`);
  }
}

void test('bench/tokenize --quick: prints the conversation and cold-prompt figures and writes them as JSON', { timeout: 180_000 }, async () => {
  const { stdout } = await run(process.execPath, [join(repoRoot, 'dist', 'bench', 'tokenize.js'), '--quick'], { timeout: 170_000 });
  assert.match(stdout, /decision p50 [\d.]+ ms, p99 [\d.]+ ms/);
  assert.match(stdout, /beside a bare tokenizers encode/);
  const out = JSON.parse(readFileSync(join(repoRoot, 'bench', 'results', 'tokenize-quick.json'), 'utf8')) as Record<string, unknown>;
  assert.equal(out.bench, 'tokenize');
  numbers(out.conversation, 'conversation', ['finalPromptTokens', 'decisionP50Ms', 'decisionP99Ms', 'decisionP95Ms', 'decisionsOver3Ms', 'decisionsTimed', 'eventLoopPerDecisionP50Ms', 'firstTurnColdMs', 'nextTurnPreparedP50Ms']);
  numbers(out.cold, 'cold', ['promptTokens', 'decisionP50Ms', 'bareEncodeP50Ms', 'ratio']);
});

void test('bench/tool-render --quick: prints the tool chat\'s render times and ratios and writes them as JSON', { timeout: 120_000 }, async () => {
  const { stdout } = await run(process.execPath, [join(repoRoot, 'dist', 'bench', 'tool-render.js'), '--quick'], { timeout: 110_000 });
  assert.match(stdout, /promptTextOf p50: [\d.]+ ms; the same written with numbers only Python writes so [\d.]+ ms \([\d.]+x\)/);
  const out = JSON.parse(readFileSync(join(repoRoot, 'bench', 'results', 'tool-render-quick.json'), 'utf8')) as Record<string, unknown>;
  assert.equal(out.bench, 'tool-render');
  numbers(out.p50Ms, 'p50Ms', ['ordinary', 'pythonNumbers', 'noTools']);
  numbers(out, 'tool-render', ['pythonNumbersOverOrdinary', 'ordinaryOverNoTools']);
});

void test('bench/overhead --quick: llmgw with and without precise routing, nginx, a bare and a raw Node.js proxy and one engine under wrk, with the CPU each spends a request, written as JSON', { timeout: 180_000 }, async () => {
  const { stdout } = await run(process.execPath, [join(repoRoot, 'dist', 'bench', 'overhead.js'), '--quick'], { timeout: 170_000 });
  assert.match(stdout, /x nginx's/);
  const out = JSON.parse(readFileSync(join(repoRoot, 'bench', 'results', 'overhead-quick.json'), 'utf8')) as Record<string, unknown>;
  assert.equal(out.bench, 'overhead');
  assert.match(stdout, /proxy CPU a request, all threads: llmgw [\d.]+ \(main thread [\d.]+\) ms/);
  const field = (o: unknown, k: string): unknown => (typeof o === 'object' && o !== null ? Object.entries(o).find(([key]) => key === k)?.[1] : undefined);
  assert.match(stdout, /llmgw's CPU a request, from the runs above: [\d.]+ ms the transport/);
  for (const name of ['llmgw', 'llmgwLoad', 'nginx', 'bare', 'raw', 'direct']) {
    numbers(out[name], name, ['perS', 'requests', 'p50Ms', 'p99Ms', 'errors']);
    numbers(field(field(out[name], 'cpuMs'), 'engines'), `${name}.cpuMs.engines`, ['mainMs', 'otherMs']);
    if (name !== 'direct') numbers(field(field(out[name], 'cpuMs'), 'proxy'), `${name}.cpuMs.proxy`, ['mainMs', 'otherMs']);
  }
  numbers(out, 'overhead', ['llmgwOverNginxRps', 'llmgwMinusNginxP50Ms', 'bareOverNginxRps', 'llmgwOverBareRps', 'llmgwLoadOverNginxRps', 'rawOverNginxRps', 'llmgwOverBareCpu', 'rawOverBareCpu']);
  numbers(out.cpuBudgetMs, 'cpuBudgetMs', ['transport', 'gateway', 'preciseRouting']);
  numbers(field(out.nginx, 'cpuMs'), 'nginx.cpuMs', ['machine']);
  numbers(out, 'overhead', ['proxyCpuAllowedMs']);
  numbers(out.unqueued, 'unqueued', ['connections', 'llmgwMinusNginxP50Ms']);
  numbers(field(out.unqueued, 'llmgw'), 'unqueued.llmgw', ['perS', 'p50Ms']);
  assert.match(stdout, /one connection, nothing queued: llmgw p50 [\d.]+ ms vs nginx [\d.]+ ms/);
  assert.match(stdout, /what 0\.7x nginx's rate allows: [\d.-]+ ms of proxy CPU a request/);
});
