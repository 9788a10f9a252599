// What `llmgw serve` tells its operator while it starts: log events (serve.listening, serve.replica,
// serve.waiting, serve.ready) that read well on a terminal, and nothing on stdout unless --status asks.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import type { ActorView } from '../../src/actors/index.js';
import { readyFields, waitingFields } from '../../src/cli/status.js';
import { createLogger } from '../../src/log/index.js';
import { loggedEvent, simConfig, startServe } from '../support/serve.js';
import { waitFor } from '../support/wait.js';

const replica = (name: string, phase: string, since: number): ActorView => ({
  id: `replica:${name}`,
  kind: 'replica',
  machine: 'replica',
  parent: 'node:gpu-a',
  states: [phase],
  phase,
  status: 'active',
  since,
  reason: undefined,
  detail: undefined,
  transitions: [],
});

const prettyOf = (fields: Record<string, unknown>, msg: string): string[] => {
  const lines: string[] = [];
  createLogger({ sink: (l) => lines.push(l), format: 'pretty', now: () => Date.UTC(2026, 0, 2, 3, 4, 5) }).info(fields, msg);
  return lines;
};

void test('status: the 15 s progress line of eight long-named replicas fits 160 columns on a terminal; the JSON keeps each one', () => {
  const now = 1_000_000;
  const actors = [
    ...Array.from({ length: 7 }, (_, i) => replica(`llama-3.1-70b-instruct-vllm-h100-tp4-${i}`, i % 2 === 0 ? 'loading' : 'starting', now - 20_000 - i)),
    replica('llama-3.1-70b-instruct-vllm-h100-tp4-7', 'loading', now - 184_321),
    replica('qwen3-0', 'ready', now - 500_000),
    { ...replica('x', 'loading', 0), id: 'shard:x-r0', kind: 'shard' as const },
  ];
  const fields = waitingFields(actors, now);
  assert.ok(fields !== undefined);
  assert.equal((fields.waiting as unknown[]).length, 8, 'every replica not ready, shards and ready ones left out');
  assert.deepEqual([fields.longest, fields.phase, fields.waitedMs], ['llama-3.1-70b-instruct-vllm-h100-tp4-7', 'loading', 184_321]);
  const [line, ...more] = prettyOf(fields, 'serve.waiting');
  assert.equal(more.length, 0);
  assert.equal(
    line,
    '03:04:05.000 INFO serve.waiting waiting=[8] longest=llama-3.1-70b-instruct-vllm-h100-tp4-7 phase=loading waited=184321ms',
  );
  assert.ok((line ?? '').length <= 160, `${(line ?? '').length} columns`);
  assert.equal(waitingFields([replica('qwen3-0', 'ready', 0)], now), undefined, 'nothing said when every replica is ready');
});

void test('status: ready reads on a terminal as where, how many, of what, and a curl to paste that carries the key header when keys are on', () => {
  const fields = readyFields({ url: new URL('http://127.0.0.1:8080/'), replicas: 2, models: ['qwen3', 'llama'], keyed: true });
  const lines = prettyOf(fields, 'serve.ready');
  assert.deepEqual(lines, [
    '03:04:05.000 INFO serve.ready url=http://127.0.0.1:8080/ replicas=2 models=qwen3,llama\n' +
      `  try: curl -s http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' -H 'Authorization: Bearer YOUR_KEY' -d '{"model":"qwen3","messages":[{"role":"user","content":"Hello"}]}'`,
  ]);
});

void test('status: serve --status prints its status events on stdout as on a terminal, and they are in the JSON log as well', { timeout: 90_000 }, async (t) => {
  const served = await startServe(t, (p) => simConfig(p, { count: 1 }), { args: ['--status'] });
  const url = `http://127.0.0.1:${served.port}/`;
  assert.equal(loggedEvent(served.err(), 'serve.ready')?.url, url);
  // stdout is a pipe of its own: its copy of the ready line may arrive after the log's.
  const out = await waitFor(() => (served.out().includes('serve.ready') ? served.out() : undefined), { what: 'serve.ready on stdout' });
  assert.match(out, new RegExp(`^\\S+ INFO serve\\.listening url=${url} replicas=1 config=\\S+llmgw\\.yaml page=${url}debug/actors$`, 'm'));
  assert.match(out, /^\S+ INFO serve\.replica replica=qwen3-sim-cpu-0 phase=loading$/m);
  assert.match(out, new RegExp(`^\\S+ INFO serve\\.ready url=${url} replicas=1 models=qwen3\\n  try: curl -s ${url}v1/chat/completions `, 'm'));
  assert.doesNotMatch(out, /gateway\.listening|shard\.transition|\{"level"/, 'only the status events, in their terminal form');
  assert.ok(!out.includes('\u001b['), 'no colour on a pipe');
});
