// The pure rules of prefill/decode routing: the pools by role, and when the prefill hop is skipped.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { pdPools, prefillCandidates } from '../../src/routing/index.js';
import type { DisaggView } from '../../src/routing/index.js';
import { replicaView } from '../gateway/replica-view.js';

const nixl = (role: DisaggView['role']): { disagg: DisaggView } => ({ disagg: { role, protocol: 'nixl', bootstrapPort: 0 } });
const p1 = replicaView('p1', nixl('prefill'));
const p2 = replicaView('p2', { disagg: { role: 'prefill', protocol: 'sglang', bootstrapPort: 8998 } });
const d1 = replicaView('d1', nixl('decode'));
const both = replicaView('x', nixl('both'));
const plain = replicaView('plain');

void test('pdPools: no prefill replica, no disaggregation', () => {
  assert.equal(pdPools([d1, both, plain]), undefined);
});
void test('pdPools: decode, both and role-less replicas decode; prefill and both prefill', () => {
  const p = pdPools([p1, d1, both, plain]);
  assert.deepEqual(p?.decode.map((r) => r.id), ['d1', 'x', 'plain']);
  assert.deepEqual(p?.prefill.map((r) => r.id), ['p1', 'x']);
});
void test('pdPools: with every decode replica gone, a prefill replica answers whole rather than none', () => {
  assert.deepEqual(pdPools([p1])?.decode.map((r) => r.id), ['p1']);
});

const hop = (o: Partial<Parameters<typeof prefillCandidates>[0]>) => prefillCandidates({ promptTokens: 2000, decodeCachedTokens: 0, skipPrefillTokens: 256, decode: d1, prefill: [p1, p2], ...o });
const rules = [
  { why: 'an uncached long prompt is prefilled elsewhere, on a replica of the decode\'s protocol', f: {}, want: { hop: true, ids: ['p1'] } },
  { why: 'all but 256 tokens cached: the decode replica computes the rest itself', f: { decodeCachedTokens: 1744 }, want: { hop: false, why: 'cached' } },
  { why: 'one token over the threshold still hops', f: { decodeCachedTokens: 1743 }, want: { hop: true, ids: ['p1'] } },
  { why: 'a short prompt is never worth the hop', f: { promptTokens: 200 }, want: { hop: false, why: 'cached' } },
  { why: 'a role-less decode replica moves no KV cache', f: { decode: plain }, want: { hop: false, why: 'decode-not-disaggregated' } },
  { why: 'no prefill replica of its protocol', f: { prefill: [p2] }, want: { hop: false, why: 'no-prefill-replica' } },
  { why: 'a both replica chosen to decode does not prefill for itself', f: { decode: both, prefill: [both] }, want: { hop: false, why: 'no-prefill-replica' } },
] as const;
for (const r of rules) {
  void test(`prefillCandidates: ${r.why}`, () => {
    const got = hop(r.f);
    assert.deepEqual(got.hop ? { hop: true, ids: got.candidates.map((c) => c.id) } : got, r.want);
  });
}
