// An InferencePool and its pods as endpoints: which pods count, one endpoint per target port, labels kept.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { labelSelectorOf, poolEndpoints, poolSelection } from '../../src/epp/index.js';
import type { InferencePoolObject, PodObject, PoolSelection } from '../../src/epp/index.js';

const pool = (ports: number[], matchLabels: Record<string, string> = { app: 'vllm' }): InferencePoolObject => ({
  metadata: { name: 'qwen' },
  spec: { selector: { matchLabels }, targetPorts: ports.map((number) => ({ number })), endpointPickerRef: { name: 'llmgw-epp', port: { number: 9002 } } },
});
const pod = (name: string, o: { ip?: string; ready?: boolean; deleting?: boolean; labels?: Record<string, string> } = {}): PodObject => ({
  metadata: { name, labels: o.labels ?? { app: 'vllm', zone: 'a' }, ...(o.deleting === true ? { deletionTimestamp: '2026-12-07T13:00:00Z' } : {}) },
  status: {
    ...(o.ip === '' ? {} : { podIP: o.ip ?? '10.0.0.1' }),
    conditions: [{ type: 'PodScheduled', status: 'True' }, { type: 'Ready', status: o.ready === false ? 'False' : 'True' }],
  },
});
const selectionOf = (p: InferencePoolObject): PoolSelection => {
  const s = poolSelection(p);
  if ('error' in s) throw new Error(s.error);
  return s;
};

void test('pool-pods: one target port gives one endpoint per ready pod, named for the pod, labels copied', () => {
  const { endpoints, skipped } = poolEndpoints(selectionOf(pool([8000])), [pod('b', { ip: '10.0.0.2' }), pod('a')]);
  assert.deepEqual(endpoints, [
    { name: 'a', address: '10.0.0.1', port: 8000, labels: { app: 'vllm', zone: 'a' } },
    { name: 'b', address: '10.0.0.2', port: 8000, labels: { app: 'vllm', zone: 'a' } },
  ]);
  assert.deepEqual(skipped, []);
});

void test('pool-pods: several target ports are data-parallel ranks, each its own endpoint named pod:port', () => {
  const { endpoints } = poolEndpoints(selectionOf(pool([8000, 8001])), [pod('a')]);
  assert.deepEqual(
    endpoints.map((e) => [e.name, e.address, e.port]),
    [
      ['a:8000', '10.0.0.1', 8000],
      ['a:8001', '10.0.0.1', 8001],
    ],
  );
});

void test('pool-pods: not ready, without an IP, or terminating pods are skipped with the reason', () => {
  const pods = [pod('ok'), pod('cold', { ready: false }), pod('pending', { ip: '' }), pod('leaving', { deleting: true })];
  const { endpoints, skipped } = poolEndpoints(selectionOf(pool([8000])), pods);
  assert.deepEqual(endpoints.map((e) => e.name), ['ok']);
  assert.deepEqual(skipped, [
    { pod: 'cold', reason: 'not-ready' },
    { pod: 'leaving', reason: 'terminating' },
    { pod: 'pending', reason: 'no-ip' },
  ]);
});

void test('pool-pods: a pod without a Ready condition is not ready', () => {
  const p: PodObject = { metadata: { name: 'x', labels: { app: 'vllm' } }, status: { podIP: '10.0.0.9' } };
  assert.deepEqual(poolEndpoints(selectionOf(pool([8000])), [p]).skipped, [{ pod: 'x', reason: 'not-ready' }]);
});

void test('pool-pods: a pod the selector does not match is left out, not reported skipped', () => {
  const { endpoints, skipped } = poolEndpoints(selectionOf(pool([8000])), [pod('other', { labels: { app: 'sglang' } })]);
  assert.deepEqual([endpoints, skipped], [[], []]);
});

void test('pool-pods: a copied label map is the endpoint\'s own', () => {
  const p = pod('a');
  const { endpoints } = poolEndpoints(selectionOf(pool([8000])), [p]);
  const first = endpoints[0];
  assert.ok(first !== undefined);
  first.labels.zone = 'b';
  assert.equal(p.metadata?.labels?.zone, 'a');
});

void test('pool-pods: a pool without a selector or a target port is refused with the field to fix', () => {
  const noSelector = poolSelection(pool([8000], {}));
  assert.ok('error' in noSelector && noSelector.error.includes('spec.selector.matchLabels'));
  const noPorts = poolSelection(pool([]));
  assert.ok('error' in noPorts && noPorts.error.includes('spec.targetPorts'));
  const badPort = poolSelection(pool([0, 70000]));
  assert.ok('error' in badPort);
});

void test('pool-pods: the label selector query is sorted so one pool gives one query', () => {
  assert.equal(labelSelectorOf({ zone: 'a', app: 'vllm' }), 'app=vllm,zone=a');
});
