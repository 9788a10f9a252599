// deploy/ checked without a cluster, an Envoy binary or a Docker engine: every Kubernetes object
// against the schema of its kind (vendored under schemas/), the names and ports the objects share
// against each other and against llmgw epp's own parser, the Role against what the InferencePool
// watch really calls (the EPP started from the ConfigMap's config, on a fake API server holding the
// manifests' pool), the Envoy config's ext_proc and ORIGINAL_DST parts against the vendored proto and
// GIE's reference, and the Dockerfile's claims against the repository and the build.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { Ajv, type AnySchemaObject } from 'ajv';
import { protoPath as healthProto } from 'grpc-health-check';
import { parse, parseAllDocuments } from 'yaml';
import { destinationKey, extProcService, filledTemplate, parseEppConfig, startEpp, watchInferencePool } from '../../src/epp/index.js';
import { startFakeKubeApi } from '../support/fake-kube-api.js';
import { waitFor } from '../support/wait.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const schemaDir = join(root, 'test', 'deploy', 'schemas');
const kubeDir = join(root, 'deploy', 'kubernetes');

// YAML as it comes: a tree of unknowns, read through these two.
type Obj = Record<string, unknown>;
const obj = (v: unknown, what: string): Obj => {
  assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v), `${what} is not a map`);
  return v as Obj;
};
const list = (v: unknown, what: string): unknown[] => {
  assert.ok(Array.isArray(v), `${what} is not a list`);
  return v;
};

interface Doc {
  readonly file: string;
  readonly apiVersion: string;
  readonly kind: string;
  readonly name: string;
  readonly namespace: string;
  readonly body: Obj;
}

function manifests(): Doc[] {
  const docs: Doc[] = [];
  for (const file of readdirSync(kubeDir).filter((f) => f.endsWith('.yaml')).sort()) {
    for (const d of parseAllDocuments(readFileSync(join(kubeDir, file), 'utf8'))) {
      assert.deepEqual(d.errors, [], `${file}: YAML errors`);
      const body = obj(d.toJS(), file);
      const meta = obj(body.metadata, `${file} metadata`);
      docs.push({ file, apiVersion: String(body.apiVersion), kind: String(body.kind), name: String(meta.name), namespace: String(meta.namespace), body });
    }
  }
  return docs;
}

function one(docs: readonly Doc[], kind: string, file?: string): Doc {
  const found = docs.filter((d) => d.kind === kind && (file === undefined || d.file === file));
  assert.equal(found.length, 1, `one ${kind}${file === undefined ? '' : ` in ${file}`}, found ${found.length}`);
  return found[0] as Doc;
}

// Unknown fields are errors, as kubectl apply's default --validate=strict makes them; the schemas
// themselves leave objects open, which would let a misspelt field through as nothing.
function closed(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(closed);
  if (node === null || typeof node !== 'object') return node;
  const out: Obj = {};
  for (const [k, v] of Object.entries(node)) out[k] = k === 'properties' ? Object.fromEntries(Object.entries(obj(v, k)).map(([p, s]) => [p, closed(s)])) : closed(v);
  if ('properties' in out && !('additionalProperties' in out) && out['x-kubernetes-preserve-unknown-fields'] !== true) out.additionalProperties = false;
  return out;
}

function extensionKeys(node: unknown, into = new Set<string>()): Set<string> {
  if (Array.isArray(node)) for (const v of node) extensionKeys(v, into);
  else if (node !== null && typeof node === 'object') {
    for (const [k, v] of Object.entries(node)) {
      if (k.startsWith('x-kubernetes-')) into.add(k);
      extensionKeys(v, into);
    }
  }
  return into;
}

