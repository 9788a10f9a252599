// A Responses conversation sent one turn at a time (previous_response_id) is a chat to the router:
// from its second turn it is routed precise to the replica holding its prefix, and the engine
// confirms the earlier turns cached. Real parts: sim engines publishing KV events, the index, the pool.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import OpenAI from 'openai';
import { cluster } from './sim-cluster.js';

void test('responses precise: a 10-turn previous_response_id chain is routed precise from its second turn, its earlier turns cached', async (t) => {
  const { gw, settle } = await cluster(t);
  const client = new OpenAI({ apiKey: 'none', baseURL: new URL('/v1', gw.url).href, maxRetries: 0, timeout: 20_000 });
  const instructions = 'You are a careful research assistant who answers in full sentences. '.repeat(6);
  let previous: string | undefined;
  const turns: { route: string; replica: string; input: number; cached: number }[] = [];
  for (let turn = 1; turn <= 10; turn++) {
    const { data, response } = await client.responses
      .create({ model: 'qwen3', instructions, input: `Question ${turn}: tell me more about topic ${turn}. `.repeat(4), previous_response_id: previous, max_output_tokens: 8 })
      .withResponse();
    previous = data.id;
    turns.push({
      route: response.headers.get('x-llmgw-route') ?? '',
      replica: response.headers.get('x-llmgw-replica') ?? '',
      input: data.usage?.input_tokens ?? 0,
      cached: data.usage?.input_tokens_details.cached_tokens ?? 0,
    });
    // The engine's KV events reach the index before the next turn is routed.
    await settle();
  }
  const first = turns[0];
  assert.ok(first !== undefined);
  for (const [i, r] of turns.slice(1).entries()) {
    assert.deepEqual([r.route, r.replica], ['precise', first.replica], `turn ${i + 2} goes where its conversation is`);
    assert.ok(r.cached > 0, `turn ${i + 2}: the engine reports its earlier turns cached`);
  }
  const later = turns.slice(1);
  const share = later.reduce((s, r) => s + r.cached, 0) / later.reduce((s, r) => s + r.input, 0);
  console.log(`responses precise: turns 2-10 routed precise; ${(share * 100).toFixed(1)}% of their input tokens cached (${JSON.stringify(turns.map((r) => [r.input, r.cached]))})`);
});
