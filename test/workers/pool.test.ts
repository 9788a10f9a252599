import { strict as assert } from 'node:assert';
import fs, { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import fsPromises from 'node:fs/promises';
import { syncBuiltinESMExports } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { qwen3TokenizerFile } from '../../src/tokenize/index.js';
import { ClusterIndex, IndexReader, hashBlocks, type HashAlgo, type HashOptions } from '../../src/kv/index.js';
import { HashPool, type TokenizeResult } from '../../src/workers/index.js';
import { hasCode } from '../../src/errors/index.js';
import { concatBody, readRequest } from '../../src/gateway/index.js';
import { defaultRequestPolicy, parseGenerationRequest } from '../../src/limits/index.js';
import { RequestError } from '../../src/errors/index.js';

const o: HashOptions = { blockSizeTokens: 16, seed: '0' };
const prompt = (n: number, base = 0): Uint32Array => Uint32Array.from({ length: n }, (_, i) => (base + i * 7919) % 151_000);

// tokenize answers the ids themselves unless the task says `ids: false`.
function idsOf(r: TokenizeResult): Uint32Array {
  assert.ok(r.ok && r.tokens !== undefined, r.ok ? 'no ids' : r.reason);
  return r.tokens;
}

function pool(t: { after(fn: () => Promise<void>): void }, index: ClusterIndex | null, extra: { maxThreads?: number; maxQueue?: number; tasksPerThread?: number } = {}): HashPool {
  const p = new HashPool({ indexBuffer: index?.buffer ?? null, maxThreads: 1, ...extra });
  t.after(() => p.close());
  return p;
}

void test('hash in a worker gives the same keys as hashing in place', async (t) => {
  const p = pool(t, null);
  const tokens = prompt(1000);
  const want = hashBlocks(tokens, o).keys;
  assert.deepEqual([...(await p.hash(tokens.slice(), o))], want);
});

void test('a prompt seen before (the worker prefix memo) still gives exactly the same keys', async (t) => {
  const p = pool(t, null);
  const tokens = prompt(16 * 32 * 3 + 5);
  const want = hashBlocks(tokens, o).keys;
  assert.deepEqual([...(await p.hash(tokens.slice(), o))], want);
  assert.deepEqual([...(await p.hash(tokens.slice(), o))], want);
  assert.deepEqual([...(await p.hash(tokens.slice(), { ...o, seed: '42' }))], hashBlocks(tokens, { ...o, seed: '42' }).keys);
});

void test('a token array that owns its whole buffer is moved to the worker, a view into a bigger one is copied', async (t) => {
  const p = pool(t, null);
  const owned = prompt(64);
  await p.hash(owned, o);
  assert.equal(owned.length, 0, 'moved: the caller no longer has it');
  const big = prompt(128);
  const view = big.subarray(64);
  await p.hash(view, o);
  assert.equal(view.length, 64, 'not ours to move: copied');
  assert.equal(big.length, 128);
});

void test('score: per slot, the leading blocks held in the shared index, read by the worker', async (t) => {
  const index = new ClusterIndex({ capacityBlocks: 10_000 });
  const p = pool(t, index);
  const tokens = prompt(320);
  const keys = hashBlocks(tokens, o).keys;
  index.add(0, keys);
  index.add(1, keys.slice(0, 5));
  index.add(2, keys.slice(1));
  const r = await p.score({ tokens: tokens.slice(), hash: o, slots: [0, 1, 2, 3] });
  assert.ok(r.ok, r.ok ? '' : r.reason);
  assert.deepEqual(r.leading, [20, 5, 0, 0]);
  assert.equal(r.lookups, 20, 'keys looked up until every slot missed (slot 0 held all 20)');
  assert.deepEqual([...r.keys], keys);
  assert.deepEqual(r.leading, new IndexReader(index.buffer).leadingBlocks(keys, [0, 1, 2, 3]));
});

void test('a full queue answers {ok:false, "queue full"} at once instead of waiting', async (t) => {
  const index = new ClusterIndex({ capacityBlocks: 100 });
  const p = pool(t, index, { maxThreads: 1, maxQueue: 1, tasksPerThread: 1 });
  const results = await Promise.all(
    [0, 1, 2, 3].map((i) => p.score({ tokens: prompt(131_072, i), hash: o, slots: [0] })),
  );
  const refused = results.filter((r) => !r.ok && r.reason === 'queue full').length;
  assert.ok(refused >= 1, JSON.stringify(results.map((r) => (r.ok ? 'ok' : r.reason))));
  assert.ok(results.some((r) => r.ok));
});

void test('a thread is handed several tasks before any waits in the queue, so the queue bound counts only those waiting', async (t) => {
  const index = new ClusterIndex({ capacityBlocks: 100 });
  const p = pool(t, index, { maxThreads: 1, maxQueue: 1, tasksPerThread: 2 });
  // Once the thread is up, tasks go to it as they come instead of waiting in the pool's queue.
  assert.equal((await p.score({ tokens: prompt(32), hash: o, slots: [0] })).ok, true);
  const results = await Promise.all([0, 1, 2, 3].map((i) => p.score({ tokens: prompt(131_072, i), hash: o, slots: [0] })));
  assert.deepEqual(
    results.map((r) => (r.ok ? 'ok' : r.reason)),
    ['ok', 'ok', 'ok', 'queue full'],
  );
});

void test('bad hash parameters come back as a reason from the worker, not a lost Error class', async (t) => {
  const p = pool(t, new ClusterIndex({ capacityBlocks: 10 }));
  const bad = { ...o, algo: 'xxhash' as HashAlgo };
  const r = await p.score({ tokens: prompt(32), hash: bad, slots: [0] });
  assert.equal(r.ok, false);
  assert.match(r.ok ? '' : r.reason, /LLMGW_HASH_ALGO/);
  await assert.rejects(p.hash(prompt(32), bad), (e: unknown) => hasCode(e, 'LLMGW_HASH_TASK'));
});

void test('a pool without an index can hash but not score', async (t) => {
  const p = pool(t, null);
  const r = await p.score({ tokens: prompt(32), hash: o, slots: [0] });
  assert.deepEqual(r, { ok: false, reason: 'this worker was started without a cluster index' });
});

void test('close() is idempotent; after it, score answers "pool closed" and hash rejects', async (t) => {
  const p = pool(t, new ClusterIndex({ capacityBlocks: 10 }));
  const a = p.close();
  assert.equal(p.close(), a);
  await a;
  assert.deepEqual(await p.score({ tokens: prompt(32), hash: o, slots: [0] }), { ok: false, reason: 'pool closed' });
  await assert.rejects(p.hash(prompt(32), o), (e: unknown) => hasCode(e, 'LLMGW_POOL_BUSY'));
});

void test('tokenize scores the ids for each group asked in the same trip, as score would', async (t) => {
  const index = new ClusterIndex({ capacityBlocks: 10_000 });
  const p = pool(t, index);
  const body = Buffer.from(JSON.stringify({ model: 'm', prompt: 'a prompt long enough for several blocks of sixteen bytes each', add_special_tokens: false }));
  const plain = await p.tokenize({ source: 'bytes', endpoint: 'completions', body: body.slice() });
  assert.ok(plain.ok, plain.ok ? '' : plain.reason);
  assert.deepEqual(plain.scored, []);
  const keys = hashBlocks(idsOf(plain), o).keys;
  index.add(0, keys.slice(0, 2));
  const salted: HashOptions = { ...o, cacheSalt: 'tenant' };
  const r = await p.tokenize({ source: 'bytes', endpoint: 'completions', body: body.slice(), score: [{ hash: o, slots: [0, 1] }, { hash: salted, slots: [0] }] });
  assert.ok(r.ok, r.ok ? '' : r.reason);
  assert.deepEqual([...idsOf(r)], [...idsOf(plain)]);
  assert.deepEqual([...(r.scored[0]?.keys ?? [])], keys);
  assert.deepEqual(r.scored[0]?.leading, [2, 0]);
  assert.deepEqual([...(r.scored[1]?.keys ?? [])], hashBlocks(idsOf(plain), salted).keys);
  assert.deepEqual(r.scored[1]?.leading, [0], 'a salted chain shares no block with the plain one');
});

void test("tokenize: a conversation's next turn, scored from the chain of the turn before, has the keys of a whole hash", async (t) => {
  const index = new ClusterIndex({ capacityBlocks: 10_000 });
  const p = pool(t, index);
  const messages: { role: string; content: string }[] = [{ role: 'system', content: 'You answer questions about long documents, briefly.' }];
  for (let turn = 0; turn < 4; turn++) {
    messages.push({ role: 'user', content: `question ${turn}: ${'words of a question '.repeat(10 + turn)}` });
    const body = Buffer.from(JSON.stringify({ model: 'm', messages }));
    const r = await p.tokenize({ source: 'bytes', endpoint: 'chat', body: body.slice(), score: [{ hash: o, slots: [0] }] });
    assert.ok(r.ok, r.ok ? '' : r.reason);
    assert.deepEqual([...(r.scored[0]?.keys ?? [])], hashBlocks(idsOf(r), o).keys, `turn ${turn}`);
    messages.push({ role: 'assistant', content: `answer ${turn}` });
  }
});

void test("tokenize: a next turn's score starts past the run its slot held, unless the slot lost a key since", async (t) => {
  const index = new ClusterIndex({ capacityBlocks: 10_000 });
  const p = pool(t, index);
  const messages: { role: string; content: string }[] = [{ role: 'system', content: 'You answer questions about long documents, briefly.' }];
  const turn = async (n: number): Promise<{ tokens: Uint32Array; leading: readonly number[] }> => {
    messages.push({ role: 'user', content: `question ${n}: ${'words of a question '.repeat(10 + n)}` });
    const body = Buffer.from(JSON.stringify({ model: 'm', messages }));
    const r = await p.tokenize({ source: 'bytes', endpoint: 'chat', body, score: [{ hash: o, slots: [0, 1] }] });
    assert.ok(r.ok, r.ok ? '' : r.reason);
    messages.push({ role: 'assistant', content: `answer ${n}` });
    return { tokens: idsOf(r), leading: r.scored[0]?.leading ?? [] };
  };
  const first = await turn(0);
  const held = hashBlocks(first.tokens, o).keys;
  index.add(0, held);
  index.add(1, held);
  const second = await turn(1);
  assert.deepEqual(second.leading, [held.length, held.length], 'both slots found holding the whole first turn');
  // Slot 0 loses a block in the middle of that run; slot 1 gains the second turn's blocks.
  index.remove(0, [held[1] ?? 0n]);
  const secondKeys = hashBlocks(second.tokens, o).keys;
  index.add(1, secondKeys);
  const third = await turn(2);
  assert.deepEqual(third.leading, [1, secondKeys.length], 'the slot that lost a key is probed again from its start; the other extends its run');
});

void test("tokenize: a slot that lost other blocks since (an engine evicting) keeps its run for the next turn; one that lost a block of it is probed from that block", async (t) => {
  const index = new ClusterIndex({ capacityBlocks: 10_000 });
  const p = pool(t, index);
  // Long enough to be remembered for the next turn (the pool's rememberMinChars).
  const messages: { role: string; content: string }[] = [{ role: 'user', content: `Document: ${'words of a long document '.repeat(100)}` }];
  const turn = async (): Promise<{ tokens: Uint32Array; leading: readonly number[]; lookups: number }> => {
    const body = Buffer.from(JSON.stringify({ model: 'm', messages }));
    const r = await p.tokenize({ source: 'bytes', endpoint: 'chat', body, score: [{ hash: o, slots: [0, 1] }] });
    assert.ok(r.ok, r.ok ? '' : r.reason);
    messages.push({ role: 'assistant', content: 'an answer' }, { role: 'user', content: `and ${messages.length}?` });
    return { tokens: idsOf(r), leading: r.scored[0]?.leading ?? [], lookups: r.scored[0]?.lookups ?? NaN };
  };
  const first = await turn();
  const held = hashBlocks(first.tokens, o).keys;
  const other = hashBlocks(prompt(16 * 50, 3), o).keys;
  index.add(0, [...held, ...other]);
  index.add(1, [...held, ...other]);
  const second = await turn();
  assert.deepEqual(second.leading, [held.length, held.length]);
  index.remove(0, other);
  index.remove(1, [...other, held[7] ?? 0n]);
  const third = await turn();
  assert.deepEqual(third.leading, [held.length, 7], 'slot 0 holds the whole first turn still; slot 1 lost its eighth block');
  assert.ok(third.lookups <= held.length - 7 + 1, `looked up ${third.lookups}: from slot 1's lost block on, not from the start`);
});

void test("prepare: an answered chat's next turn encodes only the user's new message, and its ids and keys are a whole encode's", async (t) => {
  const index = new ClusterIndex({ capacityBlocks: 10_000 });
  const p = pool(t, index);
  const messages: { role: string; content: string }[] = [
    { role: 'system', content: 'You answer questions about long documents, briefly.' },
    { role: 'user', content: `Document: ${'a long document of many words '.repeat(200)}` },
  ];
  const first = Buffer.from(JSON.stringify({ model: 'm', messages }));
  const r1 = await p.tokenize({ source: 'bytes', endpoint: 'chat', body: new Uint8Array(first), score: [{ hash: o, slots: [0] }] });
  assert.ok(r1.ok, r1.ok ? '' : r1.reason);
  const answer = 'an answer of some length, '.repeat(40);
  const sse = ['data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n']
    .concat(answer.match(/.{1,17}/gs)?.map((c) => `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: c } }] })}\n\n`) ?? [], ['data: [DONE]\n\n'])
    .join('');
  const prepared = await p.prepare({ source: 'bytes', body: new Uint8Array(first), answer: { format: 'sse', text: sse }, hashes: [o] });
  assert.ok(prepared.ok, prepared.ok ? '' : prepared.reason);
  assert.ok(prepared.encodedChars >= answer.length && prepared.encodedChars < answer.length + 100, `encoded ${prepared.encodedChars}: the answer, not the document again`);
  messages.push({ role: 'assistant', content: answer }, { role: 'user', content: 'and the second question?' });
  const second = Buffer.from(JSON.stringify({ model: 'm', messages }));
  const r2 = await p.tokenize({ source: 'bytes', endpoint: 'chat', body: new Uint8Array(second), score: [{ hash: o, slots: [0] }] });
  assert.ok(r2.ok, r2.ok ? '' : r2.reason);
  const fresh = await pool(t, null).tokenize({ source: 'bytes', endpoint: 'chat', body: new Uint8Array(second) });
  assert.ok(fresh.ok, fresh.ok ? '' : fresh.reason);
  assert.deepEqual([...idsOf(r2)], [...idsOf(fresh)], 'ids equal those of a pool that never saw the conversation');
  assert.deepEqual([...(r2.scored[0]?.keys ?? [])], hashBlocks(idsOf(r2), o).keys, 'keys from the prepared chain equal a whole hash');
});

void test("prepare: the next turn looks up only the blocks it added, though its first turn found nothing held and the router has entered that turn since", async (t) => {
  const index = new ClusterIndex({ capacityBlocks: 10_000 });
  const p = pool(t, index);
  const messages: { role: string; content: string }[] = [{ role: 'user', content: `Document: ${'a long document of many words '.repeat(100)}` }];
  const first = Buffer.from(JSON.stringify({ model: 'm', messages }));
  const r1 = await p.tokenize({ source: 'bytes', endpoint: 'chat', body: new Uint8Array(first), score: [{ hash: o, slots: [0] }] });
  assert.ok(r1.ok, r1.ok ? '' : r1.reason);
  const keys1 = hashBlocks(idsOf(r1), o).keys;
  assert.deepEqual(r1.scored[0]?.leading, [0], 'a cold document is held nowhere');
  // What the router's commit does once it chose slot 0's replica: the prompt's blocks enter the index.
  index.add(0, keys1);
  const answer = 'an answer, '.repeat(20);
  const prepared = await p.prepare({ source: 'bytes', body: new Uint8Array(first), answer: { format: 'json', text: JSON.stringify({ choices: [{ index: 0, message: { role: 'assistant', content: answer } }] }) }, hashes: [o] });
  assert.ok(prepared.ok, prepared.ok ? '' : prepared.reason);
  messages.push({ role: 'assistant', content: answer }, { role: 'user', content: 'and then?' });
  const r2 = await p.tokenize({ source: 'bytes', endpoint: 'chat', body: new Uint8Array(Buffer.from(JSON.stringify({ model: 'm', messages }))), score: [{ hash: o, slots: [0] }] });
  assert.ok(r2.ok, r2.ok ? '' : r2.reason);
  assert.deepEqual(r2.scored[0]?.leading, [keys1.length], 'found holding the whole first turn');
  const lookups = r2.scored[0]?.lookups ?? NaN;
  assert.ok(lookups <= 1, `looked up ${lookups} keys: the first turn's ${keys1.length} were found while the answer was read`);
});

void test("prepare: an answer without tool calls is prepared though it lists none (vLLM's `tool_calls: []`), streamed or not", async (t) => {
  const p = pool(t, null);
  const body = Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'weather?' }] }));
  const json = JSON.stringify({ choices: [{ index: 0, message: { role: 'assistant', content: 'Sunny.', tool_calls: [] } }] });
  const sse = `data: ${JSON.stringify({ choices: [{ index: 0, delta: { role: 'assistant', content: 'Sunny.', tool_calls: [] } }] })}\n\ndata: [DONE]\n\n`;
  for (const answer of [{ format: 'json' as const, text: json }, { format: 'sse' as const, text: sse }]) {
    const r = await p.prepare({ source: 'bytes', body: body.slice(), answer, hashes: [] });
    assert.ok(r.ok, r.ok ? answer.format : r.reason);
  }
});

