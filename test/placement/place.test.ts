// Placement on discovered devices: MIG instances in place of their cards, one instance per MIG
// replica, no card or instance shared, the card/migN names, and the refusals with their reasons.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { parseModels, parseReplicas, validateCatalog, type Catalog } from '../../src/catalog/index.js';
import { inventoryFromSmi, parseSmiList, parseSmiQuery, type Inventory } from '../../src/discovery/index.js';
import type { Issues } from '../../src/config/index.js';
import { Registry, defaultEnginesConfig, defaultKvEventsConfig } from '../../src/engines/index.js';
import { ConfigError, type ConfigIssue } from '../../src/errors/index.js';
import { cpuThreads, devicesOfClass, parseNodeConfig, place, withDiscovered, type NodeConfig } from '../../src/placement/index.js';
import { readFixture } from '../discovery/fixtures.js';

const engines = new Registry(defaultEnginesConfig, defaultKvEventsConfig);

function catalogOf(models: unknown, replicas: unknown): Catalog {
  const issues: Issues = [];
  const c = { models: parseModels(models, 'models', issues), replicas: parseReplicas(replicas, 'replicas', issues) };
  assert.deepEqual(issues, []);
  return c;
}

function nodeOf(inv: Inventory): NodeConfig {
  const issues: Issues = [];
  const n = parseNodeConfig({ name: 'n1', devices: 'discover' }, 'node', issues);
  assert.deepEqual(issues, []);
  assert.equal(n.discover, true);
  return withDiscovered(n, inv);
}

const list4xA100 = 'nvidia-smi-L_4x-a100-sxm4-80gb_gpu0-mig-4x1g.20gb_driver-535.54.03.txt';
const xmlA100 = 'nvidia-smi-q-x_a100-sxm4-80gb_mig-4x1g.20gb_driver-535.54.03_dtd-v12.xml';
const listH200 = 'nvidia-smi-L_h200_mig-1c.3g.71gb+2c.3g.71gb+2g.35gb+2x1g.18gb_driver-590.48.01_masked.txt';

/** The 4x A100 host: card 0 carved into four 1g.20gb, cards 1-3 whole. */
const mixedHost = (): NodeConfig =>
  nodeOf(inventoryFromSmi({ list: parseSmiList(readFixture(list4xA100)), query: parseSmiQuery(readFixture(xmlA100)), csv: undefined, problems: [] }));

const vllmProfile = (name: string, gpuClass: string, extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  name,
  engine: 'vllm',
  gpu_class: gpuClass,
  model_path: '/models/qwen',
  ...extra,
});

function placeIssues(catalog: Catalog, node: NodeConfig): readonly ConfigIssue[] {
  try {
    place(catalog, node, engines);
  } catch (e) {
    if (e instanceof ConfigError) return e.issues;
    throw e;
  }
  return [];
}

void test('discovered node: MIG card 0 as its four instances (1000-1003, 0/mig0-3), cards 1-3 whole', () => {
  const n = mixedHost();
  assert.deepEqual(
    n.devices.map((d) => [d.index, d.label, d.gpuClass, d.uuid.slice(0, 12), d.memoryTotalMb]),
    [
      [1000, '0/mig0', 'a100-80g-mig-1g.20gb', 'MIG-ce861fb0', 19968],
      [1001, '0/mig1', 'a100-80g-mig-1g.20gb', 'MIG-a45882f0', 19968],
      [1002, '0/mig2', 'a100-80g-mig-1g.20gb', 'MIG-f00d722c', 19968],
      [1003, '0/mig3', 'a100-80g-mig-1g.20gb', 'MIG-930574a9', 19968],
      [1, '1', 'a100-80g', 'GPU-d8594bd4', undefined],
      [2, '2', 'a100-80g', 'GPU-5e375e7e', undefined],
      [3, '3', 'a100-80g', 'GPU-69ec2344', undefined],
    ],
  );
});

void test('a MIG replica gets exactly one instance, by MIG UUID; four replicas take four different instances', () => {
  const c = catalogOf({ q: { profiles: [vllmProfile('mig', 'a100-80g-mig-1g.20gb')] } }, [{ model: 'q', profile: 'mig', count: 4 }]);
  const shards = place(c, mixedHost(), engines);
  assert.deepEqual(shards.map((s) => s.gpuIndices), [[1000], [1001], [1002], [1003]]);
  assert.deepEqual(shards.map((s) => s.gpuUuids), [
    ['MIG-ce861fb0-a248-58ce-a9a8-f9adbc22a66a'],
    ['MIG-a45882f0-9215-5733-a0c1-49286ab31cb5'],
    ['MIG-f00d722c-f4e1-52c9-aa31-750441ae1bfe'],
    ['MIG-930574a9-d43a-5d2b-95da-3e68384c8d6b'],
  ]);
  assert.equal(new Set(shards.map((s) => s.httpPort)).size, 4);
});

