// The first follow-up of a conversation goes where its prefix is before the engine has said so: with
// the engines' KV events held back from the index, a chat's, a Responses chain's
// (previous_response_id) and a Messages conversation's second turn are routed by what the gateway
// itself recorded of the first (its predicted blocks), to the replica that answered it.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { request } from 'undici';
import { cluster } from './sim-cluster.js';

interface Routed {
  readonly replica: string;
  readonly route: string;
  readonly body: Record<string, unknown>;
}

async function post(url: URL, path: string, body: unknown): Promise<Routed> {
  const res = await request(new URL(path, url), {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(20_000),
  });
  const json = (await res.body.json()) as Record<string, unknown>;
  assert.equal(res.statusCode, 200, JSON.stringify(json));
  return { replica: String(res.headers['x-llmgw-replica']), route: String(res.headers['x-llmgw-route']), body: json };
}

const opening = (api: string): string => `the first question of a ${api} conversation, asked at length so it fills blocks. `.repeat(10);

const rows: { api: string; turns: (url: URL) => Promise<[Routed, Routed]> }[] = [
  {
    api: 'chat',
    turns: async (url) => {
      const messages = [{ role: 'user', content: opening('chat') }];
      const first = await post(url, '/v1/chat/completions', { model: 'qwen3', messages, max_tokens: 8 });
      const answer = (first.body.choices as { message: { content: string } }[])[0]?.message.content ?? '';
      const next = await post(url, '/v1/chat/completions', { model: 'qwen3', messages: [...messages, { role: 'assistant', content: answer }, { role: 'user', content: 'and then?' }], max_tokens: 8 });
      return [first, next];
    },
  },
  {
    api: 'responses',
    turns: async (url) => {
      const first = await post(url, '/v1/responses', { model: 'qwen3', input: opening('responses'), max_output_tokens: 8 });
      const next = await post(url, '/v1/responses', { model: 'qwen3', input: 'and then?', previous_response_id: first.body.id, max_output_tokens: 8 });
      return [first, next];
    },
  },
  {
    api: 'messages',
    turns: async (url) => {
      const messages = [{ role: 'user', content: opening('messages') }];
      const first = await post(url, '/v1/messages', { model: 'qwen3', messages, max_tokens: 8 });
      const answer = (first.body.content as { type: string; text?: string }[]).map((c) => c.text ?? '').join('');
      const next = await post(url, '/v1/messages', { model: 'qwen3', messages: [...messages, { role: 'assistant', content: answer }, { role: 'user', content: 'and then?' }], max_tokens: 8 });
      return [first, next];
    },
  },
];

for (const r of rows) {
  void test(`first follow-up (${r.api}): routed to the first answer's replica by its prefix before any KV event reached the index`, async (t) => {
    const { gw } = await cluster(t, { holdKvEvents: true });
    const [first, next] = await r.turns(gw.url);
    assert.deepEqual([next.route, next.replica], ['precise', first.replica]);
  });
}