void test('prepare: an answer with tool calls, or without text, prepares nothing and says so', async (t) => {
  const p = pool(t, null);
  const body = Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'weather?' }] }));
  const tool = JSON.stringify({ choices: [{ index: 0, message: { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }] } }] });
  for (const answer of [{ format: 'json' as const, text: tool }, { format: 'sse' as const, text: 'data: [DONE]\n\n' }, { format: 'json' as const, text: 'not json' }]) {
    const r = await p.prepare({ source: 'bytes', body: body.slice(), answer, hashes: [] });
    assert.equal(r.ok, false, answer.text);
  }
});

void test('tokenize with ids: false answers how many ids there are and the scores, and keeps the ids in the worker', async (t) => {
  const index = new ClusterIndex({ capacityBlocks: 10_000 });
  const p = pool(t, index);
  const body = Buffer.from(JSON.stringify({ model: 'm', prompt: 'a prompt long enough for several blocks of sixteen bytes each', add_special_tokens: false }));
  const all = await p.tokenize({ source: 'bytes', endpoint: 'completions', body: body.slice(), score: [{ hash: o, slots: [0] }] });
  const count = await p.tokenize({ source: 'bytes', endpoint: 'completions', body: body.slice(), score: [{ hash: o, slots: [0] }], ids: false });
  assert.ok(all.ok && count.ok);
  assert.equal(count.tokens, undefined);
  assert.equal(count.count, idsOf(all).length);
  assert.deepEqual([...(count.scored[0]?.keys ?? [])], [...(all.scored[0]?.keys ?? [])]);
});

