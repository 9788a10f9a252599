// The cluster: section and external replicas in replicas:, each rule a row; and the key tools the
// link relies on (Z85 as ZeroMQ writes it, key files, the proof of a listed key).
import { strict as assert } from 'node:assert';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { curveKeyPair } from 'zeromq';
import { loadConfig } from '../../src/cli/config.js';
import { makeKeyPair, newChallenge, proveKey, readKeyFile, writeKeyFile, z85Decode, z85Encode } from '../../src/link/index.js';

const key = makeKeyPair().publicKey;
const problems = (yaml: string): string => {
  try {
    loadConfig(yaml, 'test.yaml');
    return '';
  } catch (e) {
    return e instanceof Error ? e.message : String(e);
  }
};

const rows = [
  { why: 'a link that is not tcp://ADDR:PORT', yaml: 'cluster: { link: "127.0.0.1:5555", key_file: k }', re: /cluster\.link: "127\.0\.0\.1:5555" is not tcp:\/\/ADDRESS:PORT/ },
  { why: 'a link without a key file', yaml: 'cluster: { link: "tcp://127.0.0.1:5555" }', re: /cluster\.key_file: is missing; .*llmgw keys --out FILE/ },
  { why: 'a public key that is not Z85', yaml: `cluster: { link: "tcp://127.0.0.1:5555", key_file: k, nodes: [ { name: a, public_key: "short" } ] }`, re: /cluster\.nodes\[0\]\.public_key: is not a CURVE public key/ },
  { why: 'a node listed twice', yaml: `cluster: { link: "tcp://127.0.0.1:5555", key_file: k, nodes: [ { name: a, public_key: "${key}" }, { name: a, public_key: "${key}" } ] }`, re: /cluster\.nodes\[1\]\.name: "a" is listed twice/ },
  { why: 'a negative cpu room', yaml: `cluster: { nodes: [ { name: a, public_key: "${key}", cpu_replicas: -1 } ] }`, re: /cluster\.nodes\[0\]\.cpu_replicas: -1 is not a whole number of at least 0/ },
  { why: 'a cpu room that is not a count', yaml: `cluster: { nodes: [ { name: a, public_key: "${key}" }, { name: b, public_key: "${key}", cpu_replicas: half } ] }`, re: /cluster\.nodes\[1\]\.cpu_replicas: "half" is not a whole number/ },
  { why: 'a gateway that is not tcp://ADDR:PORT', yaml: 'cluster: { gateways: ["tcp://10.0.0.1:5555", "10.0.0.2:5555"], key_file: k }', re: /cluster\.gateways\[1\]: "10\.0\.0\.2:5555" is not tcp:\/\/ADDRESS:PORT/ },
  { why: 'a gateway listed twice', yaml: 'cluster: { gateways: ["tcp://10.0.0.1:5555", "tcp://10.0.0.1:5555"], key_file: k }', re: /cluster\.gateways\[1\]: "tcp:\/\/10\.0\.0\.1:5555" is listed twice/ },
  { why: 'gateways without a key file', yaml: 'cluster: { gateways: ["tcp://10.0.0.1:5555"] }', re: /cluster\.key_file: is missing/ },
  { why: 'a lease shorter than half a second', yaml: 'cluster: { lease_ttl_ms: 100 }', re: /cluster\.lease_ttl_ms: 100/ },
  {
    why: 'several gateways with a node in a gateway\'s process',
    yaml: `cluster: { link: "tcp://10.0.0.1:5555", gateways: ["tcp://10.0.0.1:5555", "tcp://10.0.0.2:5555"], key_file: k, nodes: [ { name: gw } ] }\nstore: { url: "postgres://h/db" }`,
    re: /cluster\.nodes: "gw" has no public_key, but with 2 gateways every node joins each over the link/,
  },
  {
    why: 'several gateways without a shared store',
    yaml: `cluster: { link: "tcp://10.0.0.1:5555", gateways: ["tcp://10.0.0.1:5555", "tcp://10.0.0.2:5555"], key_file: k, nodes: [ { name: a, public_key: "${key}" } ] }`,
    re: /store\.url: is empty, but cluster\.gateways lists 2 gateways/,
  },
  { why: 'silence no longer than a heartbeat', yaml: 'cluster: { heartbeat_ms: 500, silent_after_ms: 500 }', re: /cluster\.silent_after_ms: 500 is not above heartbeat_ms/ },
  { why: 'an external replica with a URL that is not a base', yaml: 'replicas: [ { model: m, endpoint: { name: x, url: "http://h:1/v1/chat" } } ]', re: /replicas\[0\]\.endpoint\.url: .* is not http:\/\/HOST:PORT\// },
  { why: 'events without the seed they were hashed with', yaml: 'replicas: [ { model: m, endpoint: { name: x, url: "http://h:1/", kv_events: "tcp://h:2" } } ]', re: /replicas\[0\]\.endpoint\.hash_seed: is missing/ },
  { why: 'replay on another host than the events', yaml: 'replicas: [ { model: m, endpoint: { name: x, url: "http://h:1/", kv_events: "tcp://h:2", replay: "tcp://g:3", hash_seed: "0" } } ]', re: /replicas\[0\]\.endpoint\.replay: is on another host/ },
  { why: 'an endpoint with a count', yaml: 'replicas: [ { model: m, count: 2, endpoint: { name: x, url: "http://h:1/" } } ]', re: /replicas\[0\]\.endpoint: an endpoint names one running replica/ },
  { why: 'two endpoints under one name', yaml: 'replicas: [ { model: m, endpoint: { name: x, url: "http://h:1/" } }, { model: m, endpoint: { name: x, url: "http://h:2/" } } ]', re: /replicas\[1\]\.endpoint\.name: "x" is already the name of replicas\[0\]/ },
];
for (const r of rows) void test(`cluster config: refused: ${r.why}`, () => assert.match(problems(r.yaml), r.re));

void test('cluster config: a gateway section and an external replica parse into what serve uses', () => {
  const c = loadConfig(
    `cluster: { link: "tcp://0.0.0.0:5555", key_file: /k, nodes: [ { name: a, public_key: "${key}", cpu_replicas: 0 }, { name: local } ] }
replicas: [ { model: m, endpoint: { name: x, url: "http://h:1", kv_events: "tcp://h:2", hash_seed: "0" } } ]`,
    'test.yaml',
  );
  assert.deepEqual(c.cluster.nodes, [
    { name: 'a', publicKey: key, cpuReplicas: 0 },
    { name: 'local', publicKey: undefined, cpuReplicas: undefined },
  ]);
  assert.equal(c.replicas[0]?.endpoint?.url, 'http://h:1/', 'a base URL gets its slash, so health and /v1 resolve under it');
  assert.equal(c.replicas[0]?.endpoint?.topic, '', "vLLM's default topic");
});

void test('keys: Z85 matches what ZeroMQ writes, both ways', () => {
  for (let i = 0; i < 20; i++) {
    const k = curveKeyPair();
    const raw = z85Decode(k.publicKey);
    assert.ok(raw !== undefined);
    assert.equal(z85Encode(raw), k.publicKey);
  }
  assert.equal(z85Decode('x'.repeat(39)), undefined);
  assert.equal(z85Decode('"'.repeat(40)), undefined);
});

void test('keys: a key file is written for its owner only, never over another, and read back checked', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-keys-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const k = makeKeyPair();
  const file = join(dir, 'node.key');
  writeKeyFile(file, k);
  assert.equal(statSync(file).mode & 0o777, 0o600);
  assert.throws(() => writeKeyFile(file, makeKeyPair()), /EEXIST/);
  assert.deepEqual(readKeyFile(file), k);
  const other = makeKeyPair();
  writeFileSync(join(dir, 'mixed.key'), `public ${k.publicKey}\nsecret ${other.secretKey}\n`);
  assert.throws(() => readKeyFile(join(dir, 'mixed.key')), (e: unknown) => e instanceof Error && /is not the one of its secret key/.test(e.message));
});

void test('keys: only the holder of the listed secret key proves the name, and only for that name and challenge', () => {
  const a = makeKeyPair();
  const b = makeKeyPair();
  const c = newChallenge(new Uint8Array(32).fill(7));
  assert.equal(c.verify('a', a.publicKey, proveKey(a.secretKey, c.key, c.nonce, 'a')), true);
  assert.equal(c.verify('a', a.publicKey, proveKey(b.secretKey, c.key, c.nonce, 'a')), false, "b's key does not prove a");
  assert.equal(c.verify('a', a.publicKey, proveKey(a.secretKey, c.key, c.nonce, 'b')), false, 'a proof is for one name');
  const other = newChallenge(new Uint8Array(32).fill(8));
  assert.equal(other.verify('a', a.publicKey, proveKey(a.secretKey, c.key, c.nonce, 'a')), false, 'a proof is for one challenge');
});