void test('the engine gets CUDA_VISIBLE_DEVICES=MIG-<uuid> and no Vulkan device variable', () => {
  const c = catalogOf({ q: { profiles: [vllmProfile('mig', 'a100-80g-mig-1g.20gb')] } }, [{ model: 'q', profile: 'mig', count: 1 }]);
  const [spec] = place(c, mixedHost(), engines);
  assert.ok(spec);
  const [cmd] = engines.get('vllm').commands(spec, { env: { PATH: '/usr/bin' }, cpus: 8, listDir: () => undefined, llmgwCommand: ['node', 'llmgw'] });
  const env = new Map(cmd?.env);
  assert.equal(env.get('CUDA_VISIBLE_DEVICES'), 'MIG-ce861fb0-a248-58ce-a9a8-f9adbc22a66a');
  assert.equal(env.has('GGML_VK_VISIBLE_DEVICES'), false);
});

void test('a fifth MIG replica is refused: no instance is shared', () => {
  const c = catalogOf({ q: { profiles: [vllmProfile('mig', 'a100-80g-mig-1g.20gb')] } }, [{ model: 'q', profile: 'mig', count: 5 }]);
  const issues = placeIssues(c, mixedHost());
  assert.equal(issues.length, 1);
  assert.match(issues[0]?.message ?? '', /replica 5 of 5 .* needs 1 GPU of class "a100-80g-mig-1g.20gb", and node n1 has 0 free of 4/);
});

void test('whole-card replicas never take a carved card, and two replicas never share a card', () => {
  const c = catalogOf({ q: { profiles: [vllmProfile('tp2', 'a100-80g', { tp: 2 }), vllmProfile('one', 'a100-80g')] } }, [
    { model: 'q', profile: 'tp2', count: 1 },
    { model: 'q', profile: 'one', count: 1 },
  ]);
  const shards = place(c, mixedHost(), engines);
  assert.deepEqual(shards.map((s) => s.gpuIndices), [[1, 2], [3]]);
  assert.deepEqual(shards.map((s) => s.gpuUuids), [[], []]);
  const more = catalogOf({ q: { profiles: [vllmProfile('one', 'a100-80g')] } }, [{ model: 'q', profile: 'one', count: 4 }]);
  assert.match(placeIssues(more, mixedHost())[0]?.message ?? '', /replica 4 of 4 .* has 0 free of 3/);
});

const migRule: readonly { why: string; extra: Record<string, unknown>; key: string }[] = [
  { why: 'tp 2: a process opens one MIG device', extra: { tp: 2 }, key: 'tp' },
  { why: 'pp 2: instances have no NVLink between them', extra: { pp: 2, gpus_per_node: 2 }, key: 'pp' },
  { why: 'gpus_per_node 2: a replica gets exactly one instance', extra: { gpus_per_node: 2, tp: 2 }, key: 'gpus_per_node' },
  { why: 'nodes 2: a MIG replica cannot span nodes', extra: { nodes: 2, gpus_per_node: 1, tp: 2 }, key: 'nodes' },
];
for (const r of migRule) {
  void test(`MIG rule, refused in catalog validation and in placement: ${r.why}`, () => {
    const c = catalogOf({ q: { profiles: [vllmProfile('mig', 'a100-80g-mig-1g.20gb', r.extra)] } }, [{ model: 'q', profile: 'mig', count: 1 }]);
    const node = mixedHost();
    const issues: Issues = [];
    validateCatalog(c, engines, (cls) => devicesOfClass(node, cls), issues);
    const mine = issues.find((i) => i.path === `models.q.profiles[0].${r.key}`);
    assert.ok(mine, `validation names models.q.profiles[0].${r.key}: ${JSON.stringify(issues)}`);
    assert.match(mine.message, /is a MIG instance: a replica gets exactly one/);
    const placed = placeIssues(c, node);
    assert.ok(placed.some((i) => i.path === 'replicas[0]' && i.message.includes(`${r.key}:`) && /MIG instance/.test(i.message)), JSON.stringify(placed));
  });
}

void test('a whole-card class with tp 2 is not touched by the MIG rule', () => {
  const c = catalogOf({ q: { profiles: [vllmProfile('tp2', 'a100-80g', { tp: 2 })] } }, [{ model: 'q', profile: 'tp2', count: 1 }]);
  const issues: Issues = [];
  validateCatalog(c, engines, (cls) => devicesOfClass(mixedHost(), cls), issues);
  assert.deepEqual(issues, []);
});