void test('load: every thread loads the tokenizer, and its warm-up leaves none of its self-checks against tokenizers for a first conversation', async (t) => {
  const p = pool(t, null, { maxThreads: 2 });
  assert.deepEqual(await p.load('qwen3'), { ok: true, incremental: true, pieces: 'bpe', checksLeft: 0, threads: 2 });
});

void test('load: whether pieces encode apart and what encodes them (our BPE for Qwen3), or why the tokenizer cannot load', async (t) => {
  const p = pool(t, null);
  assert.deepEqual(await p.load('qwen3'), { ok: true, incremental: true, pieces: 'bpe', checksLeft: 0, threads: 1 });
  assert.deepEqual(await p.load('bytes'), { ok: true, incremental: true, pieces: 'bytes', checksLeft: 0, threads: 1 });
  // Said at load: a tokenize answer repeats it only once it changes.
  const body = new Uint8Array(Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] })));
  const r = await p.tokenize({ source: 'qwen3', endpoint: 'chat', body });
  assert.ok(r.ok && r.pieces === undefined, JSON.stringify(r.ok ? r.pieces : r.reason));
  const missing = await p.load('/nonexistent/model');
  assert.ok(!missing.ok && /cannot read it/.test(missing.reason), JSON.stringify(missing));
});

void test('tokenize: a body of at most inlineMaxBytes runs on the calling thread once its tokenizer is loaded there, and answers as a worker does', async (t) => {
  const index = new ClusterIndex({ capacityBlocks: 10_000 });
  const p = new HashPool({ indexBuffer: index.buffer, maxThreads: 1, inlineMaxBytes: 200 });
  t.after(() => p.close());
  const short = (): Uint8Array => new Uint8Array(Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'a short question that fills a few blocks' }] })));
  const score = [{ hash: o, slots: [0, 1] }];
  const before = await p.tokenize({ source: 'bytes', endpoint: 'chat', body: short(), score });
  assert.deepEqual(p.stats, { inlineTokenizes: 0, pooledTokenizes: 1, aheadTokenizes: 0, pooledParses: 0, aheadParses: 0 }, 'not loaded on the calling thread yet: the worker tokenizes');
  assert.ok(before.ok, before.ok ? '' : before.reason);
  index.add(1, (before.scored[0]?.keys ?? new BigUint64Array(0)).slice(0, 2));
  assert.deepEqual(await p.load('bytes'), { ok: true, incremental: true, pieces: 'bytes', checksLeft: 0, threads: 1 });
  const inline = await p.tokenize({ source: 'bytes', endpoint: 'chat', body: short(), score });
  assert.deepEqual(p.stats, { inlineTokenizes: 1, pooledTokenizes: 1, aheadTokenizes: 0, pooledParses: 0, aheadParses: 0 });
  assert.ok(inline.ok, inline.ok ? '' : inline.reason);
  assert.deepEqual([...idsOf(inline)], [...idsOf(before)]);
  assert.deepEqual([...(inline.scored[0]?.keys ?? [])], [...(before.scored[0]?.keys ?? [])]);
  assert.deepEqual(inline.scored[0]?.leading, [0, 2], 'the calling thread reads the same shared index');
  const long = new Uint8Array(Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x'.repeat(300) }] })));
  const pooled = await p.tokenize({ source: 'bytes', endpoint: 'chat', body: long, score });
  assert.ok(pooled.ok, pooled.ok ? '' : pooled.reason);
  assert.deepEqual(p.stats, { inlineTokenizes: 1, pooledTokenizes: 2, aheadTokenizes: 0, pooledParses: 0, aheadParses: 0 }, 'a body over the bound goes to a worker');
  await p.close();
  const closed = await p.tokenize({ source: 'bytes', endpoint: 'chat', body: short(), score });
  assert.deepEqual(closed, { ok: false, reason: 'pool closed' }, 'a closed pool tokenizes nowhere');
});

