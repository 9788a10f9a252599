// gateway.admission and the keys' tenant, priority and weight: defaults, mapping, and each problem
// reported with its path and the fix.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { ConfigError } from '../../src/errors/index.js';
import { authenticator, hashApiKey, parseGatewayConfig } from '../../src/gateway/index.js';

void test('admission config: on by default, every knob settable by its snake_case key', () => {
  assert.equal(parseGatewayConfig(undefined).admission.enabled, true);
  const c = parseGatewayConfig({ admission: { enabled: false, max_queued_requests: 50, max_queued_bytes: 1024, max_waiting_per_replica: 4, max_wait_ms: 9000, starvation_ms: 1000, starvation_every: 5 } });
  assert.deepEqual(
    [c.admission.enabled, c.admission.maxQueuedRequests, c.admission.maxQueuedBytes, c.admission.maxWaitingPerReplica, c.admission.maxWaitMs, c.admission.starvationMs, c.admission.starvationEvery],
    [false, 50, 1024, 4, 9000, 1000, 5],
  );
});

void test('admission config: the engines\' slots are off until stated, and each class\'s reserve is settable', () => {
  const d = parseGatewayConfig(undefined).admission;
  assert.deepEqual([d.slotsPerReplica, d.reservedSlotsPerClass, d.reservedPerClass], [0, 1, 4]);
  const c = parseGatewayConfig({ admission: { slots_per_replica: 256, reserved_slots_per_class: 16, reserved_per_class: 2 } }).admission;
  assert.deepEqual([c.slotsPerReplica, c.reservedSlotsPerClass, c.reservedPerClass], [256, 16, 2]);
});

void test('admission config: one replica is kept free of lower classes\' prefill while a higher class was active in the last 10 s, settable and off at 0', () => {
  const d = parseGatewayConfig(undefined).admission;
  assert.deepEqual([d.reservedReplicas, d.activeWindowMs], [1, 10_000]);
  const c = parseGatewayConfig({ admission: { reserved_replicas: 0, active_window_ms: 60_000 } }).admission;
  assert.deepEqual([c.reservedReplicas, c.activeWindowMs], [0, 60_000]);
});

void test('admission config: a key\'s tenant, priority and weight reach its Caller, with defaults', () => {
  const c = parseGatewayConfig({
    api_keys: [
      { name: 'chat-app', sha256: hashApiKey('k1'), tenant: 'web', priority: 'interactive', weight: 2 },
      { name: 'etl', sha256: hashApiKey('k2') },
    ],
  });
  const auth = authenticator(c.apiKeys);
  const web = auth('Bearer k1');
  assert.deepEqual([web.tenant, web.priority, web.weight], ['web', 'interactive', 2]);
  const etl = auth('Bearer k2');
  assert.deepEqual([etl.tenant, etl.priority, etl.weight], ['etl', 'standard', 1], 'a key is its own tenant, standard, weight 1');
});

const problems: readonly { why: string; raw: unknown; path: string; says: RegExp }[] = [
  { why: 'a typo must not become a default', raw: { admission: { max_queued_request: 5 } }, path: 'gateway.admission.max_queued_request', says: /did you mean "max_queued_requests"/ },
  { why: 'a bound is a whole number', raw: { admission: { max_queued_requests: -1 } }, path: 'gateway.admission.max_queued_requests', says: /not a whole number/ },
  { why: 'a replica takes at least one waiting request', raw: { admission: { max_waiting_per_replica: 0 } }, path: 'gateway.admission.max_waiting_per_replica', says: /from 1/ },
  { why: 'the engines\' slots are a whole number', raw: { admission: { slots_per_replica: 2.5 } }, path: 'gateway.admission.slots_per_replica', says: /whole number/ },
  { why: 'a reserve of slots is not negative', raw: { admission: { reserved_slots_per_class: -1 } }, path: 'gateway.admission.reserved_slots_per_class', says: /whole number/ },
  { why: 'a reserve of replicas is not negative', raw: { admission: { reserved_replicas: -1 } }, path: 'gateway.admission.reserved_replicas', says: /whole number/ },
  { why: 'the active window is a whole number of ms', raw: { admission: { active_window_ms: 1.5 } }, path: 'gateway.admission.active_window_ms', says: /whole number/ },
  { why: 'enabled is true or false', raw: { admission: { enabled: 'yes' } }, path: 'gateway.admission.enabled', says: /true or false/ },
  { why: 'starvation must come before a request is refused for waiting', raw: { admission: { max_wait_ms: 1000, starvation_ms: 2000 } }, path: 'gateway.admission.starvation_ms', says: /not below max_wait_ms/ },
  { why: 'a key\'s class is one of the three', raw: { api_keys: [{ name: 'a', sha256: hashApiKey('x'), priority: 'urgent' }] }, path: 'gateway.api_keys[0].priority', says: /interactive, standard, batch/ },
  { why: 'a weight above 0', raw: { api_keys: [{ name: 'a', sha256: hashApiKey('x'), weight: 0 }] }, path: 'gateway.api_keys[0].weight', says: /above 0/ },
];
for (const p of problems) {
  void test(`admission config: ${p.why}`, () => {
    assert.throws(
      () => parseGatewayConfig(p.raw),
      (e: unknown) => e instanceof ConfigError && e.issues.some((i) => i.path === p.path && p.says.test(i.message)),
    );
  });
}
