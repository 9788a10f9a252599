// A key whose day budget runs out mid-batch: the batch pauses (in_progress, llmgw_paused_at set),
// the refused lines reach no engine and get no answer; once the key's budget is raised the batch
// resumes by itself and completes, every line answered exactly once.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { toFile } from 'openai';
import { request } from 'undici';
import { startFakeEngine } from '../gateway/fake-engine.js';
import { client, jsonl, key, setup, startChild, stop, until } from './harness.js';

const lines = 60;
// A line holds the bound of its prompt (its body's bytes and 256, about 350) and max_tokens 4, and
// spends its prompt (about 24 tokens) and 3: the budget pays for about twenty lines of sixty.
const tokensPerDay = 1_000;
const pauseMs = 100;

void test('batch: a budget spent mid-batch pauses it without failing it; raised, the batch completes with every line answered once', async (t) => {
  const engine = await startFakeEngine({ id: 'r0' });
  t.after(() => engine.close());
  const path = setup(t);
  const { proc, url } = await startChild(path, engine, { batch: { max_pause_ms: pauseMs } });
  t.after(() => stop(proc, 'SIGKILL'));
  const issued = await request(new URL('/admin/v1/keys', url), {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'budgeted', tokens_per_day: tokensPerDay }),
  });
  assert.equal(issued.statusCode, 201);
  const { key: secret } = (await issued.body.json()) as { key: string };
  const ai = client(url, secret);
  const f = await ai.files.create({ file: await toFile(Buffer.from(jsonl(lines)), 'in.jsonl'), purpose: 'batch' });
  const b = await ai.batches.create({ input_file_id: f.id, endpoint: '/v1/chat/completions', completion_window: '24h' });

  type Paused = Awaited<ReturnType<typeof ai.batches.retrieve>> & { llmgw_paused_at?: number | null };
  const retrieve = async (): Promise<Paused> => (await ai.batches.retrieve(b.id)) as Paused;
  // The first refusal may only be the holds of the lines in flight, which their answers release:
  // the budget is spent once ten pauses in a row let no line through.
  let still = 0;
  let seen = -1;
  await until(
    async () => {
      const x = await retrieve();
      still = x.llmgw_paused_at != null && engine.seen.length === seen ? still + 1 : 0;
      seen = engine.seen.length;
      await new Promise((r) => setTimeout(r, pauseMs));
      return still;
    },
    (n) => n >= 10,
  );
  const heldAt = engine.seen.length;
  assert.ok(heldAt > 0 && heldAt < lines, `the budget paid for some lines, not all (${heldAt})`);
  // Paused, it stays so: many pauses later it is in_progress, nothing failed, no line got through.
  for (let i = 0; i < 20; i++) {
    const x = await retrieve();
    assert.equal(x.status, 'in_progress', 'a spent budget pauses the batch, it does not fail it');
    assert.ok(x.llmgw_paused_at != null, 'the batch says it is paused');
    assert.equal(x.request_counts?.failed, 0, 'a refused line is not an answer');
    assert.equal(x.request_counts?.completed, heldAt, 'the answered lines are those that reached the engine');
    await new Promise((r) => setTimeout(r, pauseMs));
  }
  assert.equal(engine.seen.length, heldAt, 'no line past the budget reached the engine');

  // Raised through the admin API, the next line's admission reads the new budget from the key's row.
  const raised = await request(new URL('/admin/v1/keys/budgeted', url), {
    method: 'PATCH',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ tokens_per_day: 1_000_000 }),
  });
  assert.equal(raised.statusCode, 200, await raised.body.text());

  const done = await until(() => ai.batches.retrieve(b.id), (x) => x.status === 'completed' || x.status === 'failed');
  assert.equal(done.status, 'completed');
  assert.deepEqual(done.request_counts, { total: lines, completed: lines, failed: 0 });
  assert.equal((done as Paused).llmgw_paused_at, null, 'no longer paused');
  const out = (await (await ai.files.content(done.output_file_id ?? '')).text()).trim().split('\n').map((l) => JSON.parse(l) as { custom_id: string; response: { status_code: number } });
  assert.equal(out.length, lines);
  assert.equal(new Set(out.map((l) => l.custom_id)).size, lines, 'every custom_id answered once');
  assert.ok(out.every((l) => l.response.status_code === 200));
  assert.equal(done.error_file_id, null, 'no line was answered with the refusal');
  const sent = engine.seen.map((s) => /line (\d+)/.exec(JSON.stringify(s.body))?.[1]);
  assert.equal(sent.length, lines, 'each line reached the engine once');
  assert.equal(new Set(sent).size, lines);
});