void test('a MIG card with nothing carved stays out of placement, and a refusal says why', () => {
  const xml = readFixture(xmlA100).replace(/<mig_devices>[\s\S]*<\/mig_devices>/, '<mig_devices>\n\t\t\tNone\n\t\t</mig_devices>');
  const list = parseSmiList(readFixture(list4xA100).replace(/^ {2}MIG.*\n/gm, ''));
  const node = nodeOf(inventoryFromSmi({ list, query: parseSmiQuery(xml), csv: undefined, problems: [] }));
  assert.deepEqual(node.devices.map((d) => d.label), ['1', '2', '3']);
  assert.deepEqual(node.excluded.map((e) => e.label), ['0']);
  const c = catalogOf({ q: { profiles: [vllmProfile('one', 'a100-80g')] } }, [{ model: 'q', profile: 'one', count: 4 }]);
  assert.match(placeIssues(c, node)[0]?.message ?? '', /left out of placement: 0: MIG is enabled and no instance is carved/);
});

void test('compute instances of one GPU instance share its memory: one replica per GPU instance', () => {
  // H200: devices 0 and 1 are CIs 0 and 1 of GI 2 (from the bundle's -q); the XML ids are given here.
  const list = parseSmiList(readFixture(listH200));
  const inv = inventoryFromSmi({ list, query: undefined, csv: undefined, problems: [] });
  const withGi: Inventory = {
    ...inv,
    cards: inv.cards.map((c) => ({ ...c, instances: c.instances.map((m) => ({ ...m, gpuInstanceId: [2, 2, 3, 9, 10][m.deviceIndex] })) })),
  };
  const node = nodeOf(withGi);
  const sameGi = node.devices.filter((d) => d.gpuInstanceId === 2).map((d) => d.label);
  assert.deepEqual(sameGi, ['0/mig0', '0/mig1']);
  // Two classes on one GI: placing one of each must not give both halves of GI 2 to two replicas.
  const c = catalogOf(
    { q: { profiles: [vllmProfile('a', 'h200-mig-1c.3g.71gb'), vllmProfile('b', 'h200-mig-2c.3g.71gb')] } },
    [
      { model: 'q', profile: 'a', count: 1 },
      { model: 'q', profile: 'b', count: 1 },
    ],
  );
  const issues = placeIssues(c, node);
  assert.equal(issues.length, 1);
  assert.match(issues[0]?.message ?? '', /q\/b needs 1 GPU of class "h200-mig-2c.3g.71gb", and node n1 has 0 free of 1/);
});

void test('listed MIG devices must carry their MIG UUID and a 1000+ number', () => {
  const issues: Issues = [];
  parseNodeConfig(
    {
      devices: [
        { index: 2, class: 'a100-80g-mig-3g.40gb', uuid: 'GPU-1' },
        { index: 1001, class: 'a100-80g', uuid: 'GPU-2' },
        { index: 1102, class: 'a100-80g-mig-3g.40gb', uuid: 'MIG-0929581a-2be6-5dec-bf34-0954c6c529a6' },
      ],
    },
    'node',
    issues,
  );
  assert.deepEqual(issues.map((i) => i.path), ['node.devices[0].uuid', 'node.devices[0].index', 'node.devices[1].index']);
  const ok: Issues = [];
  const n = parseNodeConfig({ devices: [{ index: 1102, class: 'a100-80g-mig-3g.40gb', uuid: 'MIG-0929581a-2be6-5dec-bf34-0954c6c529a6' }] }, 'node', ok);
  assert.deepEqual(n.devices.map((d) => d.label), ['1/mig2']);
});

void test('a listed card and its listed instance are never both given out', () => {
  const issues: Issues = [];
  const node = parseNodeConfig(
    {
      name: 'n1',
      devices: [
        { index: 0, class: 'a100-80g', uuid: 'GPU-a' },
        { index: 1000, class: 'a100-80g-mig-3g.40gb', uuid: 'MIG-0929581a-2be6-5dec-bf34-0954c6c529a6' },
      ],
    },
    'node',
    issues,
  );
  assert.deepEqual(issues, []);
  const c = catalogOf({ q: { profiles: [vllmProfile('whole', 'a100-80g'), vllmProfile('mig', 'a100-80g-mig-3g.40gb')] } }, [
    { model: 'q', profile: 'whole', count: 1 },
    { model: 'q', profile: 'mig', count: 1 },
  ]);
  assert.match(placeIssues(c, node)[0]?.message ?? '', /q\/mig needs 1 GPU .* has 0 free of 1/);
});

