// Session affinity's rules, pure: a token names its replica (llm-d's plain base64 without a secret, an
// HMAC'd one with it that no client can forge), an X-Session-ID hashes to the same replica on any
// gateway with the same replicas, and the session tier sits after precise and before approximate.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import type { RouteFacts } from '../../src/routing/index.js';
import { defaultTiers, hashedReplica, receiptOf, replicaOfToken, sessionTarget, sessionTier, sessionTokenOf } from '../../src/routing/index.js';
import { decide } from '../../src/routing/router.js';
import { candidate, routeFacts } from '../gateway/replica-view.js';

const secret = 'a shared secret of the cluster';

void test('session token: without a secret it is llm-d\'s, the replica id in base64, and reads back', () => {
  const token = sessionTokenOf('qwen3-1', '');
  assert.equal(token, Buffer.from('qwen3-1').toString('base64'));
  assert.equal(replicaOfToken(token, ''), 'qwen3-1');
});

const forged = [
  { why: 'another replica named with a valid token\'s HMAC', token: `${Buffer.from('qwen3-0').toString('base64url')}.${sessionTokenOf('qwen3-1', secret).split('.')[1] ?? ''}` },
  { why: 'signed with another secret', token: sessionTokenOf('qwen3-1', 'some other secret, 16+ chars') },
  { why: 'an unsigned token where tokens are signed', token: sessionTokenOf('qwen3-1', '') },
  { why: 'a truncated HMAC', token: sessionTokenOf('qwen3-1', secret).slice(0, -4) },
  { why: 'not a token at all', token: '!!!' },
  { why: 'empty', token: '' },
];
for (const f of forged) {
  void test(`session token with a secret: refused when ${f.why}`, () => assert.equal(replicaOfToken(f.token, secret), undefined));
}

void test('session token with a secret: the gateway\'s own reads back to its replica', () => {
  assert.equal(replicaOfToken(sessionTokenOf('qwen3-1', secret), secret), 'qwen3-1');
});

void test('X-Session-ID: the same replica whatever the order of the replicas, and a replica leaving moves only its own sessions', () => {
  const replicas = ['r0', 'r1', 'r2'];
  const sessions = Array.from({ length: 3000 }, (_, i) => `conversation-${i}`);
  const owner = new Map(sessions.map((s) => [s, hashedReplica(s, replicas)]));
  for (const s of sessions.slice(0, 100)) assert.equal(hashedReplica(s, [...replicas].reverse()), owner.get(s));
  const counts = new Map<string | undefined, number>();
  for (const o of owner.values()) counts.set(o, (counts.get(o) ?? 0) + 1);
  for (const r of replicas) assert.ok((counts.get(r) ?? 0) > 800, `${r} owns a fair share (${counts.get(r) ?? 0} of 3000)`);
  const moved = sessions.filter((s) => owner.get(s) !== 'r2' && hashedReplica(s, ['r0', 'r1']) !== owner.get(s));
  assert.deepEqual(moved, [], 'only r2\'s sessions moved when r2 left');
  assert.equal(hashedReplica('x', []), undefined);
});

const targets = [
  { why: 'a valid token names its replica', headers: { 'x-session-token': sessionTokenOf('b', secret), 'x-session-id': 's' }, want: { replicaId: 'b', via: 'token' } },
  { why: "a token for a replica that is gone falls back to the hashed X-Session-ID", headers: { 'x-session-token': sessionTokenOf('z', secret), 'x-session-id': 's' }, want: { replicaId: hashedReplica('s', ['a', 'b', 'c']), via: 'session-id' } },
  { why: 'a forged token is ignored', headers: { 'x-session-token': sessionTokenOf('b', '') }, want: undefined },
  { why: 'the first of a repeated header counts', headers: { 'x-session-id': ['s', 't'] }, want: { replicaId: hashedReplica('s', ['a', 'b', 'c']), via: 'session-id' } },
  { why: 'no session headers: no session', headers: {}, want: undefined },
];
for (const r of targets) {
  void test(`sessionTarget: ${r.why}`, () => assert.deepEqual(sessionTarget(r.headers, ['a', 'b', 'c'], secret), r.want));
}

// Three idle replicas at 1000 prefill tokens/s, a 2048-token prompt, the session on b.
const facts = (o: Partial<RouteFacts> = {}): RouteFacts => routeFacts({ promptTokens: 2048, session: { replicaId: 'b', via: 'token' }, ...o });
const idle = [candidate('a'), candidate('b'), candidate('c')];

const order = [
  { why: 'a precise holder beats the session: the engines say where the prefix is', f: facts({ precise: new Map([['a', 1024], ['b', 0], ['c', 0]]) }), cs: idle, to: 'a', tier: 'precise' },
  { why: 'no precise holder: the session\'s replica', f: facts({ precise: new Map([['a', 0], ['b', 0], ['c', 0]]) }), cs: idle, to: 'b', tier: 'session' },
  { why: 'the session beats the approximate tree, this gateway\'s own memory', f: facts({ approximate: new Map([['c', 1024]]) }), cs: idle, to: 'b', tier: 'session' },
  { why: 'the session beats the load', f: facts(), cs: [candidate('a'), candidate('b', { inFlight: 1, waiting: 0 }), candidate('c')], to: 'b', tier: 'session' },
  {
    why: 'a session replica over the TTFT budget is not piled onto',
    f: facts(),
    cs: [candidate('a'), candidate('b', { inFlight: 1, waiting: 1, queuedPrefillTokens: 5000 }), candidate('c')],
    to: 'a',
    tier: 'load',
  },
  { why: 'no session: the later tiers as before', f: facts({ session: undefined }), cs: idle, to: 'a', tier: 'load' },
];
for (const r of order) {
  void test(`default tiers: ${r.why}`, () => {
    const choice = decide(defaultTiers, r.f, r.cs);
    assert.equal(choice?.replica.id, r.to);
    assert.equal(choice.tier, r.tier);
  });
}

void test('session tier: the receipt says the session chose, and by what', () => {
  const f = facts({ session: { replicaId: 'c', via: 'session-id' } });
  const choice = sessionTier(f, idle);
  assert.equal(choice?.tier, 'session');
  const receipt = receiptOf('precise', f, idle, choice, () => undefined);
  assert.equal(receipt.tier, 'session');
  assert.match(receipt.reason, /session's replica, named by its X-Session-ID/);
});