void test('load: the calling thread tokenizes short bodies with the tables a worker built, never reading the tokenizer itself', async (t) => {
  // Reads of the model's files on this thread only: each worker thread has its own fs bindings.
  // Reading and building Qwen3's here blocked the event loop for 0.7 s and held 170 MB more.
  const dir = dirname(qwen3TokenizerFile());
  const read: string[] = [];
  const { readFileSync: readSync } = fs;
  const { readFile } = fsPromises;
  const noted = (path: unknown): void => {
    if (String(path).startsWith(dir)) read.push(String(path));
  };
  fs.readFileSync = ((path: Parameters<typeof readSync>[0], o?: Parameters<typeof readSync>[1]) => (noted(path), readSync(path, o))) as typeof readSync;
  fsPromises.readFile = ((path: Parameters<typeof readFile>[0], o?: Parameters<typeof readFile>[1]) => (noted(path), readFile(path, o))) as typeof readFile;
  syncBuiltinESMExports();
  t.after(() => {
    fs.readFileSync = readSync;
    fsPromises.readFile = readFile;
    syncBuiltinESMExports();
  });
  const index = new ClusterIndex({ capacityBlocks: 10_000 });
  const p = new HashPool({ indexBuffer: index.buffer, maxThreads: 1, inlineMaxBytes: 4096 });
  t.after(() => p.close());
  const workers = pool(t, index);
  assert.deepEqual(await p.load('qwen3'), { ok: true, incremental: true, pieces: 'bpe', checksLeft: 0, threads: 1 });
  const chat = (content: string, extra: Record<string, unknown> = {}): Uint8Array => new Uint8Array(Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content }], ...extra })));
  const bodies: { endpoint: 'chat' | 'completions'; body: () => Uint8Array }[] = [
    { endpoint: 'chat', body: () => chat('hi') },
    { endpoint: 'chat', body: () => chat('cafe\u0301 na\u0131\u0308ve \u212b 12345 <|im_end|> 日本語のテキスト 🙂', { add_generation_prompt: false }) },
    { endpoint: 'completions', body: () => new Uint8Array(Buffer.from(JSON.stringify({ model: 'm', prompt: 'Once upon a time<|endoftext|> there', add_special_tokens: true }))) },
  ];
  const score = [{ hash: o, slots: [0] }];
  for (const b of bodies) {
    const inline = await p.tokenize({ source: 'qwen3', endpoint: b.endpoint, body: b.body(), score });
    const want = await workers.tokenize({ source: 'qwen3', endpoint: b.endpoint, body: b.body(), score });
    assert.deepEqual([...idsOf(inline)], [...idsOf(want)]);
    assert.deepEqual([...(inline.ok ? (inline.scored[0]?.keys ?? []) : [])], [...(want.ok ? (want.scored[0]?.keys ?? []) : [])]);
  }
  assert.deepEqual(p.stats, { inlineTokenizes: bodies.length, pooledTokenizes: 0, aheadTokenizes: 0, pooledParses: 0, aheadParses: 0 }, 'every short body on the calling thread');
  assert.deepEqual(read, [], 'no tokenizer file read on the calling thread');
});

