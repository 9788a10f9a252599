// `llmgw serve` with its agent starting a sim engine, spoken to by the agent clients unchanged:
// OpenAI's Responses (a previous_response_id chain, streamed) and Anthropic's Messages (streamed,
// countTokens), all answered by an engine that serves only chat completions.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { simConfig, startServe } from '../support/serve.js';

void test('llmgw serve: the openai Responses and Anthropic Messages clients through a sim replica', { timeout: 90_000 }, async (t) => {
  const served = await startServe(t, (p) => simConfig(p, { count: 1 }));
  const base = `http://127.0.0.1:${served.port}`;
  const openai = new OpenAI({ apiKey: 'none', baseURL: `${base}/v1`, maxRetries: 0, timeout: 20_000 });
  const first = await openai.responses.create({ model: 'qwen3', input: 'hello', max_output_tokens: 4 });
  assert.ok(first.output_text.length > 0);
  const stream = openai.responses.stream({ model: 'qwen3', input: 'and again', previous_response_id: first.id, max_output_tokens: 4 });
  const second = await stream.finalResponse();
  assert.ok(second.output_text.length > 0);
  assert.ok((second.usage?.input_tokens ?? 0) > (first.usage?.input_tokens ?? 0), 'the second turn carries the first');

  const anthropic = new Anthropic({ apiKey: 'none', baseURL: base, maxRetries: 0, timeout: 20_000 });
  const m = await anthropic.messages.stream({ model: 'qwen3', max_tokens: 4, system: 'Be brief.', messages: [{ role: 'user', content: 'hello' }] }).finalMessage();
  assert.ok(m.content.some((b) => b.type === 'text' && b.text.length > 0));
  const counted = await anthropic.messages.countTokens({ model: 'qwen3', system: 'Be brief.', messages: [{ role: 'user', content: 'hello' }] });
  assert.equal(counted.input_tokens, m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0));

  assert.equal(await served.stop(), 0);
});
