// Every metric family a running `llmgw serve` and its sim engine expose, linted against the
// Prometheus naming rules (promtool's check metrics and the instrumentation guide), so a new
// metric that breaks one fails here by name instead of in somebody's dashboard.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { request } from 'undici';
import { simConfig, startServe } from '../support/serve.js';
import { waitFor } from '../support/wait.js';

interface Family {
  readonly name: string;
  readonly type: string;
  readonly help: string;
  readonly labels: ReadonlySet<string>;
}

/** The families of a text exposition, with every label name any of their samples carries. */
function familiesOf(text: string): Family[] {
  const byName = new Map<string, { type: string; help: string; labels: Set<string> }>();
  const family = (name: string) => {
    let f = byName.get(name);
    if (f === undefined) byName.set(name, (f = { type: 'untyped', help: '', labels: new Set() }));
    return f;
  };
  for (const line of text.split('\n')) {
    const meta = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(line);
    if (meta !== null) {
      const f = family(meta[2] ?? '');
      if (meta[1] === 'TYPE') f.type = meta[3] ?? '';
      else f.help = meta[3] ?? '';
      continue;
    }
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? /.exec(line);
    if (sample === null) continue;
    const sampled = sample[1] ?? '';
    const owner = byName.has(sampled) ? sampled : sampled.replace(/_(bucket|sum|count)$/, '');
    for (const m of (sample[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="/g)) family(owner).labels.add(m[1] ?? '');
  }
  return [...byName].map(([name, f]) => ({ name, ...f }));
}

// vLLM's own names are copied by the sim on purpose (dashboards read a sim as a vLLM replica), so
// the rules of our own naming scheme do not apply to them; the type rules still do.
const ours = (f: Family): boolean => !f.name.startsWith('vllm:');
// llmgw_prefix_decisions_total predates the scheme and is the one the README's first steps read.
const SUBSYSTEMS = ['gateway', 'kv', 'link', 'sim', 'prefix', 'admission'];

const rules: readonly { why: string; broken: (f: Family) => boolean }[] = [
  { why: 'a counter ends in _total', broken: (f) => f.type === 'counter' && !f.name.endsWith('_total') },
  { why: 'only a counter ends in _total', broken: (f) => f.type !== 'counter' && f.name.endsWith('_total') },
  { why: 'no name ends in a suffix a histogram or summary writes', broken: (f) => /_(bucket|sum|count)$/.test(f.name) },
  { why: 'quantile is a summary\'s label', broken: (f) => f.type !== 'summary' && f.labels.has('quantile') },
  { why: 'le is a histogram\'s label', broken: (f) => f.type !== 'histogram' && f.labels.has('le') },
  { why: 'names are lower snake_case', broken: (f) => ours(f) && !/^[a-z][a-z0-9_]*$/.test(f.name) },
  { why: 'label names are lower snake_case', broken: (f) => [...f.labels].some((l) => !/^[a-z][a-z0-9_]*$/.test(l)) },
  { why: 'no word twice in a row (a prefix added twice)', broken: (f) => /(?:^|_)([a-z]+)_\1(?:_|$)/.test(f.name) },
  { why: 'time in seconds, sizes in bytes', broken: (f) => ours(f) && /_(ms|milliseconds|microseconds|minutes|hours|kb|kib|mb|mib|kilobytes|megabytes|percent)(_|$)/.test(f.name) },
  { why: 'ours start llmgw_<subsystem>_, the process\'s own process_ or nodejs_', broken: (f) => ours(f) && !new RegExp(`^(llmgw_(${SUBSYSTEMS.join('|')})_|process_|nodejs_)`).test(f.name) },
  { why: 'every family says what it is', broken: (f) => f.help.trim() === '' },
];

void test('metric names: every family of llmgw serve and its sim follows the Prometheus naming rules', { timeout: 90_000 }, async (t) => {
  const served = await startServe(t, (p) => simConfig(p, { count: 1 }));
  const scrape = async (port: number): Promise<string> => (await request(`http://127.0.0.1:${port}/metrics`)).body.text();
  // One request opens every per-request series, and its KV events the engine's stream families.
  const r = await request(`http://127.0.0.1:${served.port}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'qwen3', max_tokens: 2, messages: [{ role: 'user', content: 'name every metric' }] }),
  });
  assert.equal(r.statusCode, 200);
  await r.body.dump();
  const gateway = await waitFor(async () => {
    const text = await scrape(served.port);
    return /^llmgw_kv_batches_received_total\{/m.test(text) ? text : undefined;
  }, { timeoutMs: 15_000, what: 'the engine\'s KV stream families on /metrics' });
  const families = [...familiesOf(gateway), ...familiesOf(await scrape(served.http))];
  assert.ok(families.length > 40, `only ${families.length} families scraped`);
  const broken = families.flatMap((f) => rules.filter((rule) => rule.broken(f)).map((rule) => `${f.name} (${f.type}): ${rule.why}`));
  assert.deepEqual(broken, []);
  assert.equal(await served.stop(), 0);
});

void test('metric names: the lint catches each rule it states', () => {
  const f = (name: string, type: string, labels: string[] = []): Family => ({ name, type, help: 'x', labels: new Set(labels) });
  const bad = [
    f('llmgw_gateway_things', 'counter'),
    f('nodejs_active_handles_total', 'gauge'),
    f('llmgw_gateway_event_loop_lag_seconds', 'gauge', ['quantile']),
    f('llmgw_process_process_open_fds', 'gauge'),
    f('llmgw_gateway_wait_ms', 'histogram'),
  ];
  for (const b of bad) assert.ok(rules.some((r) => r.broken(b)), b.name);
  assert.ok(!rules.some((r) => r.broken(f('llmgw_gateway_requests_total', 'counter', ['route']))));
});
