// Prefill/decode disaggregation with sims in both roles, each behind a recording proxy: the NIXL
// protocol's fields as they went on the wire, the skip rule, the fallbacks, usage counted once, and
// the second turn routed to the decode and prefill replicas that cached the first.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { request } from 'undici';
import { nixlPrefillParams } from '../../src/upstream/index.js';
import type { Tapped } from '../support/wire-tap.js';
import { waitFor } from '../support/wait.js';
import { cluster, history, metric } from './sim-cluster.js';

interface Answer {
  readonly status: number;
  readonly reqId: string;
  readonly replica: string;
  readonly receipt: string;
  readonly text: string;
}

// One chat through the gateway; streamed with usage, as a client would ask for a long answer.
async function ask(url: URL, messages: unknown, extra: Record<string, unknown> = {}): Promise<Answer> {
  const res = await request(new URL('/v1/chat/completions', url), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'qwen3', messages, max_tokens: 6, stream: true, stream_options: { include_usage: true }, ...extra }),
    signal: AbortSignal.timeout(30_000),
  });
  return {
    status: res.statusCode,
    reqId: String(res.headers['x-request-id']),
    replica: String(res.headers['x-llmgw-replica']),
    receipt: String(res.headers['x-llmgw-receipt']),
    text: await res.body.text(),
  };
}

const generations = (seen: readonly Tapped[]): Tapped[] => seen.filter((s) => s.path === '/v1/chat/completions');

function usageOf(sse: string): { prompt_tokens: number; completion_tokens: number } | undefined {
  for (const line of sse.split('\n')) {
    if (!line.startsWith('data: {')) continue;
    const v = JSON.parse(line.slice(6)) as { usage?: { prompt_tokens: number; completion_tokens: number } | null };
    if (v.usage) return v.usage;
  }
  return undefined;
}

async function receiptOf(url: URL, reqId: string): Promise<{ winner: string; pd?: { outcome: string; decodeCachedTokens: number; prefill?: { replica: string; tier: string }; error?: string } }> {
  const res = await request(new URL(`/debug/receipts?id=${encodeURIComponent(reqId)}`, url), { signal: AbortSignal.timeout(5000) });
  assert.equal(res.statusCode, 200);
  return (await res.body.json()) as never;
}

void test('pd: the prefill goes with NIXL fields, one token and unstreamed; the decode gets its kv_transfer_params verbatim under the same X-Request-Id', async (t) => {
  const { gw, taps, replicas, registry } = await cluster(t, { roles: ['prefill', 'decode'], tap: true });
  const a = await ask(gw.url, history('wire', 3));
  assert.equal(a.status, 200, a.text);
  assert.equal(a.replica, 'b', 'the answer comes from the decode replica');
  const [p] = generations(taps.get('a')?.seen ?? []);
  const [d] = generations(taps.get('b')?.seen ?? []);
  assert.ok(p && d, 'one request reached each replica');
  const pb = p.body as Record<string, unknown>;
  const db = d.body as Record<string, unknown>;
  assert.deepEqual(pb.kv_transfer_params, nixlPrefillParams);
  assert.deepEqual([pb.max_tokens, pb.stream, 'stream_options' in pb], [1, false, false]);
  // The prefill's answer names the blocks, and the decode is handed exactly that.
  const returned = (JSON.parse(p.answer) as { kv_transfer_params: Record<string, unknown> }).kv_transfer_params;
  assert.equal(returned.do_remote_prefill, true);
  assert.ok(Array.isArray(returned.remote_block_ids) && returned.remote_block_ids.length > 0);
  assert.deepEqual(db.kv_transfer_params, returned);
  assert.deepEqual([db.max_tokens, db.stream], [6, true]);
  assert.deepEqual(db.messages, pb.messages, 'both halves carry the same prompt');
  assert.equal(p.headers['x-request-id'], a.reqId);
  assert.equal(d.headers['x-request-id'], a.reqId);
  // Usage counted once: the client sees the decode's, not the prefill's one token added.
  const usage = usageOf(a.text);
  assert.equal(usage?.completion_tokens, 6);
  // The decode replica read the blocks from the prefill replica and computed only the last token.
  const decode = replicas.find((r) => r.view.id === 'b');
  assert.ok(decode);
  const transfers = (await (await request(new URL('/sim/kv-transfers', decode.sim.url))).body.json()) as { data: { state: string; promptTokens: number }[] };
  assert.deepEqual(transfers.data.map((x) => [x.state, x.promptTokens]), [['received', usage?.prompt_tokens]]);
  const accounts = (await (await request(new URL('/sim/requests', decode.sim.url))).body.json()) as { data: { prefillComputedTokens: number }[] };
  assert.deepEqual(accounts.data.map((x) => x.prefillComputedTokens), [1]);
  const r = await receiptOf(gw.url, a.reqId);
  assert.deepEqual([r.winner, r.pd?.outcome, r.pd?.prefill?.replica], ['b', 'sent', 'a']);
  assert.ok(a.receipt.includes('pd=sent:a'), a.receipt);
  assert.equal(metric(await registry.metrics(), 'llmgw_gateway_prefill_hops_total{outcome="sent"}'), 1);
});

