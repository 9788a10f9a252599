// The README's tour, run as a newcomer runs it: every shell block marked `<!-- tour: NAME -->` is run
// with bash, in the README's order, against `llmgw serve` on the embedded default, and what it prints
// is compared with the text block the README shows under it. An edit that makes the README promise
// what llmgw does not do (or a change to llmgw that breaks the README) fails here.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { defaultConfigYaml } from '../../src/cli/default-config.js';
import { llmgwMain, startServe } from '../support/serve.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const readme = readFileSync(join(root, 'README.md'), 'utf8');

interface Step {
  readonly name: string;
  readonly script: string;
  readonly shown: string;
}

// A marked step is its comment, a ```sh block, a blank line and the ```text block of what it prints.
function tourSteps(): Step[] {
  const steps = [...readme.matchAll(/<!-- tour: ([\w-]+) -->\n```sh\n([\s\S]*?)```\n\n```text\n([\s\S]*?)```/g)].map((m) => ({
    name: m[1] ?? '',
    script: m[2] ?? '',
    shown: m[3] ?? '',
  }));
  const marked = readme.match(/<!-- tour: /g)?.length ?? 0;
  assert.equal(steps.length, marked, 'a marked step is not followed by a ```sh block, a blank line and a ```text block');
  return steps;
}

// What differs from run to run, replaced by one stand-in on both sides before they are compared.
const varying: readonly (readonly [RegExp, string])[] = [
  [/\r$/gm, ''], // HTTP header lines end in CRLF
  [/qwen3-sim-cpu-\d/g, 'qwen3-sim-cpu-N'], // which of two idle replicas the first request goes to
  [/\bsk-llmgw-[\w-]+/g, 'sk-llmgw-SECRET'],
  [/\bkey_[0-9a-f]+\b/g, 'key_ID'],
  [/\b\d+(?:ms|s|m|h)\b/g, 'TIME'], // receipts' estimated TTFT, ctl status's "since"
  [/\b(?:waiting|streaming)\b/g, 'waiting-or-streaming'], // a publisher streams from its engine's first KV event on
  [/ {2,}/g, '  '], // a table's columns are padded to its widest cell
];
const normal = (text: string): string => varying.reduce((t, [re, to]) => t.replace(re, to), text).trimEnd();

// bash in its own process group, so a step that times out is killed with what it started in the
// background (the kill step's curl), not left to outlive the suite.
async function bash(script: string, env: NodeJS.ProcessEnv, timeoutMs: number): Promise<{ code: number | null; out: string; err: string }> {
  const child = spawn('bash', ['-s'], { cwd: root, env, detached: true, stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
  child.stdin.end(script);
  const timer = setTimeout(() => {
    if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
  }, timeoutMs);
  try {
    const [code] = (await once(child, 'exit')) as [number | null];
    return { code, out, err };
  } finally {
    clearTimeout(timer);
  }
}

test('the README tour: every marked block prints what the README shows, on the embedded default', async (t) => {
  assert.match(readme, /Once `npm start` logs `serve\.ready`/, 'the README says what to wait for; startServe waits for the same event');
  const steps = tourSteps();
  assert.deepEqual(steps.map((s) => s.name), ['route', 'agent', 'status', 'kill', 'keys']);
  const served = await startServe(t, (p) =>
    defaultConfigYaml
      .replace('port: 8080', `port: ${p.port}`)
      .replace('http_base: 8100', `http_base: ${p.http}`)
      .replace('kv_events_base: 5600', `kv_events_base: ${p.kv}`),
  );
  t.after(() => {
    for (const f of ['/tmp/think.head', '/tmp/think.sse']) rmSync(f, { force: true });
  });
  // The default's ports may be taken on a shared machine (another engineer's npm start), so the
  // gateway and the sims run on free ones, and the blocks are changed in exactly the two places that
  // name them: the gateway's host:port, and the sims' port base in the kill step. `llmgw ctl`, which
  // defaults to 127.0.0.1:8080, is pointed at the same gateway by LLMGW_URL.
  const here = `127.0.0.1:${served.port}`;
  const env: NodeJS.ProcessEnv = { ...process.env, LLMGW_URL: `http://${here}/` };
  delete env.LLMGW_ADMIN_KEY;
  // Before the keys step, after which the page too wants a key.
  assert.match(readme, /<http:\/\/127\.0\.0\.1:8080\/debug\/actors>/);
  const page = await fetch(`http://${here}/debug/actors`);
  assert.equal(page.status, 200);
  await page.body?.cancel();
  for (const step of steps) {
    const script = step.script.replaceAll('127.0.0.1:8080', here).replaceAll('$((8100 + n))', `$((${served.http} + n))`);
    const run = await bash(script, env, 180_000);
    assert.equal(run.code, 0, `${step.name}: bash exited ${String(run.code)}\n${run.err}`);
    assert.equal(normal(run.out), normal(step.shown), `${step.name} printed:\n${run.out}\nstderr:\n${run.err}`);
  }
  assert.ok(readme.includes('$((8100 + n))'), 'the kill step names the sims by the default port base');
});

test("the README's commands table names every command llmgw --help lists, and every ctl view", () => {
  const table = /## Commands\n([\s\S]*?)\n## /.exec(readme)?.[1] ?? '';
  const help = (argv: readonly string[]): string => spawnSync(process.execPath, [llmgwMain, ...argv], { encoding: 'utf8', timeout: 30_000 }).stdout;
  const commands = [...help(['--help']).matchAll(/^ {2}([a-z]+) /gm)].map((m) => m[1] ?? '');
  assert.ok(commands.includes('serve') && commands.includes('epp'), help(['--help']));
  const views = [...new Set([...help(['ctl', '--help']).matchAll(/llmgw ctl ([a-z]+)/g)].map((m) => `ctl ${m[1] ?? ''}`))];
  assert.ok(views.includes('ctl usage'));
  const missing = [...commands, ...views].filter((c) => !table.includes(`\`llmgw ${c}`));
  assert.deepEqual(missing, [], "commands the README's table does not list");
});
