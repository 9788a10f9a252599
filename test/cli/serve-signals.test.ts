// `llmgw serve` as an operator meets it: closing its terminal (SIGHUP) drains and stops it and its
// engines rather than leaving the engines running, and a KV socket directory it must not trust is
// refused at startup, before the gateway listens, instead of crashing it afterwards.
import { strict as assert } from 'node:assert';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { run } from '../link/cluster-harness.js';
import { loggedEvent } from '../support/serve.js';
import { freePort, waitFor } from '../support/wait.js';

async function config(dir: string): Promise<{ gatewayPort: number; enginePort: number }> {
  const [gatewayPort, enginePort, kvPort] = [await freePort(), await freePort(), await freePort()];
  writeFileSync(
    join(dir, 'llmgw.yaml'),
    `engines:
  sim: { bin: "" }
kv_events: { hash_seed: "0", hash_algo: sha256_cbor }
node:
  name: local
  addr: 127.0.0.1
  devices: []
  ports: { http_base: ${enginePort}, kv_events_base: ${kvPort} }
agent:
  state_dir: ${join(dir, 'state')}
  log_dir: ${join(dir, 'logs')}
models:
  m:
    profiles:
      - { name: sim-cpu, engine: sim, gpu_class: cpu, tp: 1, model_path: m, kv_events: true }
replicas:
  - { model: m, profile: sim-cpu, count: 1 }
gateway:
  host: 127.0.0.1
  port: ${gatewayPort}
`,
  );
  return { gatewayPort, enginePort };
}

const accepts = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const s = connect(port, '127.0.0.1', () => (s.destroy(), resolve(true)));
    s.on('error', () => resolve(false));
  });

void test('serve: SIGHUP drains and stops serve and its engines; it exits 0', { timeout: 120_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-hup-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const { enginePort } = await config(dir);
  const serve = run(t, ['serve', '--config', 'llmgw.yaml'], dir);
  await waitFor(() => loggedEvent(serve.err, 'serve.ready'), { timeoutMs: 90_000, what: `serve ready (${serve.err.slice(-500)})` });
  assert.ok(await accepts(enginePort), 'the engine listens');
  const exited = once(serve.child, 'exit');
  serve.child.kill('SIGHUP');
  const [code] = (await exited) as [number | null];
  assert.equal(code, 0, serve.err.slice(-3000));
  assert.match(serve.err, /"signal":"SIGHUP"/);
  assert.equal(await accepts(enginePort), false, 'the engine stopped with serve');
});

void test('serve: a kv socket directory it cannot trust is refused before the gateway listens', { timeout: 60_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-kvdir-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const { gatewayPort } = await config(dir);
  // A symlink stands in for a directory another user made: both are refused the same way.
  mkdirSync(join(dir, 'state'));
  mkdirSync(join(dir, 'elsewhere'));
  symlinkSync(join(dir, 'elsewhere'), join(dir, 'state', 'kv'));
  const serve = run(t, ['serve', '--config', 'llmgw.yaml'], dir);
  const [code] = (await once(serve.child, 'exit')) as [number | null];
  assert.equal(code, 1);
  assert.match(serve.err, /^llmgw serve: .*kv is not a directory; .*agent\.state_dir/m);
  assert.doesNotMatch(serve.err, /\n\s+at /, 'no stack trace');
  assert.equal(loggedEvent(serve.err, 'serve.listening'), undefined);
  assert.equal(await accepts(gatewayPort), false);
});
