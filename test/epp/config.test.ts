// epp.yaml's parser: every problem it reports, each with its path and fix, all at once; the defaults
// (llm-d's ports, a bare KV-event port as a template); and how a template is filled for an endpoint.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { parse } from 'yaml';
import { filledTemplate, parseEppConfig } from '../../src/epp/index.js';
import { ConfigError } from '../../src/errors/index.js';

const ok = { discovery: { file: 'endpoints.yaml' }, pool: { models: ['m'] } };

function problems(raw: unknown): string[] {
  try {
    parseEppConfig(raw);
  } catch (e) {
    assert.ok(e instanceof ConfigError, String(e));
    return e.issues.map((i) => `${i.path}: ${i.message}`);
  }
  assert.fail('parsed without a problem');
}

const rules: { why: string; raw: unknown; want: RegExp }[] = [
  { why: 'the file is not a map', raw: ['x'], want: /^\(top level\): a list is not a mapping/ },
  { why: 'discovery is required', raw: { pool: ok.pool }, want: /^discovery: is required: discovery: \{ file: endpoints\.yaml \}/ },
  { why: 'pool is required', raw: { discovery: ok.discovery }, want: /^pool: is required: pool: \{ models: \[NAME\]/ },
  { why: 'an unknown top-level key is named with the nearest', raw: { ...ok, pools: {} }, want: /^pools: unknown key \(did you mean "pool"\?\)/ },
  { why: 'discovery names neither source', raw: { ...ok, discovery: { poll_ms: 100 } }, want: /^discovery: give exactly one of file: PATH .* or kubernetes: \{ pool: NAME \}/ },
  { why: 'discovery names both sources', raw: { ...ok, discovery: { file: 'e.yaml', kubernetes: { pool: 'p' } } }, want: /^discovery: give exactly one of/ },
  { why: 'an unknown discovery key', raw: { ...ok, discovery: { file: 'e.yaml', kube: {} } }, want: /^discovery\.kube: unknown key/ },
  { why: 'an empty file path', raw: { ...ok, discovery: { file: '' } }, want: /^discovery\.file: "" is empty; write a value/ },
  { why: 'a poll faster than 50 ms', raw: { ...ok, discovery: { file: 'e.yaml', poll_ms: 10 } }, want: /^discovery\.poll_ms: 10 is not a whole number of at least 50/ },
  { why: 'poll_ms beside kubernetes is a mistake, not a no-op', raw: { ...ok, discovery: { kubernetes: { pool: 'p' }, poll_ms: 100 } }, want: /^discovery\.poll_ms: applies to discovery\.file only/ },
  { why: 'kubernetes discovery is not a map', raw: { ...ok, discovery: { kubernetes: 'p' } }, want: /^discovery\.kubernetes: "p" is not a mapping/ },
  { why: 'kubernetes discovery needs the pool', raw: { ...ok, discovery: { kubernetes: { namespace: 'x' } } }, want: /^discovery\.kubernetes\.pool: is required: the InferencePool's name/ },
  { why: 'a pool name Kubernetes cannot hold', raw: { ...ok, discovery: { kubernetes: { pool: 'My_Pool' } } }, want: /^discovery\.kubernetes\.pool: "My_Pool" is not a Kubernetes object name/ },
  { why: 'a namespace name Kubernetes cannot hold', raw: { ...ok, discovery: { kubernetes: { pool: 'p', namespace: 'a.b' } } }, want: /^discovery\.kubernetes\.namespace: "a\.b" is not a namespace name/ },
  { why: 'an unknown kubernetes key', raw: { ...ok, discovery: { kubernetes: { pool: 'p', selector: {} } } }, want: /^discovery\.kubernetes\.selector: unknown key/ },
  { why: 'a kubeconfig that is not a string', raw: { ...ok, discovery: { kubernetes: { pool: 'p', kubeconfig: 3 } } }, want: /^discovery\.kubernetes\.kubeconfig: 3 is not a string/ },
  { why: 'a pool must name its models', raw: { ...ok, pool: { kv_events: 5557 } }, want: /^pool\.models: is required: the served model names/ },
  { why: 'a model name must be a string', raw: { ...ok, pool: { models: [7] } }, want: /^pool\.models\[0\]: 7 is not a string/ },
  { why: 'a kv_events template names only what an endpoint has', raw: { ...ok, pool: { models: ['m'], kv_events: 'tcp://{ip}:5557' } }, want: /^pool\.kv_events: "tcp:\/\/\{ip\}:5557" names \{ip\}; a template may name/ },
  { why: 'a replay template too', raw: { ...ok, pool: { models: ['m'], replay: 'tcp://{address}:{labels}' } }, want: /^pool\.replay: .* names \{labels\}/ },
  { why: 'a label key with a dot is not one label', raw: { ...ok, pool: { models: ['m'], kv_events: 'tcp://{address}:{labels.a.b}' } }, want: /names \{labels\.a\.b\}/ },
  { why: 'a non-integer port is not a bare port', raw: { ...ok, pool: { models: ['m'], kv_events: 5557.5 } }, want: /^pool\.kv_events: 5557\.5 is not a string/ },
  { why: 'block_size of 0', raw: { ...ok, pool: { models: ['m'], block_size: 0 } }, want: /^pool\.block_size: 0 is not a whole number of at least 1/ },
  { why: 'capacity_blocks of 0', raw: { ...ok, pool: { models: ['m'], capacity_blocks: 0 } }, want: /^pool\.capacity_blocks: 0 is not a whole number of at least 1/ },
  { why: 'health checks faster than 50 ms', raw: { ...ok, pool: { models: ['m'], health_interval_ms: 5 } }, want: /^pool\.health_interval_ms: 5 is not a whole number of at least 50/ },
  { why: 'an unknown pool key', raw: { ...ok, pool: { models: ['m'], kv_event: 5557 } }, want: /^pool\.kv_event: unknown key \(did you mean "kv_events"\?\)/ },
  { why: 'a port over 65535', raw: { ...ok, listen: { ext_proc_port: 70_000 } }, want: /^listen\.ext_proc_port: 70000 is not a whole number from 0 to 65535/ },
  { why: 'a negative health port', raw: { ...ok, listen: { health_port: -1 } }, want: /^listen\.health_port: -1 is not a whole number from 0 to 65535/ },
  { why: 'a metrics port as text', raw: { ...ok, listen: { metrics_port: '9090' } }, want: /^listen\.metrics_port: "9090" is not a whole number/ },
  { why: 'an empty host', raw: { ...ok, listen: { host: '' } }, want: /^listen\.host: "" is empty; write a value, or leave the key out for "0\.0\.0\.0"/ },
  { why: 'an unknown listen key', raw: { ...ok, listen: { port: 9002 } }, want: /^listen\.port: unknown key/ },
  { why: "the gateway section is serve's parser, paths under gateway.", raw: { ...ok, gateway: { max_body_bytes: 'big' } }, want: /^gateway\.max_body_bytes: "big" is not a whole number/ },
];

for (const r of rules) {
  void test(`epp config: ${r.why}`, () => {
    const got = problems(r.raw);
    assert.ok(got.some((p) => r.want.test(p)), `${r.want} not in\n${got.join('\n')}`);
  });
}

void test('epp config: every problem is reported at once', () => {
  const got = problems({ discovery: { file: '', poll_ms: 1 }, pool: { models: [], block_size: 0 }, listen: { ext_proc_port: -5 } });
  assert.equal(got.length, 5, got.join('\n'));
});

void test("epp config: defaults are llm-d's ports on every address, the default namespace and kubeconfig order", () => {
  const c = parseEppConfig(parse('discovery: { kubernetes: { pool: qwen } }\npool: { models: [m], kv_events: 5557, replay: 5558 }\n'));
  assert.deepEqual(c.listen, { host: '0.0.0.0', extProcPort: 9002, healthPort: 9003, metricsPort: 9090 });
  assert.deepEqual(c.discovery, { kind: 'kubernetes', pool: 'qwen', namespace: 'default', kubeconfig: '' });
  assert.equal(c.pool.kvEvents, 'tcp://{address}:5557', 'a bare port is every endpoint at its own address');
  assert.equal(c.pool.replay, 'tcp://{address}:5558');
  assert.equal(c.pool.blockSizeTokens, 16);
  assert.ok(Object.isFrozen(c.pool), 'frozen');
  const f = parseEppConfig({ discovery: { file: 'e.yaml' }, pool: { models: ['m'] } });
  assert.deepEqual(f.discovery, { kind: 'file', path: 'e.yaml', pollMs: 1000 });
  assert.equal(f.pool.kvEvents, '', 'no publisher: no precise tier');
});

void test('epp config: a template is filled from the endpoint; a label it lacks is empty', () => {
  const e = { name: 'vllm-0', address: '10.0.0.7', port: 8000, labels: { kv: '5557' } };
  assert.equal(filledTemplate('tcp://{address}:{labels.kv}/{name}/{port}', e), 'tcp://10.0.0.7:5557/vllm-0/8000');
  assert.equal(filledTemplate('tcp://{address}:{labels.missing}', e), 'tcp://10.0.0.7:');
});
