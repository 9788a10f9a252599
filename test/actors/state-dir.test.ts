// What makes a running shard adoptable: its fingerprint, and its record surviving an agent crash.
import * as assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { shardFingerprint, StateDir, type ShardRecord } from '../../src/actors/index.js';
import type { Command } from '../../src/engines/index.js';
import { input, spec } from './scripted.js';

const cmd = (env: [string, string][], generated: string[], args: string[] = ['serve']): Command => ({ name: 'e', path: '/bin/e', args, env, generated, waitForLeaderPort: false });

const base = spec({ apiKey: 'k1' });
const rows = [
  { why: 'a new random API key is not a new spec', a: [base, cmd([['KEY', 'k1']], ['KEY'])], b: [spec({ apiKey: 'k2' }), cmd([['KEY', 'k2']], ['KEY'])], same: true },
  { why: 'a changed inherited variable is not a new spec', a: [base, cmd([['HOME', '/a']], [])], b: [base, cmd([['HOME', '/b']], [])], same: true },
  { why: 'a changed generated variable is a new spec', a: [base, cmd([['CUDA_VISIBLE_DEVICES', '0']], ['CUDA_VISIBLE_DEVICES'])], b: [base, cmd([['CUDA_VISIBLE_DEVICES', '1']], ['CUDA_VISIBLE_DEVICES'])], same: false },
  { why: 'changed arguments are a new spec', a: [base, cmd([], [], ['serve'])], b: [base, cmd([], [], ['serve', '--x'])], same: false },
  { why: 'a moved port is a new spec', a: [base, cmd([], [])], b: [spec({ apiKey: 'k1', httpPort: 9 }), cmd([], [])], same: false },
] as const;
for (const r of rows) {
  void test(`shardFingerprint: ${r.why}`, () => {
    const fa = shardFingerprint(r.a[0], [r.a[1]]);
    const fb = shardFingerprint(r.b[0], [r.b[1]]);
    assert.equal(fa === fb, r.same);
  });
}

void test('state dir: records round-trip; unreadable files are reported and removed', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-state-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const sd = new StateDir(dir);
  const shard = input(dir, []);
  const rec: ShardRecord = {
    version: 1,
    replica: { replicaId: 'r0', node: 'n', model: 'm', adapters: [], url: undefined, apiKey: 'k', kvEvents: false, blockSizeTokens: 16, hashSeed: '0', dataParallelSize: 1, fingerprint: 'f', publisher: undefined },
    shard,
    fingerprint: 'f',
    processes: [{ name: 'e', pid: 1, startTime: 2 }],
  };
  sd.write(rec);
  writeFileSync(join(dir, 'broken.json'), '{');
  const bad: string[] = [];
  // JSON has no undefined: fields that were undefined come back absent, which reads the same.
  const want = JSON.parse(JSON.stringify(rec)) as ShardRecord;
  assert.deepEqual(sd.read((f) => bad.push(f)), [want]);
  assert.equal(bad.length, 1);
  assert.deepEqual(sd.read(() => assert.fail('the broken record was removed')), [want]);
  sd.remove('r0-s0');
  assert.deepEqual(sd.read(() => undefined), []);
});