void test('load: a model our BPE cannot encode alone is tokenized in a worker, however short the body', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-pool-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const json = JSON.parse(readFileSync(qwen3TokenizerFile(), 'utf8')) as Record<string, unknown>;
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify({ ...json, normalizer: { type: 'NFKC' } }));
  const p = new HashPool({ indexBuffer: null, maxThreads: 1, inlineMaxBytes: 4096 });
  t.after(() => p.close());
  const loaded = await p.load(dir);
  assert.ok(loaded.ok && loaded.pieces.startsWith('tokenizers'), JSON.stringify(loaded));
  const r = await p.tokenize({ source: dir, endpoint: 'chat', body: new Uint8Array(Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }))) });
  assert.ok(r.ok, r.ok ? '' : r.reason);
  assert.deepEqual(p.stats, { inlineTokenizes: 0, pooledTokenizes: 1, aheadTokenizes: 0, pooledParses: 0, aheadParses: 0 });
});

// Bodies of 16 KiB and up, as readBody gives them: in shared memory.
const big = (body: unknown): Buffer => {
  const json = JSON.stringify(body);
  return concatBody([Buffer.from(json)], Buffer.byteLength(json));
};
const longChat = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  model: 'm',
  messages: [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: `Read this: ${'a paragraph of a long document. '.repeat(800)}` },
  ],
  ...extra,
});