const threadRows: readonly { why: string; cpus: number; shards: number; want: number }[] = [
  { why: 'one CPU shard takes half, as llama.cpp measured best beside another', cpus: 8, shards: 1, want: 4 },
  { why: 'two CPU shards take half each', cpus: 8, shards: 2, want: 4 },
  { why: 'more shards share the CPUs equally rather than oversubscribe', cpus: 8, shards: 4, want: 2 },
  { why: 'never zero threads', cpus: 2, shards: 5, want: 1 },
];
for (const r of threadRows) void test(`cpuThreads: ${r.why}`, () => assert.equal(cpuThreads(r.cpus, r.shards), r.want));

void test('shards with no GPU get CPU threads when the host CPUs are known; GPU shards get none', () => {
  const c = catalogOf(
    { q: { profiles: [{ name: 'cpu', engine: 'sim', gpu_class: 'cpu', model_path: 'qwen3', kv_events: true }, vllmProfile('one', 'a100-80g')] } },
    [
      { model: 'q', profile: 'cpu', count: 3 },
      { model: 'q', profile: 'one', count: 1 },
    ],
  );
  const shards = place(c, mixedHost(), engines, { cpus: 12 });
  assert.deepEqual(shards.map((s) => [s.gpuIndices.length, s.threads]), [[0, 4], [0, 4], [0, 4], [1, 0]]);
  // Each KV-publishing shard gets its own event and replay ports.
  const kv = shards.filter((s) => s.kvEventsPort > 0).flatMap((s) => [s.kvEventsPort, s.kvReplayPort]);
  assert.equal(new Set(kv).size, kv.length);
  assert.ok(kv.length >= 6);
});

const portRows: readonly { why: string; ports: { http_base: number; kv_events_base: number }; re: RegExp }[] = [
  { why: 'both bases on one port', ports: { http_base: 8100, kv_events_base: 8100 }, re: /port 8100 would be both the HTTP port of q-cpu-0 and a KV-event port of q-cpu-0/ },
  { why: 'the KV range running into the next shard HTTP port', ports: { http_base: 8100, kv_events_base: 8101 }, re: /port 8101 would be both a KV-event port of q-cpu-0 and the HTTP port of q-cpu-1/ },
];
for (const r of portRows) {
  void test(`placement refuses one port given twice: ${r.why}, naming both bases`, () => {
    const c = catalogOf({ q: { profiles: [{ name: 'cpu', engine: 'sim', gpu_class: 'cpu', model_path: 'qwen3', kv_events: true }] } }, [{ model: 'q', profile: 'cpu', count: 2 }]);
    const issues: Issues = [];
    const node = parseNodeConfig({ name: 'n1', ports: r.ports }, 'node', issues);
    assert.deepEqual(issues, []);
    const found = placeIssues(c, node);
    assert.equal(found.length, 1, JSON.stringify(found));
    assert.equal(found[0]?.path, 'replicas[0]');
    assert.match(found[0]?.message ?? '', r.re);
    assert.match(found[0]?.message ?? '', /node\.ports\.http_base \(8100\) and node\.ports\.kv_events_base/);
  });
}

void test('placement: bases far apart give every port once', () => {
  const c = catalogOf({ q: { profiles: [{ name: 'cpu', engine: 'sim', gpu_class: 'cpu', model_path: 'qwen3', kv_events: true }] } }, [{ model: 'q', profile: 'cpu', count: 2 }]);
  const issues: Issues = [];
  const node = parseNodeConfig({ name: 'n1', ports: { http_base: 8100, kv_events_base: 8102 } }, 'node', issues);
  assert.deepEqual(place(c, node, engines).map((s) => [s.httpPort, s.kvEventsPort, s.kvReplayPort]), [[8100, 8102, 8103], [8101, 8104, 8105]]);
});

void test('a vLLM profile with --data-parallel-size 2 gets tp GPUs for each rank, not one group', () => {
  const c = catalogOf({ q: { profiles: [vllmProfile('dp', 'a100-80g', { args: ['--data-parallel-size', '2'] })] } }, [{ model: 'q', profile: 'dp', count: 1 }]);
  assert.deepEqual(place(c, mixedHost(), engines).map((s) => s.gpuIndices), [[1, 2]]);
});

void test('a gpu_class with no device on the node names the classes there are and the nearest', () => {
  const c = catalogOf({ q: { profiles: [vllmProfile('typo', 'a100-80gb')] } }, [{ model: 'q', profile: 'typo', count: 1 }]);
  assert.match(
    placeIssues(c, mixedHost())[0]?.message ?? '',
    /needs 1 GPU of class "a100-80gb", and node n1 has 0 free of 0; lower count, or list more devices of that class under node\.devices; the classes here are a100-80g, a100-80g-mig-1g\.20gb \(did you mean gpu_class: a100-80g\?\)/,
  );
});
