// The bench's generated llmgw.yaml loads, and with --engine llamacpp runs llama-server replicas of the
// given GGUF with the build installed in the given state directory.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { fleetConfig, type FleetOptions } from '../../src/e2e/index.js';
import { loadConfig } from '../../src/cli/config.js';

const base: Omit<FleetOptions, 'engine'> = {
  llmgw: [],
  replicas: 2,
  policy: 'approximate',
  waitOrSpill: true,
  capacityBlocks: 1024,
  blockSizeTokens: 16,
  prefillTokensPerS: 1000,
  decodeTokensPerS: 50,
  logFile: '/dev/null',
  startTimeoutMs: 1000,
};

void test('bench fleet: the llamacpp config runs the model on llama.cpp with the installed build', () => {
  const c = loadConfig(fleetConfig({ ...base, engine: { name: 'llamacpp', model: '/models/tiny.gguf', stateDir: '/var/llmgw' } }, 21000, 22000), 'bench');
  const p = c.models.bench?.profiles[0];
  assert.equal(p?.engine, 'llamacpp');
  assert.equal(p.modelPath, '/models/tiny.gguf');
  assert.equal(c.agent.stateDir, '/var/llmgw');
  assert.equal(c.replicas[0]?.count, 2);
});

void test('bench fleet: the sim config is unchanged by the engine option', () => {
  const c = loadConfig(fleetConfig({ ...base, engine: { name: 'sim' } }, 21000, 22000), 'bench');
  assert.equal(c.models.bench?.profiles[0]?.engine, 'sim');
  assert.equal(c.agent.stateDir, '.llmgw-state');
});

void test('bench fleet: the router gets the wait-or-spill setting the run compares', () => {
  for (const waitOrSpill of [true, false]) assert.equal(loadConfig(fleetConfig({ ...base, engine: { name: 'sim' }, waitOrSpill }, 21000, 22000), 'bench').gateway.router.waitOrSpill, waitOrSpill);
});

void test('bench fleet: a P/D fleet is the same sims in two roles, which the config checks accept', () => {
  const c = loadConfig(fleetConfig({ ...base, engine: { name: 'sim' }, replicas: 4, prefillReplicas: 2 }, 20_000, 21_000), 'bench.yaml');
  assert.deepEqual(c.models.bench?.profiles.map((p) => [p.name, p.role, p.args.join(' ')]), [
    ['prefill', 'prefill', c.models.bench?.profiles[1]?.args.join(' ')],
    ['decode', 'decode', c.models.bench?.profiles[0]?.args.join(' ')],
  ]);
  assert.deepEqual(c.replicas.map((r) => [r.profile, r.count]), [['prefill', 2], ['decode', 2]]);
});