/** A validator per `apiVersion kind`, from the vendored schemas. */
function validators(): Map<string, (doc: Obj) => string[]> {
  const core = JSON.parse(readFileSync(join(schemaDir, 'kubernetes-1.36.json'), 'utf8')) as { kinds: Record<string, string>; definitions: Obj };
  const crds = ['inferencepool-v1.json', 'httproute-v1.json'].map((f) => JSON.parse(readFileSync(join(schemaDir, f), 'utf8')) as { group: string; kind: string; version: string; schema: Obj });
  // Formats (int32, int64, date-time) are the API server's business; the structure is ours to check.
  const ajv = new Ajv({ allErrors: true, validateFormats: false, strictTypes: false });
  // CEL rules and list/map annotations: kept in the schemas, not evaluated here (docs/kubernetes.md).
  for (const k of extensionKeys([core, crds])) ajv.addKeyword({ keyword: k, schemaType: ['boolean', 'string', 'array', 'object'] });
  ajv.addSchema({ $id: 'k8s', definitions: closed(core.definitions) } as AnySchemaObject);
  const out = new Map<string, (doc: Obj) => string[]>();
  const wrap = (fn: ReturnType<Ajv['compile']>) => (doc: Obj) => (fn(doc) ? [] : (fn.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message ?? ''} ${JSON.stringify(e.params)}`));
  for (const [kind, def] of Object.entries(core.kinds)) out.set(kind, wrap(ajv.compile({ $ref: `k8s#/definitions/${def}` })));
  for (const c of crds) out.set(`${c.group}/${c.version} ${c.kind}`, wrap(ajv.compile(closed(c.schema) as AnySchemaObject)));
  return out;
}

test('every object in deploy/kubernetes/ is valid against the schema of its kind', () => {
  const check = validators();
  const docs = manifests();
  assert.deepEqual([...new Set(docs.map((d) => `${d.apiVersion} ${d.kind}`))].sort(), [...check.keys()].sort(), 'a schema for every kind used, and every vendored schema used');
  for (const d of docs) {
    const v = check.get(`${d.apiVersion} ${d.kind}`);
    assert.ok(v !== undefined, `${d.file}: no schema for ${d.apiVersion} ${d.kind}`);
    assert.deepEqual(v(d.body), [], `${d.file}: ${d.kind} ${d.name}`);
  }
});

test('the schemas refuse what they are here to catch: a misspelt field, a wrong type, a missing required field', () => {
  const check = validators();
  const docs = manifests();
  const copy = (d: Doc): Obj => structuredClone(d.body);
  const vllm = copy(one(docs, 'Deployment', 'vllm.yaml'));
  const container = obj(list(obj(obj(obj(vllm.spec, 'spec').template, 'template').spec, 'pod spec').containers, 'containers')[0], 'container');
  const port = obj(list(container.ports, 'ports')[0], 'port');
  port.contianerPort = port.containerPort;
  delete port.containerPort;
  assert.notDeepEqual(check.get('apps/v1 Deployment')?.(vllm), [], 'a misspelt containerPort');
  const service = copy(one(docs, 'Service'));
  obj(list(obj(service.spec, 'spec').ports, 'ports')[0], 'port').port = 'ninety';
  assert.notDeepEqual(check.get('v1 Service')?.(service), [], 'a port that is not a number');
  const pool = copy(one(docs, 'InferencePool'));
  delete obj(pool.spec, 'spec').targetPorts;
  assert.notDeepEqual(check.get('inference.networking.k8s.io/v1 InferencePool')?.(pool), [], 'a pool without targetPorts');
  const route = copy(one(docs, 'HTTPRoute'));
  obj(list(obj(list(obj(route.spec, 'spec').rules, 'rules')[0], 'rule').backendRefs, 'backendRefs')[0], 'backendRef').weight = 'all';
  assert.notDeepEqual(check.get('gateway.networking.k8s.io/v1 HTTPRoute')?.(route), [], 'a weight that is not a number');
});

// The parts of the objects the agreement test reads.
function podSpec(d: Doc): Obj {
  return obj(obj(obj(d.body.spec, 'spec').template, 'template').spec, `${d.name} pod spec`);
}
function container(d: Doc): Obj {
  return obj(list(podSpec(d).containers, 'containers')[0], `${d.name} container`);
}
function containerPort(d: Doc, name: string): number {
  const p = list(container(d).ports, 'ports').map((x) => obj(x, 'port')).find((x) => x.name === name);
  assert.ok(p !== undefined, `${d.name} has a port named ${name}`);
  return Number(p.containerPort);
}
function argAfter(args: readonly string[], flag: string): string {
  const at = args.indexOf(flag);
  assert.ok(at >= 0 && at + 1 < args.length, `vLLM args give ${flag}`);
  return args[at + 1] as string;
}
function eppConfigText(docs: readonly Doc[]): string {
  return String(obj(one(docs, 'ConfigMap').body.data, 'ConfigMap data')['epp.yaml']);
}

test("the EPP's config parses with llmgw epp's own parser and agrees with the pool, the EPP's pods and vLLM", () => {
  const docs = manifests();
  const config = parseEppConfig(parse(eppConfigText(docs)), 'deploy/kubernetes/epp.yaml ConfigMap');
  const pool = one(docs, 'InferencePool');
  const poolSpec = obj(pool.body.spec, 'pool spec');
  const epp = one(docs, 'Deployment', 'epp.yaml');
  const vllm = one(docs, 'Deployment', 'vllm.yaml');
  const eppService = one(docs, 'Service');

  assert.equal(new Set(docs.map((d) => d.namespace)).size, 1, 'every object in one namespace');
  assert.deepEqual(config.discovery, { kind: 'kubernetes', pool: pool.name, namespace: pool.namespace, kubeconfig: '' });

  // The pool selects vLLM's pods, on vLLM's serving port.
  const podLabels = obj(obj(obj(obj(vllm.body.spec, 'spec').template, 'template').metadata, 'metadata').labels, 'labels');
  for (const [k, v] of Object.entries(obj(obj(poolSpec.selector, 'selector').matchLabels, 'matchLabels'))) assert.equal(podLabels[k], v, `vLLM pods carry ${k}=${String(v)}`);
  const targetPorts = list(poolSpec.targetPorts, 'targetPorts').map((p) => Number(obj(p, 'targetPort').number));
  assert.deepEqual(targetPorts, [containerPort(vllm, 'http')]);
  const args = list(container(vllm).args, 'vLLM args').map(String);
  assert.equal(argAfter(args, '--port'), String(targetPorts[0]));

  // The EPP answers for the model vLLM serves, hashing as vLLM does, subscribed where vLLM publishes.
  assert.deepEqual(config.pool.models, [argAfter(args, '--served-model-name')]);
  assert.ok(args.includes('--enable-prefix-caching'));
  assert.equal(argAfter(args, '--prefix-caching-hash-algo'), 'sha256_cbor');
  assert.equal(Number(argAfter(args, '--block-size')), config.pool.blockSizeTokens);
  const env = Object.fromEntries(list(container(vllm).env, 'env').map((e) => obj(e, 'env')).map((e) => [e.name, e.value]));
  assert.equal(env.PYTHONHASHSEED, config.pool.hashSeed);
  assert.equal(env.VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES, '1');
  const kv = JSON.parse(argAfter(args, '--kv-events-config')) as Obj;
  assert.equal(kv.enable_kv_cache_events, true);
  assert.equal(kv.publisher, 'zmq');
  assert.equal(kv.topic, config.pool.topic);
  const pod = { name: 'vllm-0', address: '10.1.2.3', port: targetPorts[0] as number, labels: {} };
  const bound = (endpoint: unknown): string => String(endpoint).replace('*', pod.address);
  assert.equal(filledTemplate(config.pool.kvEvents, pod), bound(kv.endpoint));
  assert.equal(filledTemplate(config.pool.replay, pod), bound(kv.replay_endpoint));
  assert.equal(`tcp://${pod.address}:${containerPort(vllm, 'kv-events')}`, bound(kv.endpoint));
  assert.equal(`tcp://${pod.address}:${containerPort(vllm, 'kv-replay')}`, bound(kv.replay_endpoint));

  // The EPP's container listens where its config says, and is probed on the health port.
  const c = container(epp);
  assert.deepEqual(list(c.args, 'EPP args'), ['epp', '--config', `${String(obj(list(c.volumeMounts, 'mounts')[0], 'mount').mountPath)}/epp.yaml`]);
  assert.equal(containerPort(epp, 'grpc'), config.listen.extProcPort);
  assert.equal(containerPort(epp, 'grpc-health'), config.listen.healthPort);
  assert.equal(containerPort(epp, 'metrics'), config.listen.metricsPort);
  for (const probe of ['livenessProbe', 'readinessProbe']) assert.equal(Number(obj(obj(c[probe], probe).grpc, 'grpc').port), config.listen.healthPort, probe);
  const volume = list(podSpec(epp).volumes, 'volumes').map((v) => obj(v, 'volume')).find((v) => v.name === 'config');
  assert.equal(obj(volume?.configMap, 'config volume').name, one(docs, 'ConfigMap').name);

  // The pool's endpointPickerRef is the EPP's Service, by Service port, which reaches ext_proc.
  const ref = obj(poolSpec.endpointPickerRef, 'endpointPickerRef');
  assert.equal(ref.name, eppService.name);
  const svcSpec = obj(eppService.body.spec, 'service spec');
  const svcPort = list(svcSpec.ports, 'service ports').map((p) => obj(p, 'port')).find((p) => p.port === obj(ref.port, 'ref port').number);
  assert.ok(svcPort !== undefined, 'the Service has the endpointPickerRef port');
  assert.equal(svcPort.targetPort, 'grpc');
  const eppLabels = obj(obj(obj(obj(epp.body.spec, 'spec').template, 'template').metadata, 'metadata').labels, 'labels');
  for (const [k, v] of Object.entries(obj(svcSpec.selector, 'selector'))) assert.equal(eppLabels[k], v, `the Service selects the EPP's pods by ${k}`);

  // The route sends to the pool; the EPP runs as the account the Role is bound to.
  const backend = obj(list(obj(list(obj(one(docs, 'HTTPRoute').body.spec, 'spec').rules, 'rules')[0], 'rule').backendRefs, 'backendRefs')[0], 'backendRef');
  assert.deepEqual(backend, { group: 'inference.networking.k8s.io', kind: 'InferencePool', name: pool.name });
  const account = one(docs, 'ServiceAccount');
  assert.equal(podSpec(epp).serviceAccountName, account.name);
  const binding = one(docs, 'RoleBinding');
  assert.deepEqual(list(binding.body.subjects, 'subjects'), [{ kind: 'ServiceAccount', name: account.name, namespace: account.namespace }]);
  assert.deepEqual(binding.body.roleRef, { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: one(docs, 'Role').name });
});

test("the EPP started from the ConfigMap's config finds the manifests' pool through the API, within the Role, and answers its probes", async (t) => {
  const docs = manifests();
  const pool = one(docs, 'InferencePool');
  const vllm = one(docs, 'Deployment', 'vllm.yaml');
  const api = await startFakeKubeApi(pool.namespace);
  t.after(() => api.close());
  api.put('inferencepools', pool.body as Parameters<typeof api.put>[1]);
  const labels = obj(obj(obj(obj(vllm.body.spec, 'spec').template, 'template').metadata, 'metadata').labels, 'labels') as Record<string, string>;
  api.put('pods', { metadata: { name: 'vllm-qwen3-8b-0', labels }, status: { podIP: '127.0.0.1', conditions: [{ type: 'Ready', status: 'True' }] } });

  // The manifests' config as it is, but on free loopback ports and this test's kubeconfig.
  const raw = obj(parse(eppConfigText(docs)), 'epp.yaml');
  obj(obj(raw.discovery, 'discovery').kubernetes, 'kubernetes').kubeconfig = api.kubeconfig;
  raw.listen = { host: '127.0.0.1', ext_proc_port: 0, health_port: 0, metrics_port: 0 };
  const config = parseEppConfig(raw);
  assert.ok(config.discovery.kind === 'kubernetes');
  const problems: string[] = [];
  const discovery = watchInferencePool({ ...config.discovery, onProblem: (m) => problems.push(m) });
  const epp = await startEpp(config, () => discovery);
  t.after(() => epp.close());
  await waitFor(() => discovery.current().length === 1, { timeoutMs: 10_000, what: 'one endpoint from the pool' });
  await waitFor(() => api.requests.includes('watch pods'), { timeoutMs: 10_000, what: 'the watch of the pool\'s pods' });
  assert.deepEqual(problems, []);
  assert.equal(discovery.counts().errors, 0);
  assert.equal(discovery.current()[0]?.port, containerPort(vllm, 'http'));

  // Every call the watch made, as RBAC sees it, is one the Role grants; the Role grants no more
  // than get, list and watch on those two resources.
  const rules = list(one(docs, 'Role').body.rules, 'rules').map((r) => obj(r, 'rule'));
  const grants = new Set(rules.flatMap((r) => list(r.apiGroups, 'apiGroups').flatMap((g) => list(r.resources, 'resources').flatMap((res) => list(r.verbs, 'verbs').map((v) => `${String(g)}/${String(res)} ${String(v)}`)))));
  const groupOf = { pods: '', inferencepools: 'inference.networking.k8s.io' } as const;
  const calls = new Set(api.requests.map((r) => {
    const [verb, resource] = r.split(' ') as [string, keyof typeof groupOf];
    return `${groupOf[resource]}/${resource} ${verb}`;
  }));
  assert.deepEqual([...calls].sort(), ['/pods list', '/pods watch', 'inference.networking.k8s.io/inferencepools list', 'inference.networking.k8s.io/inferencepools watch']);
  for (const c of calls) assert.ok(grants.has(c), `the Role grants ${c}`);
  assert.deepEqual([...grants].sort(), ['/pods get', '/pods list', '/pods watch', 'inference.networking.k8s.io/inferencepools get', 'inference.networking.k8s.io/inferencepools list', 'inference.networking.k8s.io/inferencepools watch']);

  // The probes name services the EPP's gRPC health server reports SERVING.
  const c = container(one(docs, 'Deployment', 'epp.yaml'));
  const def = loadSync(healthProto, { keepCase: true, enums: String });
  const pkg = grpc.loadPackageDefinition(def) as unknown as { grpc: { health: { v1: { Health: grpc.ServiceClientConstructor } } } };
  const health = new pkg.grpc.health.v1.Health(`127.0.0.1:${epp.healthPort}`, grpc.credentials.createInsecure()) as unknown as grpc.Client & { Check(r: unknown, o: grpc.CallOptions, cb: (e: Error | null, r?: { status: string }) => void): void };
  t.after(() => health.close());
  for (const probe of ['livenessProbe', 'readinessProbe']) {
    const service = String(obj(obj(c[probe], probe).grpc, 'grpc').service);
    const status = await new Promise<string | undefined>((resolve, reject) => health.Check({ service }, { deadline: Date.now() + 5000 }, (e, r) => (e ? reject(e) : resolve(r?.status))));
    assert.equal(status, 'SERVING', `${probe} service ${service}`);
  }
});

// Envoy's config, read as Envoy would: typed_config messages by their @type.
function envoyConfig(): Obj {
  return obj(parse(readFileSync(join(root, 'deploy', 'envoy', 'envoy.yaml'), 'utf8')), 'envoy.yaml');
}
function typed(list_: readonly unknown[], type: string): Obj {
  const found = list_.map((x) => obj(obj(x, 'entry').typed_config, 'typed_config')).find((tc) => tc['@type'] === `type.googleapis.com/${type}`);
  assert.ok(found !== undefined, `a ${type}`);
  return found;
}

test("the Envoy config sends every request through ext_proc to the EPP and on to the endpoint it names, as GIE's reference Envoy does", () => {
  const cfg = envoyConfig();
  const statics = obj(cfg.static_resources, 'static_resources');
  const listener = obj(list(statics.listeners, 'listeners')[0], 'listener');
  const hcm = typed(list(obj(list(listener.filter_chains, 'filter_chains')[0], 'filter chain').filters, 'filters'), 'envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager');
  const filters = list(hcm.http_filters, 'http_filters').map((f) => obj(f, 'http filter'));
  assert.deepEqual(filters.map((f) => f.name), ['envoy.filters.http.ext_proc', 'envoy.filters.http.lua', 'envoy.filters.http.router'], 'ext_proc, then the header trimmed to one address, then the router');
  const lua = String(obj(typed(filters, 'envoy.extensions.filters.http.lua.v3.Lua').default_source_code, 'default_source_code').inline_string);
  assert.equal(lua.match(new RegExp(destinationKey, 'g'))?.length, 2, 'the Lua filter reads and rewrites the destination header');
  const extProc = typed(filters, 'envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor');
  assert.equal(extProc.failure_mode_allow, false);

  // processing_mode against the vendored proto: every field is ProcessingMode's, every value one of its enum's.
  const def = loadSync('envoy/extensions/filters/http/ext_proc/v3/processing_mode.proto', { includeDirs: [join(root, 'proto')], keepCase: true });
  const message = def['envoy.extensions.filters.http.ext_proc.v3.ProcessingMode'] as unknown as {
    type: { field: { name: string; typeName: string }[]; enumType: { name: string; value: { name: string }[] }[] };
  };
  const enumValues = (typeName: string): string[] => {
    const e = message.type.enumType.find((x) => x.name === typeName);
    assert.ok(e !== undefined, `ProcessingMode has an enum ${typeName}`);
    return e.value.map((v) => v.name);
  };
  const mode = obj(extProc.processing_mode, 'processing_mode');
  for (const [k, v] of Object.entries(mode)) {
    const field = message.type.field.find((f) => f.name === k);
    assert.ok(field !== undefined, `ProcessingMode has a field ${k}`);
    assert.ok(enumValues(field.typeName).includes(String(v)), `${k}: ${String(v)} is one of its enum's values`);
  }
  assert.deepEqual(mode, {
    request_header_mode: 'SEND',
    response_header_mode: 'SEND',
    request_body_mode: 'FULL_DUPLEX_STREAMED',
    response_body_mode: 'FULL_DUPLEX_STREAMED',
    request_trailer_mode: 'SEND',
    response_trailer_mode: 'SEND',
  });

  // The ext_proc cluster: HTTP/2 (gRPC), plaintext, at the EPP's port, health-checked on the ext_proc service.
  const clusters = list(statics.clusters, 'clusters').map((c) => obj(c, 'cluster'));
  const cluster = (name: unknown): Obj => {
    const c = clusters.find((x) => x.name === name);
    assert.ok(c !== undefined, `a cluster ${String(name)}`);
    return c;
  };
  const epp = cluster(obj(obj(extProc.grpc_service, 'grpc_service').envoy_grpc, 'envoy_grpc').cluster_name);
  const http = obj(obj(epp.typed_extension_protocol_options, 'protocol options')['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'], 'HttpProtocolOptions');
  assert.ok('http2_protocol_options' in obj(http.explicit_http_config, 'explicit_http_config'));
  assert.equal(epp.transport_socket, undefined, 'llmgw epp serves gRPC without TLS');
  const eppConfig = parseEppConfig(parse(eppConfigText(manifests())));
  const address = obj(obj(obj(list(obj(list(obj(epp.load_assignment, 'load_assignment').endpoints, 'endpoints')[0], 'locality').lb_endpoints, 'lb_endpoints')[0], 'lb').endpoint, 'endpoint').address, 'address');
  assert.equal(obj(address.socket_address, 'socket_address').port_value, eppConfig.listen.extProcPort);
  assert.equal(obj(obj(list(epp.health_checks, 'health_checks')[0], 'health check').grpc_health_check, 'grpc_health_check').service_name, extProcService);

  // Every route goes to an ORIGINAL_DST cluster keyed on the header the EPP sets, without the 15 s default timeout.
  const routes = list(obj(list(obj(hcm.route_config, 'route_config').virtual_hosts, 'virtual_hosts')[0], 'virtual host').routes, 'routes').map((r) => obj(obj(r, 'route').route, 'route action'));
  assert.ok(routes.length > 0);
  for (const r of routes) {
    const dst = cluster(r.cluster);
    assert.equal(dst.type, 'ORIGINAL_DST');
    assert.equal(dst.lb_policy, 'CLUSTER_PROVIDED');
    assert.deepEqual(dst.original_dst_lb_config, { use_http_header: true, http_header_name: destinationKey });
    assert.match(String(r.timeout), /^\d+s$/);
    assert.ok(Number.parseInt(String(r.timeout), 10) >= 300, 'a route timeout as long as a generation');
  }
});

// A Dockerfile as instructions, continuation lines joined and comments dropped, split into stages.
interface Instruction {
  readonly op: string;
  readonly args: string;
}
function dockerfile(): Instruction[][] {
  const text = readFileSync(join(root, 'deploy', 'Dockerfile'), 'utf8');
  const lines = text.replace(/\\\n/g, ' ').split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('#'));
  const stages: Instruction[][] = [[]];
  for (const l of lines) {
    const [op = '', ...rest] = l.split(/\s+/);
    if (op.toUpperCase() === 'FROM') stages.push([]);
    stages[stages.length - 1]?.push({ op: op.toUpperCase(), args: rest.join(' ') });
  }
  return stages;
}
function copies(stage: readonly Instruction[]): { from: string | undefined; sources: string[]; dest: string }[] {
  return stage.filter((i) => i.op === 'COPY').map((i) => {
    const words = i.args.split(/\s+/);
    const from = words.find((w) => w.startsWith('--from='))?.slice('--from='.length);
    const paths = words.filter((w) => !w.startsWith('--'));
    return { from, sources: paths.slice(0, -1), dest: paths[paths.length - 1] ?? '' };
  });
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? filesUnder(p) : [p];
  });
}

