// The agent's reconcile, a pure function: one row per rule of how a desired set meets what runs.
import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { reconcile, type ReplicaInput, type RunningReplica } from '../../src/actors/index.js';

const replica = (replicaId: string, fingerprint = 'fp', retire = false): ReplicaInput => ({
  replicaId,
  node: 'local',
  model: 'm',
  adapters: [],
  url: undefined,
  apiKey: '',
  kvEvents: false,
  blockSizeTokens: 16,
  hashSeed: '0',
  dataParallelSize: 1,
  fingerprint,
  shards: [],
  publisher: undefined,
  retire,
});

const running = (fingerprint: string, draining = false) => ({ fingerprint, draining });

const rows: { why: string; now: Record<string, RunningReplica>; desired: ReplicaInput[]; retiring: ReplicaInput[]; start: string[]; drain: string[]; next: string[] }[] = [
  { why: 'a new replica starts', now: {}, desired: [replica('a')], retiring: [], start: ['a'], drain: [], next: [] },
  { why: 'an unchanged replica is left alone', now: { a: running('fp') }, desired: [replica('a')], retiring: [], start: [], drain: [], next: [] },
  { why: 'a changed replica drains and its successor waits for its ports', now: { a: running('old') }, desired: [replica('a', 'new')], retiring: [], start: [], drain: ['a'], next: ['a'] },
  { why: 'a replica no longer wanted drains with no successor', now: { a: running('fp') }, desired: [], retiring: [], start: [], drain: ['a'], next: [] },
  { why: 'a replica already draining is not told twice', now: { a: running('fp', true) }, desired: [], retiring: [], start: [], drain: [], next: [] },
  { why: 'a retiring replica left by a previous agent is taken back to be drained', now: {}, desired: [], retiring: [replica('old', 'fp', true)], start: ['old'], drain: [], next: [] },
];
for (const r of rows) {
  void test(`reconcile: ${r.why}`, () => {
    const out = reconcile({ running: r.now, next: {} }, r.desired, r.retiring);
    assert.deepEqual(out.start.map((x) => x.replicaId), r.start);
    assert.deepEqual(out.drain, r.drain);
    assert.deepEqual(Object.keys(out.next), r.next);
  });
}
