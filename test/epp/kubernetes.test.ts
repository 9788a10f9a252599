// The InferencePool watch against a fake API server: first sync, pods coming and going, the pool's
// selector and ports changing, 410 Gone re-lists, failed requests retried, a missing pool.
import { strict as assert } from 'node:assert';
import { after, before, test } from 'node:test';
import { watchInferencePool } from '../../src/epp/index.js';
import type { KubernetesDiscovery, PoolEndpoint, SkippedPod } from '../../src/epp/index.js';
import { startFakeKubeApi } from '../support/fake-kube-api.js';
import type { FakeKubeApi } from '../support/fake-kube-api.js';
import { waitFor } from '../support/wait.js';

const poolObject = (ports: number[], app = 'vllm') => ({
  apiVersion: 'inference.networking.k8s.io/v1',
  kind: 'InferencePool',
  metadata: { name: 'qwen' },
  spec: { selector: { matchLabels: { app } }, targetPorts: ports.map((number) => ({ number })), endpointPickerRef: { name: 'llmgw-epp', port: { number: 9002 } } },
});
const podObject = (name: string, ip: string, o: { ready?: boolean; app?: string } = {}) => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, labels: { app: o.app ?? 'vllm' } },
  status: { podIP: ip, conditions: [{ type: 'Ready', status: o.ready === false ? 'False' : 'True' }] },
});
const names = (eps: PoolEndpoint[]): string[] => eps.map((e) => `${e.name}@${e.address}:${e.port}`);

let fake: FakeKubeApi;
const open: KubernetesDiscovery[] = [];
before(async () => {
  fake = await startFakeKubeApi();
});
after(async () => {
  for (const d of open) await d.close();
  await fake.close();
});
function watchIt(extra: { onSkip?: (s: SkippedPod) => void; onProblem?: (m: string) => void } = {}): KubernetesDiscovery {
  const d = watchInferencePool({ pool: 'qwen', namespace: 'default', kubeconfig: fake.kubeconfig, backoffInitialMs: 20, backoffMaxMs: 100, ...extra });
  open.push(d);
  return d;
}

void test('kubernetes: syncs the pool and its ready pods, then follows pods added, changed and deleted', async () => {
  fake.put('inferencepools', poolObject([8000]));
  fake.put('pods', podObject('vllm-0', '10.0.0.1'));
  fake.put('pods', podObject('vllm-1', '10.0.0.2', { ready: false }));
  fake.put('pods', podObject('other', '10.0.0.9', { app: 'sglang' }));
  const skipped: SkippedPod[] = [];
  const d = watchIt({ onSkip: (s) => skipped.push(s) });
  const seen: string[][] = [];
  d.onChange((eps) => seen.push(names(eps)));
  await d.synced();
  assert.deepEqual(names(d.current()), ['vllm-0@10.0.0.1:8000']);
  assert.deepEqual(skipped[0], { pod: 'vllm-1', reason: 'not-ready' });
  assert.equal(d.counts().pods, 2, 'the selector filters on the server: the sglang pod is never listed');

  fake.put('pods', podObject('vllm-1', '10.0.0.2'));
  await waitFor(() => d.current().length === 2, { what: 'vllm-1 becoming ready' });
  fake.remove('pods', 'vllm-0');
  await waitFor(() => d.current().length === 1, { what: 'vllm-0 deleted' });
  assert.deepEqual(names(d.current()), ['vllm-1@10.0.0.2:8000']);
  assert.deepEqual(seen.at(-1), ['vllm-1@10.0.0.2:8000'], 'onChange hears each new list');
  await d.close();
});

void test('kubernetes: a change to the pool\'s ports or selector takes effect without a restart', async () => {
  const d = watchIt();
  await d.synced();
  fake.put('inferencepools', poolObject([8000, 8001]));
  await waitFor(() => d.current().length === 2, { what: 'the second data-parallel port' });
  assert.deepEqual(names(d.current()), ['vllm-1:8000@10.0.0.2:8000', 'vllm-1:8001@10.0.0.2:8001']);
  fake.put('pods', podObject('sg-0', '10.0.1.1', { app: 'sglang' }));
  fake.put('inferencepools', poolObject([30000], 'sglang'));
  await waitFor(() => names(d.current()).join() === 'other@10.0.0.9:30000,sg-0@10.0.1.1:30000', { what: 'the new selector' });
  fake.put('inferencepools', poolObject([8000]));
  await waitFor(() => names(d.current()).join() === 'vllm-1@10.0.0.2:8000', { what: 'the selector back' });
  await d.close();
});

void test('kubernetes: after 410 Gone it re-lists and sees the changes its watch missed', async () => {
  const d = watchIt();
  await d.synced();
  const listsBefore = d.counts().lists;
  const requestsBefore = fake.requests.length;
  fake.compact(() => {
    fake.put('pods', podObject('vllm-2', '10.0.0.3'));
    fake.remove('pods', 'vllm-1');
  });
  await waitFor(() => names(d.current()).join() === 'vllm-2@10.0.0.3:8000', { what: 'the re-listed pods' });
  assert.ok(d.counts().lists > listsBefore, 'a re-list was counted');
  assert.ok(fake.requests.slice(requestsBefore).includes('list pods'));
  assert.equal(d.counts().errors, 0, '410 is handled by re-listing, not counted as a failure');
  await d.close();
});

void test('kubernetes: failed requests are retried with backoff and reported; the endpoints recover', async () => {
  const problems: string[] = [];
  fake.failNext(3);
  const d = watchIt({ onProblem: (m) => problems.push(m) });
  await waitFor(() => d.synced().then(() => true), { what: 'sync after the failures', timeoutMs: 10_000 });
  assert.deepEqual(names(d.current()), ['vllm-2@10.0.0.3:8000']);
  assert.ok(d.counts().errors >= 1);
  assert.ok(problems.some((m) => m.includes('retrying in')), problems.join('\n'));
  await d.close();
});

void test('kubernetes: a missing pool syncs to no endpoints and says so; it is picked up when created', async () => {
  fake.remove('inferencepools', 'qwen');
  const problems: string[] = [];
  const d = watchIt({ onProblem: (m) => problems.push(m) });
  await d.synced();
  assert.deepEqual(d.current(), []);
  assert.ok(problems.some((m) => m.includes('InferencePool qwen not found in namespace default')), problems.join('\n'));
  fake.put('inferencepools', poolObject([8000]));
  await waitFor(() => d.current().length === 1, { what: 'the created pool' });
  fake.remove('inferencepools', 'qwen');
  await waitFor(() => d.current().length === 0, { what: 'the deleted pool emptying the endpoints' });
  await d.close();
});