void test('pd: a decode replica caching all but pd_skip_prefill_tokens of the prompt gets it whole, and the receipt says why', async (t) => {
  const { gw, taps, registry, settle } = await cluster(t, { roles: ['prefill', 'decode'], tap: true });
  const first = await ask(gw.url, history('skip', 3));
  assert.equal(first.status, 200, first.text);
  await settle();
  await waitFor(() => (gw.writer?.size ?? 0) > 0, { what: 'the decode replica\'s blocks in the index' });
  // The same prompt again: the decode replica holds every full block of it.
  const again = await ask(gw.url, history('skip', 3));
  assert.equal(again.status, 200, again.text);
  assert.equal(again.replica, 'b');
  assert.equal(generations(taps.get('a')?.seen ?? []).length, 1, 'no second prefill hop');
  const sent = generations(taps.get('b')?.seen ?? [])[1];
  assert.ok(sent);
  assert.equal('kv_transfer_params' in (sent.body as object), false, 'the decode replica gets the request as the client sent it');
  const r = await receiptOf(gw.url, again.reqId);
  assert.equal(r.pd?.outcome, 'cached');
  assert.ok((r.pd?.decodeCachedTokens ?? 0) > 0);
  assert.equal(metric(await registry.metrics(), 'llmgw_gateway_prefill_hops_total{outcome="cached"}'), 1);
});

void test('pd: a prefill replica without a connector, or a dead one, leaves the whole request to the decode replica', async (t) => {
  const { gw, replicas, registry } = await cluster(t, { roles: ['prefill', 'decode'], noConnector: ['a'], tap: true });
  const noParams = await ask(gw.url, history('fallback', 3));
  assert.equal(noParams.status, 200, noParams.text);
  assert.equal(usageOf(noParams.text)?.completion_tokens, 6);
  const r1 = await receiptOf(gw.url, noParams.reqId);
  assert.equal(r1.pd?.outcome, 'failed');
  assert.match(r1.pd?.error ?? '', /no kv_transfer_params/);
  await replicas.find((r) => r.view.id === 'a')?.sim.close();
  const dead = await ask(gw.url, history('dead', 3));
  assert.equal(dead.status, 200, dead.text);
  assert.equal(dead.replica, 'b');
  const r2 = await receiptOf(gw.url, dead.reqId);
  assert.equal(r2.pd?.outcome, 'failed');
  assert.equal(metric(await registry.metrics(), 'llmgw_gateway_prefill_hops_total{outcome="failed"}'), 2);
});

void test('pd: the second turn goes to the decode and the prefill replicas that cached the first', async (t) => {
  const { gw, settle } = await cluster(t, { roles: ['prefill', 'prefill', 'decode', 'decode'] });
  const turn1 = history('turns', 3);
  const first = await ask(gw.url, turn1);
  assert.equal(first.status, 200, first.text);
  const r1 = await receiptOf(gw.url, first.reqId);
  assert.equal(r1.pd?.outcome, 'sent');
  await settle();
  await waitFor(() => (gw.writer?.size ?? 0) > 0, { what: 'blocks in the index' });
  // The next turn adds a long message: more than the skip threshold is new, so it is prefilled again.
  const turn2 = [...turn1, { role: 'assistant', content: 'noted.' }, { role: 'user', content: 'and now a long new question about turns. '.repeat(20) }];
  const second = await ask(gw.url, turn2);
  assert.equal(second.status, 200, second.text);
  const r2 = await receiptOf(gw.url, second.reqId);
  assert.equal(r2.pd?.outcome, 'sent');
  assert.equal(r2.winner, r1.winner, 'decode where the first turn decoded');
  assert.deepEqual([r2.pd?.prefill?.replica, r2.pd?.prefill?.tier], [r1.pd?.prefill?.replica, 'precise'], 'prefill where the first turn was prefilled');
});
