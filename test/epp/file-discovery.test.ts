// llm-d-router's file-discovery format as parseEndpointsFile reads it, hostile input included, and
// FileDiscovery's reload rules: a changed file is re-read, a bad reload keeps the last good list, a
// file that cannot be read or is too big fails the start.
import { strict as assert } from 'node:assert';
import { mkdtempSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { FileDiscovery, parseEndpointsFile, type PoolEndpoint, type Skipped } from '../../src/epp/index.js';
import { hasCode } from '../../src/errors/index.js';
import { createLogger, loggedEvents } from '../../src/log/index.js';
import { waitFor } from '../support/wait.js';

void test("file discovery: llm-d-router's format, port as an integer or a string, labels and namespace", () => {
  const { endpoints, skipped } = parseEndpointsFile(
    `
endpoints:
  - name: vllm-0
    namespace: llm
    address: 10.0.0.7
    port: 8000
    labels: { app: vllm, kv_port: "5557" }
  - { name: vllm-1, address: "fd00::1", port: "8001" }
`,
    'e.yaml',
  );
  assert.deepEqual(skipped, []);
  assert.deepEqual(endpoints, [
    { name: 'vllm-0', address: '10.0.0.7', port: 8000, labels: { app: 'vllm', kv_port: '5557' } },
    { name: 'vllm-1', address: 'fd00::1', port: 8001, labels: {} },
  ]);
  assert.deepEqual(parseEndpointsFile('{"endpoints": []}', 'e.json').endpoints, [], 'JSON is YAML');
});

const entries: { why: string; entry: string; reason: Skipped['reason']; want: RegExp }[] = [
  { why: 'a list item that is not a map', entry: '- just-a-string', reason: 'not-a-map', want: /endpoints\[1\]: is not a map/ },
  { why: 'an entry without a name', entry: '- { address: 10.0.0.9, port: 80 }', reason: 'name', want: /has no name/ },
  { why: 'an empty name', entry: '- { name: "", address: 10.0.0.9, port: 80 }', reason: 'name', want: /has no name/ },
  { why: 'a name listed twice', entry: '- { name: a, address: 10.0.0.9, port: 80 }', reason: 'duplicate', want: /name "a" is listed twice/ },
  { why: 'a host name, not an IP', entry: '- { name: b, address: vllm.svc, port: 80 }', reason: 'address', want: /address "vllm\.svc" is not an IP address/ },
  { why: 'an address that is a number', entry: '- { name: b, address: 10, port: 80 }', reason: 'address', want: /address 10 is not an IP/ },
  { why: 'port 0', entry: '- { name: b, address: 10.0.0.9, port: 0 }', reason: 'port', want: /port 0 is not an integer from 1 to 65535/ },
  { why: 'port 65536', entry: '- { name: b, address: 10.0.0.9, port: 65536 }', reason: 'port', want: /port 65536/ },
  { why: 'a fractional port', entry: '- { name: b, address: 10.0.0.9, port: 80.5 }', reason: 'port', want: /port 80\.5/ },
  { why: 'a port string with letters', entry: '- { name: b, address: 10.0.0.9, port: "80x" }', reason: 'port', want: /port "80x"/ },
  { why: 'no port', entry: '- { name: b, address: 10.0.0.9 }', reason: 'port', want: /port undefined/ },
  { why: 'labels that are a list', entry: '- { name: b, address: 10.0.0.9, port: 80, labels: [x] }', reason: 'labels', want: /labels must map strings to strings/ },
  { why: 'a label value that is a number', entry: '- { name: b, address: 10.0.0.9, port: 80, labels: { kv: 5557 } }', reason: 'labels', want: /quote numbers/ },
];

for (const e of entries) {
  void test(`file discovery: ${e.why} is skipped and said why; the good entry still loads`, () => {
    const { endpoints, skipped } = parseEndpointsFile(`endpoints:\n- { name: a, address: 10.0.0.1, port: 80 }\n${e.entry}\n`, 'e.yaml');
    assert.deepEqual(endpoints.map((x) => x.name), ['a']);
    assert.equal(skipped.length, 1);
    assert.equal(skipped[0]?.reason, e.reason);
    assert.equal(skipped[0]?.index, 1);
    assert.match(skipped[0]?.message ?? '', e.want);
  });
}

const files: { why: string; text: string; want: RegExp }[] = [
  { why: 'text that is not YAML', text: 'endpoints: [\n  {', want: /e\.yaml: not YAML or JSON/ },
  { why: 'a file with no endpoints list', text: 'pods: []', want: /e\.yaml: has no endpoints: list/ },
  { why: 'endpoints that is a map', text: 'endpoints: { a: 1 }', want: /has no endpoints: list/ },
  { why: 'a bare list', text: '- { name: a, address: 10.0.0.1, port: 80 }', want: /has no endpoints: list/ },
  { why: 'an empty file', text: '', want: /has no endpoints: list/ },
];
for (const f of files) {
  void test(`file discovery: ${f.why} is not an endpoints file (LLMGW_EPP_DISCOVERY)`, () => {
    assert.throws(() => parseEndpointsFile(f.text, 'e.yaml'), (e: unknown) => hasCode(e, 'LLMGW_EPP_DISCOVERY') && f.want.test((e as Error).message));
  });
}

void test('file discovery: a YAML alias bomb is refused, not expanded', () => {
  const bomb = ['a: &a ["x","x","x","x","x","x","x","x","x"]', ...Array.from({ length: 8 }, (_, i) => `${String.fromCharCode(98 + i)}: &${String.fromCharCode(98 + i)} [*${String.fromCharCode(97 + i)},*${String.fromCharCode(97 + i)},*${String.fromCharCode(97 + i)},*${String.fromCharCode(97 + i)},*${String.fromCharCode(97 + i)},*${String.fromCharCode(97 + i)},*${String.fromCharCode(97 + i)},*${String.fromCharCode(97 + i)},*${String.fromCharCode(97 + i)}]`), 'endpoints: *i'].join('\n');
  assert.throws(() => parseEndpointsFile(bomb, 'e.yaml'), (e: unknown) => hasCode(e, 'LLMGW_EPP_DISCOVERY'));
});

function tempFile(t: TestContext, text: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-epp-fd-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'endpoints.yaml');
  writeFileSync(file, text);
  return file;
}