void test('a body in shared memory is parsed in a worker: the same request as parsed on the event loop, its prompt parsed here only when read', async (t) => {
  const p = pool(t, null);
  for (const [endpoint, body] of [
    ['chat', longChat({ stream: true, stream_options: { include_usage: true }, max_tokens: 9, cache_salt: 'tenant' })],
    ['completions', { model: 'm', prompt: 'word '.repeat(5000), temperature: 0.5 }],
    ['completions', { prompt: Array.from({ length: 6000 }, (_, i) => i), model: 'm' }],
  ] as const) {
    const raw = big(body);
    const before = p.stats.pooledParses;
    const where: unknown[] = [];
    const got = await readRequest(endpoint, raw, defaultRequestPolicy, { pool: p, parsed: (w) => where.push(w) });
    assert.equal(p.stats.pooledParses, before + 1);
    assert.deepEqual(where, [{ thread: 'worker', reason: 'long' }]);
    const want = parseGenerationRequest(endpoint, raw, defaultRequestPolicy);
    assert.deepEqual(Object.keys(got.body), Object.keys(want.body), 'the keys in the client order');
    // Token ids cross in a typed array: the same ids.
    const ids = got.promptTokenIds === undefined ? undefined : Array.from(got.promptTokenIds);
    assert.deepEqual({ ...got, messages: got.messages, prompt: got.prompt, promptTokenIds: ids, body: { ...got.body } }, want);
  }
});

void test('a bad body parsed in a worker is the same 400 as on the event loop, naming the same field', async (t) => {
  const p = pool(t, null);
  const deep = (n: number): unknown => (n === 0 ? 'x' : { d: deep(n - 1) });
  const policy = { ...defaultRequestPolicy, trustChatTemplate: ['trusted'] };
  const bodies: [string, Buffer][] = [
    ['not JSON', concatBody([big(longChat()).subarray(0, 20_000), Buffer.from('{')], 20_001)],
    ['no model', big(longChat({ model: '' }))],
    ['messages not a list', big({ model: 'm', messages: { role: 'user' }, pad: 'x'.repeat(20_000) })],
    ['a message without a role', big({ model: 'm', messages: [...(longChat().messages as unknown[]), { content: 'hi' }] })],
    ['too deep', big(longChat({ tools: [deep(80)] }))],
    ['a chat template from the request', big(longChat({ chat_template: '{{ x }}' }))],
    ['a bad max_tokens', big(longChat({ max_tokens: -1 }))],
  ];
  for (const [why, raw] of bodies) {
    assert.ok(raw.buffer instanceof SharedArrayBuffer, why);
    const here = (() => {
      try {
        parseGenerationRequest('chat', raw, policy);
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    assert.ok(here instanceof RequestError, why);
    await assert.rejects(readRequest('chat', raw, policy, { pool: p }), (e: unknown) => e instanceof RequestError && e.code === here.code && e.message === here.message && e.param === here.param, why);
  }
});

void test('a short body, a gateway without a pool and a pool that cannot take a body leave it to the event loop, which parses it as before and says why', async (t) => {
  const p = pool(t, null);
  await p.close();
  const raw = big(longChat());
  const short = Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }));
  for (const [body, pool, reason] of [
    [raw, p, 'pool-busy'],
    [raw, undefined, 'no-pool'],
    [short, p, 'short'],
  ] as const) {
    const where: unknown[] = [];
    assert.deepEqual(await readRequest('chat', body, defaultRequestPolicy, { pool, parsed: (w) => where.push(w) }), parseGenerationRequest('chat', body, defaultRequestPolicy));
    assert.deepEqual(where, [{ thread: 'event-loop', reason }]);
  }
});

