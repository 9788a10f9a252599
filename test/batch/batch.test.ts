// The Batch API end to end through the official openai SDK, against a gateway with a store in a
// child process and a fake engine: a 1,000-line batch answered once per line while an interactive
// tenant is served beside it and never queued behind the batch's lines, validation errors per line, cancel, and kill -9 mid-batch then a
// restart that finishes the batch without sending any recorded line again.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI, { toFile } from 'openai';
import { request } from 'undici';
import { openSqlite } from '../../src/store/index.js';
import { startFakeEngine } from '../gateway/fake-engine.js';
import { startGate } from './gate.js';
import { client, jsonl, key, setup, startChild, stop, until } from './harness.js';

// A metric of the child gateway's /metrics with these labels (0 when absent).
async function metric(url: URL, name: string, labels: string): Promise<number> {
  const text = await (await fetch(new URL('/metrics', url))).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`));
  return Number(line?.split(' ').at(-1) ?? 0);
}

void test('batch: a 1,000-line batch through the SDK completes with every line answered once; the interactive tenant is never queued behind it', async (t) => {
  const engine = await startFakeEngine({ id: 'r0' });
  t.after(() => engine.close());
  const gate = await startGate(engine.url);
  t.after(() => gate.close());
  const { proc, url } = await startChild(setup(t), gate);
  t.after(() => stop(proc, 'SIGKILL'));
  const ai = client(url);
  const issued = await request(new URL('/admin/v1/keys', url), {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'chat', priority: 'interactive' }),
  });
  const chat = client(url, ((await issued.body.json()) as { key: string }).key);
  // The batch's lines reach the engine and wait there, so the rest of its lines in flight wait in
  // the gateway's admission queue: the moment a first-come queue would put a chat behind them.
  gate.hold();
  const file = await ai.files.create({ file: await toFile(Buffer.from(jsonl(1000)), 'in.jsonl'), purpose: 'batch' });
  assert.equal(file.object, 'file');
  assert.equal(file.purpose, 'batch');
  assert.equal((await ai.files.retrieve(file.id)).bytes, file.bytes);
  const created = await ai.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h', metadata: { job: 'eval' } });
  assert.equal(created.status, 'validating');
  assert.deepEqual(created.metadata, { job: 'eval' });
  const batchQueued = (): Promise<number> => metric(url, 'llmgw_admission_queue_depth', 'model="m",priority="batch"');
  await until(async () => ({ held: gate.held, queued: await batchQueued() }), (x) => x.held > 0 && x.queued > 0);
  // Each chat goes straight to the engine past the batch lines queued before it (no queued= in its
  // receipt), and they are still queued after it: the chat was placed ahead, not served after them.
  for (let i = 0; i < 5; i++) {
    const { data, response } = await chat.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: `interactive ${i}` }] }).withResponse();
    assert.ok(data.choices.length > 0);
    const receipt = response.headers.get('x-llmgw-receipt') ?? '';
    assert.match(receipt, /^tier=/, 'the chat was routed with a receipt');
    assert.doesNotMatch(receipt, /queued=/, `chat ${i} waited in the admission queue: ${receipt}`);
    assert.ok((await batchQueued()) > 0, 'batch lines queued before the chat are still queued after it');
  }
  assert.equal(await metric(url, 'llmgw_admission_admitted_total', 'model="m",priority="interactive",via="direct"'), 5);
  assert.equal(await metric(url, 'llmgw_admission_admitted_total', 'model="m",priority="interactive",via="queued"'), 0);
  gate.release();
  const done = await until(() => ai.batches.retrieve(created.id), (b) => b.status === 'completed' || b.status === 'failed');
  assert.equal(done.status, 'completed');
  assert.deepEqual(done.request_counts, { total: 1000, completed: 1000, failed: 0 });
  assert.ok(done.output_file_id);
  const out = (await (await ai.files.content(done.output_file_id)).text()).trim().split('\n').map((l) => JSON.parse(l) as { custom_id: string; response: { status_code: number; body: { choices: unknown[] } } });
  assert.equal(out.length, 1000);
  assert.equal(new Set(out.map((l) => l.custom_id)).size, 1000, 'every custom_id answered once');
  assert.ok(out.every((l) => l.response.status_code === 200 && l.response.body.choices.length > 0));
  const sent = engine.seen.filter((s) => JSON.stringify(s.body).includes('"line '));
  assert.equal(sent.length, 1000, 'each line reached the engine once');
  const listed = await ai.batches.list();
  assert.ok(listed.data.some((b) => b.id === created.id));
});

void test('batch: bad lines fail the batch with one error per line; an unknown model is answered 404 in the error file', async (t) => {
  const engine = await startFakeEngine({ id: 'r0' });
  t.after(() => engine.close());
  const { proc, url } = await startChild(setup(t), engine);
  t.after(() => stop(proc, 'SIGKILL'));
  const ai = client(url);
  const bad = ['not json', JSON.stringify({ custom_id: 'a', method: 'POST', url: '/v1/completions', body: { model: 'm' } }), JSON.stringify({ custom_id: 'b', method: 'POST', url: '/v1/chat/completions', body: { model: 'm' } }), JSON.stringify({ custom_id: 'b', method: 'POST', url: '/v1/chat/completions', body: { model: 'm' } })].join('\n');
  const f1 = await ai.files.create({ file: await toFile(Buffer.from(bad), 'bad.jsonl'), purpose: 'batch' });
  const b1 = await ai.batches.create({ input_file_id: f1.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  const failed = await until(() => ai.batches.retrieve(b1.id), (b) => b.status !== 'validating');
  assert.equal(failed.status, 'failed');
  assert.deepEqual(failed.errors?.data?.map((e) => [e.code, e.line]), [['invalid_json_line', 1], ['invalid_url', 2], ['duplicate_custom_id', 4]]);
  const f2 = await ai.files.create({ file: await toFile(Buffer.from(jsonl(2, { model: 'nope' })), 'nope.jsonl'), purpose: 'batch' });
  const b2 = await ai.batches.create({ input_file_id: f2.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  const done = await until(() => ai.batches.retrieve(b2.id), (b) => b.status === 'completed');
  assert.deepEqual(done.request_counts, { total: 2, completed: 0, failed: 2 });
  assert.ok(done.error_file_id);
  const errs = (await (await ai.files.content(done.error_file_id)).text()).trim().split('\n').map((l) => JSON.parse(l) as { response: { status_code: number } });
  assert.deepEqual(errs.map((e) => e.response.status_code), [404, 404]);
  await assert.rejects(ai.batches.create({ input_file_id: 'file-missing', endpoint: '/v1/chat/completions', completion_window: '24h' }), (e: unknown) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(ai.files.retrieve('file-missing'), (e: unknown) => e instanceof OpenAI.NotFoundError);
  const del = await ai.files.delete(f2.id);
  assert.equal(del.deleted, true);
});

void test('batch: cancel stops the batch; it ends cancelled with what was answered', async (t) => {
  const engine = await startFakeEngine({ id: 'r0' });
  t.after(() => engine.close());
  const { proc, url } = await startChild(setup(t), engine);
  t.after(() => stop(proc, 'SIGKILL'));
  const ai = client(url);
  const f = await ai.files.create({ file: await toFile(Buffer.from(jsonl(3000)), 'in.jsonl'), purpose: 'batch' });
  const b = await ai.batches.create({ input_file_id: f.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  await until(() => ai.batches.retrieve(b.id), (x) => (x.request_counts?.completed ?? 0) > 0);
  const c = await ai.batches.cancel(b.id);
  assert.ok(c.status === 'cancelling' || c.status === 'cancelled');
  const end = await until(() => ai.batches.retrieve(b.id), (x) => x.status === 'cancelled');
  assert.ok((end.request_counts?.completed ?? 0) < 3000);
  assert.ok(end.cancelled_at !== undefined && end.cancelled_at !== null);
});

void test('batch: kill -9 mid-batch and restart: it completes and no recorded line is sent again', async (t) => {
  const engine = await startFakeEngine({ id: 'r0' });
  t.after(() => engine.close());
  const path = setup(t);
  const first = await startChild(path, engine);
  t.after(() => stop(first.proc, 'SIGKILL'));
  const ai1 = client(first.url);
  const f = await ai1.files.create({ file: await toFile(Buffer.from(jsonl(1000)), 'in.jsonl'), purpose: 'batch' });
  const b = await ai1.batches.create({ input_file_id: f.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  await until(() => ai1.batches.retrieve(b.id), (x) => (x.request_counts?.completed ?? 0) >= 200);
  await stop(first.proc, 'SIGKILL');
  // What the killed gateway recorded: none of these may reach the engine again.
  const db = openSqlite({ path, busyTimeoutMs: 1_000 });
  const recorded = (await db.all('SELECT custom_id FROM batch_results WHERE batch_id = $1', [b.id])).map((r) => String(r.custom_id));
  await db.close();
  assert.ok(recorded.length >= 200 && recorded.length < 1000, `killed mid-batch (${recorded.length} recorded)`);
  const seenBefore = engine.seen.length;
  const second = await startChild(path, engine);
  t.after(() => stop(second.proc, 'SIGKILL'));
  const ai2 = client(second.url);
  const done = await until(() => ai2.batches.retrieve(b.id), (x) => x.status === 'completed');
  assert.deepEqual(done.request_counts, { total: 1000, completed: 1000, failed: 0 });
  const resent = new Set(engine.seen.slice(seenBefore).map((s) => /line (\d+)/.exec(JSON.stringify(s.body))?.[1]));
  for (const id of recorded) assert.ok(!resent.has(id.slice('req-'.length)), `${id} was recorded before the kill and sent again`);
  const out = (await (await ai2.files.content(done.output_file_id ?? '')).text()).trim().split('\n');
  assert.equal(new Set(out.map((l) => (JSON.parse(l) as { custom_id: string }).custom_id)).size, 1000);
});