void test('file discovery: a missing file or one over 1 MiB fails the start, naming the path', (t) => {
  const file = tempFile(t, `endpoints: []\n# ${'x'.repeat(1024 * 1024)}\n`);
  assert.throws(() => new FileDiscovery({ path: file, pollMs: 1000 }), /over 1048576 bytes; an endpoints file lists pods/);
  assert.throws(() => new FileDiscovery({ path: `${file}.gone`, pollMs: 1000 }), (e: unknown) => hasCode(e, 'LLMGW_EPP_DISCOVERY') && /cannot read .*gone \(ENOENT\)/.test((e as Error).message));
});

void test('file discovery: a change is re-read and heard; a broken or removed file keeps the last good list', async (t) => {
  const file = tempFile(t, 'endpoints:\n- { name: a, address: 10.0.0.1, port: 80 }\n');
  const skipped: Skipped[] = [];
  const lines: string[] = [];
  const d = new FileDiscovery({ path: file, pollMs: 50, onSkip: (s) => skipped.push(s), log: createLogger({ sink: (l) => lines.push(l) }) });
  t.after(() => d.close());
  await d.synced();
  const heard: PoolEndpoint[][] = [];
  d.onChange((eps) => heard.push(eps));
  writeFileSync(file, 'endpoints:\n- { name: a, address: 10.0.0.1, port: 80 }\n- { name: b, address: 10.0.0.2, port: 80 }\n- { name: c, address: nope, port: 80 }\n');
  await waitFor(() => d.current().length === 2, { what: 'the second endpoint read' });
  assert.equal(heard.length, 1);
  assert.deepEqual(skipped.map((s) => s.reason), ['address'], 'the bad entry of the reload is counted');
  const unreadable = (): number => loggedEvents(`${lines.join('\n')}\n`, 'epp.discovery_unreadable').length;
  writeFileSync(file, 'endpoints: [ {');
  await waitFor(() => unreadable() > 0, { what: 'the half-written file polled' });
  assert.equal(d.current().length, 2, 'a half-written file keeps the last good list');
  unlinkSync(file);
  const before = unreadable();
  await waitFor(() => unreadable() > before, { what: 'the removed file polled' });
  assert.equal(d.current().length, 2, 'a removed file keeps the last good list');
  writeFileSync(file, 'endpoints:\n- { name: b, address: 10.0.0.2, port: 80 }\n');
  await waitFor(() => d.current().length === 1, { what: 'the good file after the broken one' });
  assert.deepEqual(heard.map((l) => l.map((e) => e.name)), [['a', 'b'], ['b']], 'the broken file was never a list');
});