void test("seam: a chat's continuation is exact only where the template renders the answer so far as the generation prompt followed by it (Qwen3's, thinking on, writes an empty think block first)", async (t) => {
  const p = pool(t, null);
  const bytes = (b: unknown): Uint8Array => new Uint8Array(Buffer.from(JSON.stringify(b)));
  const messages = [{ role: 'user', content: 'tell me a story' }];
  const text = 'Once upon a time';
  const seam = (extra: Record<string, unknown>) =>
    p.seam({
      source: 'qwen3',
      original: bytes({ model: 'm', messages, ...extra }),
      continuation: bytes({ model: 'm', messages: [...messages, { role: 'assistant', content: text }], continue_final_message: true, add_generation_prompt: false, ...extra }),
      text,
    });
  assert.deepEqual(await seam({}), { ok: true, exact: false });
  assert.deepEqual(await seam({ chat_template_kwargs: { enable_thinking: false } }), { ok: true, exact: true });
  // The byte tokenizer's ChatML template writes a final assistant message as it would have been generated.
  const chatml = await p.seam({ source: 'bytes', original: bytes({ model: 'm', messages }), continuation: bytes({ model: 'm', messages: [...messages, { role: 'assistant', content: text }], continue_final_message: true, add_generation_prompt: false }), text });
  assert.deepEqual(chatml, { ok: true, exact: true });
  const bad = await p.seam({ source: 'qwen3', original: bytes([1]), continuation: bytes({}), text });
  assert.equal(bad.ok, false);
});

void test('parse tokenizes ahead: once a model was tokenized, its next long body is tokenized and scored in its parse trip, and the router takes no trip of its own', async (t) => {
  const index = new ClusterIndex({ capacityBlocks: 10_000 });
  const p = pool(t, index);
  const policy = defaultRequestPolicy;
  const score = [{ hash: o, slots: [0, 1] }];
  const first = big(longChat());
  await readRequest('chat', first, policy, { pool: p });
  const taught = await p.tokenize({ source: 'bytes', endpoint: 'chat', body: first, score, ids: false, model: 'm' });
  assert.ok(taught.ok, taught.ok ? '' : taught.reason);
  assert.equal(p.stats.aheadTokenizes, 0, 'nothing was known of the model before its first tokenize');
  const next = big(longChat({ messages: [...(longChat().messages as unknown[]), { role: 'user', content: 'and then?' }] }));
  await readRequest('chat', next, policy, { pool: p });
  const pooled = p.stats.pooledTokenizes;
  const ahead = await p.tokenize({ source: 'bytes', endpoint: 'chat', body: next, score, ids: false, model: 'm' });
  assert.equal(p.stats.aheadTokenizes, 1);
  assert.equal(p.stats.pooledTokenizes, pooled, 'answered without a trip');
  const trip = await p.tokenize({ source: 'bytes', endpoint: 'chat', body: next, score, ids: false, model: 'm' });
  assert.equal(p.stats.pooledTokenizes, pooled + 1, 'an answer ahead is taken once');
  assert.ok(ahead.ok && trip.ok);
  assert.equal(ahead.count, trip.count);
  assert.deepEqual([...(ahead.scored[0]?.keys ?? [])], [...(trip.scored[0]?.keys ?? [])]);
  assert.deepEqual(ahead.scored[0]?.leading, trip.scored[0]?.leading);
});

void test('parse tokenizes ahead: the scores are the index\'s when the router asks, blocks gained and lost since the parse counted', async (t) => {
  const index = new ClusterIndex({ capacityBlocks: 10_000 });
  const p = pool(t, index);
  const policy = defaultRequestPolicy;
  const score = [{ hash: o, slots: [0, 1] }];
  const body = (n: number): Buffer => big(longChat({ messages: [...(longChat().messages as unknown[]), { role: 'user', content: `question ${n}` }] }));
  const taught = body(0);
  await readRequest('chat', taught, policy, { pool: p });
  const r0 = await p.tokenize({ source: 'bytes', endpoint: 'chat', body: taught, score, ids: false, model: 'm' });
  assert.ok(r0.ok);
  const keys = r0.scored[0]?.keys ?? new BigUint64Array(0);
  index.add(0, keys.slice(0, 20));
  index.add(1, keys.slice(0, 10));
  const raw = body(1);
  await readRequest('chat', raw, policy, { pool: p });
  // After the parse: slot 0 gains blocks, slot 1 loses one of its run.
  index.add(0, keys.slice(20, 30));
  index.remove(1, keys.slice(4, 5));
  const r = await p.tokenize({ source: 'bytes', endpoint: 'chat', body: raw, score, ids: false, model: 'm' });
  assert.equal(p.stats.aheadTokenizes, 1);
  assert.ok(r.ok);
  assert.deepEqual(r.scored[0]?.leading, new IndexReader(index.buffer).leadingBlocks(r.scored[0]?.keys ?? [], [0, 1]));
  assert.deepEqual(r.scored[0]?.leading, [30, 4]);
});

