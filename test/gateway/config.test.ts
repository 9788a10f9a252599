// The gateway: section of llmgw.yaml: defaults, camelCase mapping, and every problem reported at once.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { ConfigError } from '../../src/errors/index.js';
import { gatewayDefaults, hashApiKey, parseGatewayConfig, poolOptionsOf } from '../../src/gateway/index.js';

void test('config: no section is every default, on loopback port 8080', () => {
  const c = parseGatewayConfig(undefined);
  assert.deepEqual([c.host, c.port, c.apiKeys.length], ['127.0.0.1', 8080, 0]);
  assert.ok(Object.isFrozen(c) && Object.isFrozen(c.router));
});

void test('config: snake_case keys map to the camelCase fields, unset ones keep their default', () => {
  const sha = hashApiKey('sk-1');
  const c = parseGatewayConfig({
    port: 9000,
    api_keys: [{ name: 'a', sha256: sha, tokens_per_minute: 100 }],
    router: { ttft_budget_ms: 500, offload_tier_weight: 0.25, inline_tokenize_max_bytes: 0, prepare_min_prompt_tokens: 512 },
    upstream: { headers_timeout_ms: 1000 },
  });
  assert.equal(c.router.inlineTokenizeMaxBytes, 0);
  assert.equal(c.router.prepareMinPromptTokens, 512, 'a documented knob is a known key');
  assert.equal(c.port, 9000);
  assert.equal(parseGatewayConfig({ api_keys: [{ name: 'ops', sha256: sha, admin: true }] }).apiKeys[0]?.admin, true);
  assert.deepEqual(c.apiKeys[0], { name: 'a', sha256: sha, requestsPerMinute: 0, tokensPerMinute: 100, admin: false, tenant: '', priority: 'standard', weight: 1 });
  assert.equal(c.router.ttftBudgetMs, 500);
  assert.equal(c.router.offloadTierWeight, 0.25);
  assert.equal(c.router.scoreTimeoutMs, gatewayDefaults.router.scoreTimeoutMs);
  assert.equal(c.upstream.headersTimeoutMs, 1000);
  assert.equal(c.upstream.connections, gatewayDefaults.upstream.connections);
});

const problems: readonly { why: string; raw: unknown; path: string }[] = [
  { why: 'a typo must not become a default', raw: { prot: 1 }, path: 'gateway.prot' },
  { why: 'a port is a whole number in range', raw: { port: 70_000 }, path: 'gateway.port' },
  { why: 'keys are stored hashed, never in the clear', raw: { api_keys: [{ name: 'a', sha256: 'sk-plain-secret' }] }, path: 'gateway.api_keys[0].sha256' },
  { why: 'a key needs a name for metrics and logs', raw: { api_keys: [{ sha256: hashApiKey('x') }] }, path: 'gateway.api_keys[0]' },
  { why: 'the same key twice is a mistake', raw: { api_keys: [{ name: 'a', sha256: hashApiKey('x') }, { name: 'b', sha256: hashApiKey('x') }] }, path: 'gateway.api_keys[1].sha256' },
  { why: 'unknown router knobs are errors too', raw: { router: { ttft_budget: 1 } }, path: 'gateway.router.ttft_budget' },
  { why: 'admin is true or false, so "yes" cannot open the debug pages by accident', raw: { api_keys: [{ name: 'a', sha256: hashApiKey('x'), admin: 'yes' }] }, path: 'gateway.api_keys[0].admin' },
  { why: 'a weight is a fraction', raw: { router: { offload_tier_weight: 2 } }, path: 'gateway.router.offload_tier_weight' },
  { why: 'wait_or_spill is true or false, so "off" cannot silently leave it on', raw: { router: { wait_or_spill: 'off' } }, path: 'gateway.router.wait_or_spill' },
  { why: 'a replica holds at least one adapter', raw: { adapters: { max_per_replica: 0 } }, path: 'gateway.adapters.max_per_replica' },
  { why: 'unknown adapter knobs are errors', raw: { adapters: { max_resident: 2 } }, path: 'gateway.adapters.max_resident' },
];

void test('config: gateway.adapters maps to its fields, with defaults', () => {
  const c = parseGatewayConfig({ adapters: { max_per_replica: 2 } });
  assert.deepEqual(c.adapters, { maxPerReplica: 2, loadTimeoutMs: gatewayDefaults.adapters.loadTimeoutMs });
});
for (const p of problems) {
  void test(`config: ${p.why}`, () => {
    assert.throws(
      () => parseGatewayConfig(p.raw),
      (e: unknown) => e instanceof ConfigError && e.issues.some((i) => i.path === p.path),
    );
  });
}

void test('config: router.wait_or_spill is on by default, false restores the valve alone, and a non-boolean says what it wants', () => {
  assert.equal(parseGatewayConfig(undefined).router.waitOrSpill, true);
  assert.equal(parseGatewayConfig({ router: { wait_or_spill: false } }).router.waitOrSpill, false);
  assert.throws(() => parseGatewayConfig({ router: { wait_or_spill: 'off' } }), /gateway\.router\.wait_or_spill.*"off" is not true or false/);
});

void test('config: an unknown key names the key it probably meant', () => {
  assert.throws(() => parseGatewayConfig({ router: { ttft_budget: 1 } }), /did you mean "ttft_budget_ms"/);
});

void test('config: every problem is reported at once', () => {
  assert.throws(
    () => parseGatewayConfig({ port: -1, host: '', router: { score_timeout_ms: 0 } }),
    (e: unknown) => e instanceof ConfigError && e.issues.length === 3,
  );
});

void test('config: the tokenizing pool is sized by the router, with nothing on the event loop when local tokenizing is off', () => {
  assert.deepEqual(poolOptionsOf(parseGatewayConfig({ max_json_depth: 32, router: { tokenize_segment_cache_bytes: 1024, inline_tokenize_max_bytes: 512 } })), { segmentCacheBytes: 1024, inlineMaxBytes: 512, maxJsonDepth: 32, rememberMinChars: 2048 });
  assert.equal(poolOptionsOf(parseGatewayConfig({ router: { prepare_min_prompt_tokens: 300 } })).rememberMinChars, 300, 'a chat long enough to prepare is long enough to remember');
  assert.equal(poolOptionsOf(parseGatewayConfig({ router: { local_tokenize: false } })).inlineMaxBytes, 0);
});
