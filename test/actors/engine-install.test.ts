// `llmgw engines install`: a build is recorded only once it ran, and a recorded build wins over the
// configured binary (the reference design's UseInstalled precedence).
import { strict as assert } from 'node:assert';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { installedEngines, installEngine, versionLine } from '../../src/actors/index.js';
import { registryOf } from '../../src/cli/config.js';
import { defaultAgentConfig } from '../../src/actors/index.js';
import { parseDevices, parseEnginesConfig, parseKvEventsConfig, type Engine } from '../../src/engines/index.js';
import { installLlamaCpp, llamaCppTarball } from '../support/llamacpp.js';

function tmp(t: { after: (f: () => void) => void }): string {
  const d = mkdtempSync(join(tmpdir(), 'llmgw-install-'));
  t.after(() => rmSync(d, { recursive: true, force: true }));
  return d;
}

// A directory that looks like a build: bin/llama-server is a shell script with the given body.
function fakeBuild(dir: string, body: string): string {
  mkdirSync(join(dir, 'bin'), { recursive: true });
  const bin = join(dir, 'bin', 'llama-server');
  writeFileSync(bin, `#!/bin/sh\n${body}\n`);
  chmodSync(bin, 0o755);
  return dir;
}

const binOf = (e: Engine): string => (e as Engine & { bin(): string }).bin();

void test('engines install: a build that runs is copied under the state dir and recorded; it wins over engines.llamacpp.bin', async (t) => {
  const d = tmp(t);
  const from = fakeBuild(join(d, 'build'), 'case "$1" in --version) echo "version: 42 (abc)" >&2;; --list-devices) printf "Available devices:\\n  CUDA0: NVIDIA L4 (22994 MiB, 22713 MiB free)\\n";; esac');
  const stateDir = join(d, 'state');
  const r = await installEngine({ engine: 'llamacpp', from, stateDir, parseDevices });
  assert.equal(r.version, 'version: 42 (abc)');
  assert.deepEqual(r.devices, ['CUDA0: NVIDIA L4 (22994 MiB, 22713 MiB free)']);
  assert.ok(r.bin.startsWith(join(stateDir, 'engines', 'llamacpp')), r.bin);
  assert.deepEqual(installedEngines(stateDir), [r]);
  const engines = parseEnginesConfig({ llamacpp: { bin: '/opt/configured/llama-server' } }, 'engines', []);
  const kvEvents = parseKvEventsConfig(undefined, 'kv_events', []);
  assert.equal(binOf(registryOf({ engines, kvEvents, agent: { ...defaultAgentConfig, stateDir: join(d, 'elsewhere') } }).get('llamacpp')), '/opt/configured/llama-server');
  assert.equal(binOf(registryOf({ engines, kvEvents, agent: { ...defaultAgentConfig, stateDir } }).get('llamacpp')), r.bin);
});

void test('engines install: a build that does not run is refused with its own output, and nothing is recorded', async (t) => {
  const d = tmp(t);
  const from = fakeBuild(join(d, 'build'), 'echo "error while loading shared libraries: libggml.so" >&2; exit 127');
  const stateDir = join(d, 'state');
  await assert.rejects(installEngine({ engine: 'llamacpp', from, stateDir, parseDevices }), (e: Error) => /libggml\.so/.test(e.message) && 'code' in e && e.code === 'LLMGW_ENGINE_INSTALL');
  assert.deepEqual(installedEngines(stateDir), []);
  assert.deepEqual(readdirSync(join(stateDir, 'engines', 'llamacpp')), [], 'the staging copy is removed');
  mkdirSync(join(d, 'empty'));
  await assert.rejects(installEngine({ engine: 'llamacpp', from: join(d, 'empty'), stateDir, parseDevices }), /holds no llama-server/);
  await assert.rejects(installEngine({ engine: 'vllm', from, stateDir, parseDevices }), /not installed by the agent/);
});

void test('engines install: the prebuilt llama-server tarball unpacks, runs and lists no device (a CPU build)', async (t) => {
  const tarball = llamaCppTarball();
  const stateDir = tmp(t);
  const r = await installLlamaCpp(tarball, stateDir);
  assert.ok(existsSync(r.bin));
  assert.match(r.version, /^version: /);
  assert.deepEqual(r.devices, []);
});

void test('versionLine: the line naming the version, whatever the build logged before it', () => {
  assert.equal(versionLine('load_backend: loaded CPU backend\nversion: 0 (unknown)\nbuilt with GNU 12.2.0\n'), 'version: 0 (unknown)');
});