void test('parse tokenizes ahead only what the router asks again: other groups, or ids wanted, take a trip', async (t) => {
  const p = pool(t, new ClusterIndex({ capacityBlocks: 1_000 }));
  const policy = defaultRequestPolicy;
  const taught = big(longChat());
  await readRequest('chat', taught, policy, { pool: p });
  await p.tokenize({ source: 'bytes', endpoint: 'chat', body: taught, score: [{ hash: o, slots: [0] }], ids: false, model: 'm' });
  for (const ask of [{ score: [{ hash: o, slots: [0, 1] }], ids: false }, { score: [{ hash: o, slots: [0] }], ids: true }]) {
    const raw = big(longChat({ temperature: 0.5 }));
    await readRequest('chat', raw, policy, { pool: p });
    const r = await p.tokenize({ source: 'bytes', endpoint: 'chat', body: raw, ...ask, model: 'm' });
    assert.ok(r.ok);
    assert.equal(r.tokens !== undefined, ask.ids);
  }
  // A tokenize that teaches the pool other groups while a parse is under way: the parse's answer
  // ahead was asked with the groups sent, and is not taken for the new ones.
  const raw = big(longChat({ temperature: 0.7 }));
  const parsing = readRequest('chat', raw, policy, { pool: p });
  const wider = [{ hash: o, slots: [0, 1, 2] }];
  await p.tokenize({ source: 'bytes', endpoint: 'chat', body: taught, score: wider, ids: false, model: 'm' });
  await parsing;
  const r = await p.tokenize({ source: 'bytes', endpoint: 'chat', body: raw, score: wider, ids: false, model: 'm' });
  assert.ok(r.ok && r.scored[0]?.leading.length === 3);
  assert.equal(p.stats.aheadTokenizes, 0);
});

void test('parse tokenizes ahead for a model only while its answers are taken: left untaken 4 times, parses stop until a tokenize says how again', async (t) => {
  const p = pool(t, new ClusterIndex({ capacityBlocks: 1_000 }));
  const policy = defaultRequestPolicy;
  const score = [{ hash: o, slots: [0] }];
  const taught = big(longChat());
  await readRequest('chat', taught, policy, { pool: p });
  await p.tokenize({ source: 'bytes', endpoint: 'chat', body: taught, score, ids: false, model: 'm' });
  for (let i = 0; i < 6; i++) await readRequest('chat', big(longChat({ temperature: i / 10 })), policy, { pool: p });
  assert.equal(p.stats.aheadParses, 4);
  await p.tokenize({ source: 'bytes', endpoint: 'chat', body: taught, score, ids: false, model: 'm' });
  const raw = big(longChat({ temperature: 1 }));
  await readRequest('chat', raw, policy, { pool: p });
  assert.equal(p.stats.aheadParses, 5);
  const r = await p.tokenize({ source: 'bytes', endpoint: 'chat', body: raw, score, ids: false, model: 'm' });
  assert.ok(r.ok);
  assert.equal(p.stats.aheadTokenizes, 1);
});

void test('parse tokenizes ahead with the body\'s own cache_salt, as the router hashes it, whichever request taught the groups', async (t) => {
  const p = pool(t, new ClusterIndex({ capacityBlocks: 1_000 }));
  const policy = defaultRequestPolicy;
  const taught = big(longChat({ cache_salt: 'tenant-a' }));
  await readRequest('chat', taught, policy, { pool: p });
  await p.tokenize({ source: 'bytes', endpoint: 'chat', body: taught, score: [{ hash: { ...o, cacheSalt: 'tenant-a' }, slots: [0] }], ids: false, model: 'm' });
  for (const salt of ['tenant-b', undefined]) {
    const raw = big(longChat(salt === undefined ? {} : { cache_salt: salt }));
    await readRequest('chat', raw, policy, { pool: p });
    const hash: HashOptions = salt === undefined ? o : { ...o, cacheSalt: salt };
    const before = p.stats.aheadTokenizes;
    const r = await p.tokenize({ source: 'bytes', endpoint: 'chat', body: raw, score: [{ hash, slots: [0] }], ids: false, model: 'm' });
    assert.equal(p.stats.aheadTokenizes, before + 1, String(salt));
    const trip = await p.tokenize({ source: 'bytes', endpoint: 'chat', body: raw, score: [{ hash, slots: [0] }], ids: false, model: 'm' });
    assert.ok(r.ok && trip.ok);
    assert.deepEqual([...(r.scored[0]?.keys ?? [])], [...(trip.scored[0]?.keys ?? [])], 'keys salted as the router asked');
  }
});
