// An upload over the batch file limit is refused as OpenAI refuses a file too large (413, an error
// object), and nothing of it is kept: no file row, no bytes in the database or the state dir.
import assert from 'node:assert/strict';
import { readdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import OpenAI, { toFile } from 'openai';
import { request } from 'undici';
import { openSqlite } from '../../src/store/index.js';
import { startFakeEngine } from '../gateway/fake-engine.js';
import { client, jsonl, key, setup, startChild, stop } from './harness.js';

const limit = 64 * 1024;

// Every file of the state dir and its size: the database, its WAL, and whatever else were written.
function listing(dir: string): Map<string, number> {
  return new Map(readdirSync(dir).map((n) => [n, statSync(join(dir, n)).size]));
}

const diskBytes = (m: Map<string, number>): number => [...m.values()].reduce((a, b) => a + b, 0);

void test('batch upload: a file over gateway.batch.max_file_bytes is a 413 error object, and nothing of it is stored', async (t) => {
  const engine = await startFakeEngine({ id: 'r0' });
  t.after(() => engine.close());
  const path = setup(t);
  const { proc, url } = await startChild(path, engine, { batch: { max_file_bytes: limit } });
  t.after(() => stop(proc, 'SIGKILL'));
  const ai = client(url);
  const before = listing(dirname(path));
  const big = Buffer.from(jsonl(20_000));
  assert.ok(big.length > 16 * limit, 'the file is well over the limit');

  const err = await ai.files.create({ file: await toFile(big, 'big.jsonl'), purpose: 'batch' }).then(
    () => assert.fail('an oversize upload was accepted'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof OpenAI.APIError, `an API error, not ${String(err)}`);
  assert.equal(err.status, 413);
  const body = err.error as Record<string, unknown>;
  assert.deepEqual(Object.keys(body).sort(), ['code', 'message', 'param', 'type']);
  assert.equal(body.param, null);
  assert.equal(typeof body.type, 'string');
  assert.match(String(body.message), new RegExp(`limit of ${limit}; .* raise gateway\\.batch\\.max_file_bytes`));

  // The same file sent chunked, with no Content-Length to refuse it by: cut at the limit as it arrives.
  const boundary = 'llmgwtestboundary';
  const parts = [Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.jsonl"\r\nContent-Type: application/jsonl\r\n\r\n`), big, Buffer.from(`\r\n--${boundary}--\r\n`)];
  const chunked = await request(new URL('/v1/files', url), {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': `multipart/form-data; boundary=${boundary}` },
    body: Readable.from(parts),
  });
  assert.equal(chunked.statusCode, 413);
  const j = (await chunked.body.json()) as { error: Record<string, unknown> };
  assert.match(String(j.error.message), new RegExp(`limit of ${limit}; .* raise gateway\\.batch\\.max_file_bytes`));

  assert.deepEqual((await ai.files.list()).data, [], 'no file is listed');
  const db = openSqlite({ path, busyTimeoutMs: 1_000 });
  const rows = await db.all('SELECT count(*) AS n, coalesce(sum(length(body)), 0) AS bytes FROM batch_files', []);
  await db.close();
  assert.deepEqual(rows.map((r) => [Number(r.n), Number(r.bytes)]), [[0, 0]], 'no file row and no body bytes in the database');
  const after = listing(dirname(path));
  assert.deepEqual([...after.keys()].filter((n) => !before.has(n)), [], 'no new file in the state dir');
  assert.ok(diskBytes(after) - diskBytes(before) < big.length / 16, `the state dir grew by ${diskBytes(after) - diskBytes(before)} bytes, not by the upload`);

  // A file under the limit is taken: the limit, not the route, refused the big one.
  const small = await ai.files.create({ file: await toFile(Buffer.from(jsonl(10)), 'small.jsonl'), purpose: 'batch' });
  assert.equal(small.object, 'file');
});
