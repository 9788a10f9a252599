// `llmgw epp` with discovery.kubernetes, as a real process against a fake Kubernetes API and two sim
// pods: unready until the first sync, then the pods' readiness in the API decides which endpoints
// Envoy's requests reach; a config that names no API refuses to start, saying how to give one.
import { strict as assert } from 'node:assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { extProcService } from '../../src/epp/index.js';
import { startFakeKubeApi } from '../support/fake-kube-api.js';
import { freePort, waitFor } from '../support/wait.js';
import { extProcClient, pickFor, startSimPod, type SimPod } from './envoy.js';
import { failedEpp, healthClient, startEppProcess } from './epp-process.js';

const model = 'm';
const ask = (n: number): string => JSON.stringify({ model, messages: [{ role: 'user', content: `which pods are in? ${n}` }], max_tokens: 4 });
const addr = (p: SimPod): string => `${p.host}:${p.port}`;

const pod = (p: SimPod, ready: boolean) => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name: p.name, labels: { app: 'sim', kv_port: String(p.kvPort), replay_port: String(p.replayPort) } },
  status: { podIP: p.host, conditions: [{ type: 'Ready', status: ready ? 'True' : 'False' }] },
});

void test('epp process: kubernetes discovery decides readiness and which pods Envoy reaches', { timeout: 240_000 }, async (t) => {
  const fake = await startFakeKubeApi();
  t.after(() => fake.close());
  // One port at two addresses: an InferencePool's targetPorts are the same for every pod.
  const port = await freePort();
  const a = await startSimPod(t, 'sim-a', model, '127.0.0.1', port);
  const b = await startSimPod(t, 'sim-b', model, '127.0.0.2', port);
  fake.put('inferencepools', {
    apiVersion: 'inference.networking.k8s.io/v1',
    kind: 'InferencePool',
    metadata: { name: 'sims' },
    spec: { selector: { matchLabels: { app: 'sim' } }, targetPorts: [{ number: port }], endpointPickerRef: { name: 'llmgw-epp', port: { number: 9002 } } },
  });
  fake.put('pods', pod(a, true));
  fake.put('pods', pod(b, false));
  const release = fake.holdLists();
  // A list still held at the end would keep the EPP's request, and so the process, open.
  t.after(release);
  const epp = await startEppProcess(
    t,
    `
discovery: { kubernetes: { pool: sims, namespace: default, kubeconfig: ${JSON.stringify(fake.kubeconfig)} } }
pool:
  models: [${model}]
  kv_events: "tcp://{address}:{labels.kv_port}"
  replay: "tcp://{address}:{labels.replay_port}"
  hash_seed: "7"
  tokenizer: bytes
  health_interval_ms: 100
listen: { host: 127.0.0.1, ext_proc_port: 0, health_port: 0, metrics_port: 0 }
`,
  );
  const health = healthClient(t, epp.healthPort);
  const client = extProcClient(t, epp.extProcPort);
  // Reachable endpoints, as the destination header lists them (chosen first, then the fallbacks).
  const reached = async (n: number): Promise<string> => {
    const p = await pickFor(client, ask(n));
    p.x.close();
    return p.destination?.split(',').sort().join(',') ?? String(p.first.immediate_response?.status?.code);
  };

  await t.test('alive but not ready until the pool and its pods are listed', async () => {
    await waitFor(() => fake.requests.includes('list inferencepools'), { what: 'the first list asked' });
    assert.equal(await health('liveness'), 'SERVING');
    for (const service of ['readiness', extProcService, '']) assert.equal(await health(service), 'NOT_SERVING', service);
    release();
    await waitFor(async () => (await health('readiness')) === 'SERVING', { timeoutMs: 20_000, what: 'readiness after the sync' });
    assert.equal(await health(extProcService), 'SERVING');
  });

  await t.test('only the ready pod is reached; a pod turning ready joins, one turning unready leaves', async () => {
    let n = 0;
    await waitFor(async () => (await reached(n++)) === addr(a), { timeoutMs: 20_000, what: 'sim-a alone' });
    fake.put('pods', pod(b, true));
    await waitFor(async () => (await reached(n++)) === [addr(a), addr(b)].sort().join(','), { timeoutMs: 20_000, what: 'sim-b joining once ready' });
    fake.put('pods', pod(a, false));
    await waitFor(async () => (await reached(n++)) === addr(b), { timeoutMs: 20_000, what: 'sim-a leaving once unready' });
  });

  await t.test('a deleted pod leaves; with none ready Envoy gets a 503', async () => {
    fake.remove('pods', b.name);
    let n = 100;
    await waitFor(async () => (await reached(n++)) === 'ServiceUnavailable', { timeoutMs: 20_000, what: 'no endpoint once sim-b is deleted' });
    const metrics = await (await fetch(`http://127.0.0.1:${epp.metricsPort}/metrics`)).text();
    assert.match(metrics, /^llmgw_epp_discovery_skipped_total\{reason="not-ready"\} [1-9]/m, 'unready pods are counted as skipped');
  });

  await t.test('SIGTERM stops the watch and the listeners; the process exits 0', async () => {
    assert.equal(await epp.stop(), 0, epp.err());
  });
});

void test('epp process: kubernetes discovery with no API to watch refuses to start and names the fix', async (t) => {
  const home = mkdtempSync(join(tmpdir(), 'llmgw-epp-home-'));
  t.after(() => rmSync(home, { recursive: true, force: true }));
  const config = `
discovery: { kubernetes: { pool: sims } }
pool: { models: [m] }
listen: { host: 127.0.0.1, ext_proc_port: 0, health_port: 0, metrics_port: 0 }
`;
  const env = { ...process.env, HOME: home, KUBECONFIG: '' };
  const none = await failedEpp(t, config, env);
  assert.equal(none.code, 1);
  assert.match(none.err, /discovery\.kubernetes: found no Kubernetes API to watch .*give discovery\.kubernetes\.kubeconfig/);
  const missing = await failedEpp(t, config.replace('{ pool: sims }', `{ pool: sims, kubeconfig: ${JSON.stringify(join(home, 'nope'))} }`), env);
  assert.equal(missing.code, 1);
  assert.match(missing.err, /discovery\.kubernetes\.kubeconfig: cannot load .*nope \(ENOENT\)/);
  const badName = await failedEpp(t, config.replace('{ pool: sims }', '{ pool: Sims_1, namespace: "Prod" }'), env);
  assert.equal(badName.code, 1);
  assert.match(badName.err, /discovery\.kubernetes\.pool: "Sims_1" is not a Kubernetes object name/);
  assert.match(badName.err, /discovery\.kubernetes\.namespace: "Prod" is not a namespace name/);
});