test("the Dockerfile's claims hold: pinned bases, only the build's output shipped, a non-root user, an entrypoint that exists", () => {
  const [preamble = [], ...stages] = dockerfile();
  const runtime = stages[stages.length - 1] ?? [];
  const args = Object.fromEntries(preamble.filter((i) => i.op === 'ARG').map((i) => i.args.split('=') as [string, string]));
  for (const s of stages) {
    const base = (s[0]?.args.split(/\s+/)[0] ?? '').replace(/^\$\{(\w+)\}$/, (_, k: string) => args[k] ?? '');
    assert.match(base, /^node:20\.\d+\.\d+-[a-z]+(-slim)?$/, `every stage's base is node 20 pinned by full version: ${base}`);
  }

  // What the image holds: dist, proto, production node_modules and package.json, nothing else.
  const shipped = copies(runtime).map((c) => `${c.from ?? 'context'}:${c.sources.join(',')}`);
  assert.deepEqual(shipped.sort(), ['build:/app/dist', 'context:package.json', 'context:proto', 'deps:/app/node_modules']);
  const deps = stages.find((s) => s[0]?.args.endsWith(' AS deps')) ?? [];
  assert.ok(deps.some((i) => i.op === 'RUN' && /npm ci .*--omit=dev/.test(i.args)), 'the deps stage installs production dependencies only');

  // Every context path a COPY names exists and gets past Dockerfile.dockerignore (an allow-list).
  const ignore = readFileSync(join(root, 'deploy', 'Dockerfile.dockerignore'), 'utf8').split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('#'));
  assert.equal(ignore[0], '*', 'the ignore file starts by excluding everything');
  const allowed = ignore.slice(1).map((l) => {
    assert.ok(l.startsWith('!'), `after *, only exceptions: ${l}`);
    return l.slice(1).replace(/\/$/, '');
  });
  for (const c of stages.flatMap(copies).filter((x) => x.from === undefined)) {
    for (const src of c.sources) {
      assert.ok(existsSync(join(root, src)), `COPY ${src} exists`);
      assert.ok(allowed.some((a) => src === a || src.startsWith(`${a}/`)), `COPY ${src} is in the build context`);
    }
  }

  // The image's compile is the repository's, over src/ alone.
  const image = JSON.parse(readFileSync(join(root, 'deploy', 'tsconfig.image.json'), 'utf8')) as { extends: string; include: string[]; compilerOptions: { outDir: string; rootDir: string } };
  assert.deepEqual([image.extends, image.include, image.compilerOptions.outDir, image.compilerOptions.rootDir], ['../tsconfig.json', ['../src/**/*.ts'], '../dist', '..']);

  // Non-root by number (runAsNonRoot can only verify a numeric user), and the entrypoint is the build's CLI.
  const user = runtime.filter((i) => i.op === 'USER').pop()?.args ?? '';
  assert.match(user, /^[1-9]\d*(:\d+)?$/);
  assert.equal(runtime.filter((i) => i.op === 'ENTRYPOINT').pop()?.args, '["llmgw"]');
  const link = runtime.map((i) => /^ln -s (\S+) \/usr\/local\/bin\/llmgw$/.exec(i.args)).find((m) => m !== null);
  assert.ok(link?.[1] !== undefined, 'llmgw is linked onto PATH');
  const target = link[1].replace(/^\/app\//, '');
  assert.ok(existsSync(join(root, target)), `${target} exists after the build`);
  assert.match(readFileSync(join(root, target), 'utf8'), /^#!\/usr\/bin\/env node\n/);

  // Whatever the built code imports must be a production dependency: the image has no others.
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
  const imported = new Set<string>();
  for (const f of filesUnder(join(root, 'dist', 'src')).filter((p) => p.endsWith('.js'))) {
    for (const [, spec] of readFileSync(f, 'utf8').matchAll(/(?:from |import\(|require\(|\)\.resolve\()'([^'./][^']*)'/g)) {
      if (spec === undefined || spec.startsWith('node:')) continue;
      imported.add(spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : (spec.split('/')[0] ?? spec));
    }
  }
  assert.ok(imported.size > 0);
  for (const name of imported) assert.ok(name in pkg.dependencies, `${name}, imported by dist/src, is a production dependency`);
});
