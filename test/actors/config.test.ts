// The agent: section of llmgw.yaml: defaults, snake_case to camelCase, every problem at once.
import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { defaultAgentConfig, parseAgentConfig, parseAgentSection } from '../../src/actors/index.js';
import { ConfigError } from '../../src/errors/index.js';

void test('agent config: an absent section is every default', () => {
  assert.deepEqual(parseAgentConfig(undefined), defaultAgentConfig);
});

void test('agent config: snake_case keys map to the frozen camelCase config', () => {
  const c = parseAgentConfig({
    state_dir: '/var/lib/llmgw',
    log_dir: '/var/log/llmgw',
    tail_lines: 10,
    restart: { max_restarts: 2, window_ms: 1000, backoff_base_ms: 10, backoff_max_ms: 20 },
    drain_timeout_ms: 5,
    kill_after_ms: 6,
    load_timeout_ms: 7,
    leader_timeout_ms: 8,
    health_interval_ms: 9,
    health_failures: 4,
  });
  assert.equal(c.stateDir, '/var/lib/llmgw');
  assert.deepEqual(c.restart, { maxRestarts: 2, windowMs: 1000, backoffBaseMs: 10, backoffMaxMs: 20 });
  assert.deepEqual(c.timing, { drainTimeoutMs: 5, killAfterMs: 6, loadTimeoutMs: 7, leaderTimeoutMs: 8, healthIntervalMs: 9, healthFailures: 4 });
  assert.ok(Object.isFrozen(c) && Object.isFrozen(c.restart) && Object.isFrozen(c.timing));
});

const bad = [
  { why: 'a typo must not become a default', raw: { drain_timeout: 5 }, path: 'agent.drain_timeout', says: /unknown key \(did you mean "drain_timeout_ms"\?\)/ },
  { why: 'times are whole milliseconds', raw: { kill_after_ms: 1.5 }, path: 'agent.kill_after_ms', says: /whole number/ },
  { why: 'a restart typo is named with its path', raw: { restart: { max_restart: 1 } }, path: 'agent.restart.max_restart', says: /unknown key/ },
  { why: 'the backoff cap cannot be below its base', raw: { restart: { backoff_base_ms: 100, backoff_max_ms: 10 } }, path: 'agent.restart.backoff_max_ms', says: /below backoff_base_ms 100/ },
  { why: 'the section is a mapping', raw: 'yes', path: 'agent', says: /not a mapping/ },
];
for (const r of bad) {
  void test(`agent config: ${r.why}`, () => {
    const issues: { path: string; message: string }[] = [];
    parseAgentSection(r.raw, 'agent', issues);
    const hit = issues.find((i) => i.path === r.path);
    assert.ok(hit, `an issue at ${r.path}: ${JSON.stringify(issues)}`);
    assert.match(hit.message, r.says);
  });
}

void test('agent config: every problem is reported at once', () => {
  assert.throws(
    () => parseAgentConfig({ state_dir: '', tail_lines: 0, bogus: 1 }),
    (e: unknown) => e instanceof ConfigError && e.code === 'LLMGW_CONFIG' && e.issues.length === 3,
  );
});
