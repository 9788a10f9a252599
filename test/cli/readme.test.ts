// The README's first screen, run as a new user would after `npm start`: the commands it shows are
// taken from the README itself, so an edit that breaks what the text promises fails here.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { defaultConfigYaml } from '../../src/cli/default-config.js';
import { llmgwMain, startServe } from '../support/serve.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const readme = readFileSync(join(root, 'README.md'), 'utf8');

// The event the README says to wait for, and the first shell block after that sentence.
function firstTry(): { event: string; script: string } {
  const said = /Once `npm start` logs `([\w.]+)`/.exec(readme);
  assert.ok(said?.[1] !== undefined, 'the README no longer says what to try after npm start');
  const block = /```sh\n([\s\S]*?)```/.exec(readme.slice(said.index));
  assert.ok(block?.[1] !== undefined, 'no shell block after it');
  return { event: said[1], script: block[1] };
}

test("the README's first commands do what its text says on the embedded default", async (t) => {
  const { event, script: shown } = firstTry();
  // The README names the event startServe waits for: a renamed event fails here, not on a reader's terminal.
  assert.equal(event, 'serve.ready');
  const served = await startServe(t, (p) =>
    defaultConfigYaml
      .replace('port: 8080', `port: ${p.port}`)
      .replace('http_base: 8100', `http_base: ${p.http}`)
      .replace('kv_events_base: 5600', `kv_events_base: ${p.kv}`),
  );
  const here = `127.0.0.1:${served.port}`;
  const script = shown.replaceAll('127.0.0.1:8080', here);
  const run = spawnSync('bash', ['-c', script], { encoding: 'utf8', timeout: 60_000 });
  assert.equal(run.status, 0, run.stderr);
  const routes = [...run.stdout.matchAll(/^x-llmgw-route: (\S+)/gim)].map((m) => m[1]);
  assert.deepEqual(routes, ['load', 'precise'], run.stdout);
  assert.match(run.stdout, /^llmgw_prefix_decisions_total\{[^}]*tier="precise"[^}]*\} 1$/m);

  assert.match(readme, /<http:\/\/127\.0\.0\.1:8080\/debug\/actors>/);
  const page = await fetch(`http://${here}/debug/actors`);
  assert.equal(page.status, 200);
  await page.body?.cancel();

  // `npx llmgw` runs the checkout's own bin, which the build leaves executable.
  assert.match(readme, /run `npx llmgw ctl status`/);
  const status = spawnSync(llmgwMain, ['ctl', 'status', '--url', `http://${here}`], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(status.status, 0, status.stderr);
  assert.match(status.stdout, /replica/);
  assert.match(status.stdout, /ready/);
});
