// The runner against a real store and a scripted sender: what it records and how it marks a pause.
import assert from 'node:assert/strict';
import { dirname } from 'node:path';
import { test } from 'node:test';
import { BatchRunner, BatchService, type LineSender } from '../../src/batch/index.js';
import { silentLogger } from '../../src/log/index.js';
import { Store, storeDefaults } from '../../src/store/index.js';
import { jsonl, setup, until } from './harness.js';

void test('runner: a batch stays paused while any line waits out a refusal, though another refused line got through', async (t) => {
  const path = setup(t);
  const store = await Store.open({ ...storeDefaults, path }, { stateDir: dirname(path), configKeys: [], defaultGatewayId: 'g', log: silentLogger });
  t.after(() => store.close());
  let open = false;
  const tries = new Map<string, number>();
  // Line 0 is refused once; line 1 until `open`.
  const send: LineSender = ({ body }) => {
    const line = /line (\d+)/.exec(body)?.[1] ?? '';
    const n = (tries.get(line) ?? 0) + 1;
    tries.set(line, n);
    const refused = line === '0' ? n === 1 : !open;
    return Promise.resolve({ status: refused ? 429 : 200, body: '{}', requestId: `r-${line}-${n}`, retryAfterMs: undefined });
  };
  const runner = new BatchRunner({ files: store.files, batches: store.batches, send, runnerId: 'g', maxLines: 10, concurrency: 2, pollMs: 10, leaseMs: 5_000, maxPauseMs: 10, log: silentLogger });
  t.after(() => runner.close());
  const service = new BatchService({ files: store.files, batches: store.batches, maxFileBytes: 1 << 20, wake: () => runner.wake() });
  const form = `--b\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--b\r\nContent-Disposition: form-data; name="file"; filename="in.jsonl"\r\n\r\n${jsonl(2)}\r\n--b--\r\n`;
  const f = (await service.upload('o', 'multipart/form-data; boundary=b', Buffer.from(form))) as { id: string };
  const b = (await service.createBatch('o', '', { input_file_id: f.id, endpoint: '/v1/chat/completions', completion_window: '24h' })) as { id: string };
  runner.start();
  type View = { status: string; request_counts: { completed: number }; llmgw_paused_at: number | null };
  const view = async (): Promise<View> => (await service.batch('o', b.id)) as View;
  await until(view, (x) => x.request_counts.completed === 1 && (tries.get('1') ?? 0) >= 3);
  const mid = await view();
  assert.equal(mid.status, 'in_progress');
  assert.ok(mid.llmgw_paused_at !== null, 'line 1 still waits: the batch is paused');
  open = true;
  const done = await until(view, (x) => x.status === 'completed');
  assert.equal(done.request_counts.completed, 2);
  assert.equal(done.llmgw_paused_at, null);
});

void test('runner: the lease is renewed while lines slower than lease_ms are out, so another gateway never sends them again', async (t) => {
  const path = setup(t);
  const store = await Store.open({ ...storeDefaults, path }, { stateDir: dirname(path), configKeys: [], defaultGatewayId: 'g', log: silentLogger });
  t.after(() => store.close());
  const sent = { g1: 0, g2: 0 };
  const slow = (who: 'g1' | 'g2'): LineSender => async () => {
    sent[who]++;
    // Each answer takes five leases' time.
    await new Promise((r) => setTimeout(r, 300));
    return { status: 200, body: '{}', requestId: `r-${who}-${sent[who]}`, retryAfterMs: undefined };
  };
  const runnerOf = (who: 'g1' | 'g2'): BatchRunner =>
    new BatchRunner({ files: store.files, batches: store.batches, send: slow(who), runnerId: who, maxLines: 10, concurrency: 2, pollMs: 10, leaseMs: 60, maxPauseMs: 10, log: silentLogger });
  const g1 = runnerOf('g1');
  const g2 = runnerOf('g2');
  t.after(() => Promise.all([g1.close(), g2.close()]));
  const service = new BatchService({ files: store.files, batches: store.batches, maxFileBytes: 1 << 20, wake: () => undefined });
  const form = `--b\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--b\r\nContent-Disposition: form-data; name="file"; filename="in.jsonl"\r\n\r\n${jsonl(2)}\r\n--b--\r\n`;
  const f = (await service.upload('o', 'multipart/form-data; boundary=b', Buffer.from(form))) as { id: string };
  const b = (await service.createBatch('o', '', { input_file_id: f.id, endpoint: '/v1/chat/completions', completion_window: '24h' })) as { id: string };
  g1.start();
  await until(() => Promise.resolve(sent.g1), (n) => n === 2);
  g2.start();
  type View = { status: string; request_counts: { completed: number } };
  const done = await until(async () => (await service.batch('o', b.id)) as View, (x) => x.status === 'completed');
  assert.equal(done.request_counts.completed, 2);
  assert.deepEqual(sent, { g1: 2, g2: 0 });
});
