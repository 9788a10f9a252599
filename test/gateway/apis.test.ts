// The agent APIs through the gateway, driven by the official clients unchanged: OpenAI's Responses
// (openai, and the Vercel AI SDK's responses provider) and Anthropic's Messages (@anthropic-ai/sdk,
// and the AI SDK's Anthropic provider), against fake engines that serve only chat completions.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, jsonSchema, streamText, tool } from 'ai';
import OpenAI from 'openai';
import { Registry } from 'prom-client';
import { request } from 'undici';
import type { GatewayConfig } from '../../src/gateway/index.js';
import type { ReplicaView } from '../../src/routing/index.js';
import { gatewayDefaults, hashApiKey, startGateway } from '../../src/gateway/index.js';
import { fakeCallArguments, startFakeEngine } from './fake-engine.js';

const keyA = 'sk-team-a';
const keyB = 'sk-team-b';

async function setup(t: import('node:test').TestContext) {
  const engine = await startFakeEngine({ id: 'r0', cachedTokens: (b) => (Array.isArray(b.messages) ? (b.messages.length - 1) * 4 : 0) });
  t.after(() => engine.close());
  const view: ReplicaView = {
    id: 'r0',
    node: 'local',
    model: 'm',
    adapters: [],
    url: engine.url,
    apiKey: undefined,
    generation: 1,
    kvEvents: false,
    blockSizeTokens: 16,
    hashSeed: '0',
    dataParallelSize: 1,
  };
  const config: GatewayConfig = {
    ...gatewayDefaults,
    port: 0,
    apiKeys: [
      { name: 'a', sha256: hashApiKey(keyA), requestsPerMinute: 0, tokensPerMinute: 0, admin: false },
      { name: 'b', sha256: hashApiKey(keyB), requestsPerMinute: 0, tokensPerMinute: 0, admin: false },
    ],
    router: { ...gatewayDefaults.router, loadPollIntervalMs: 0 },
  };
  const gw = await startGateway({ config, directory: { ready: (m) => (m === 'm' ? [view] : []), models: () => ['m'] }, registry: new Registry() });
  t.after(() => gw.close());
  const v1 = new URL('/v1', gw.url).href;
  const openai = new OpenAI({ apiKey: keyA, baseURL: v1, maxRetries: 0, timeout: 10_000 });
  const anthropic = new Anthropic({ apiKey: keyA, baseURL: gw.url.href.replace(/\/$/, ''), maxRetries: 0, timeout: 10_000 });
  const last = (): Record<string, unknown> => {
    const s = engine.seen.at(-1);
    assert.ok(s !== undefined, 'the engine saw a request');
    return s.body;
  };
  return { gw, engine, v1, openai, anthropic, last };
}

const weather = {
  type: 'function' as const,
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'number' } }, required: ['city'] },
  strict: false,
};

test('responses: openai responses.create answers from a chat engine, with usage and cached tokens', async (t) => {
  const { openai, last } = await setup(t);
  const r = await openai.responses.create({ model: 'm', instructions: 'Be brief.', input: 'Hi', max_output_tokens: 50 });
  assert.equal(r.output_text, 'Hello from r0');
  assert.equal(r.status, 'completed');
  assert.ok((r.usage?.input_tokens ?? 0) > 0);
  assert.equal(r.usage?.input_tokens_details.cached_tokens, 4);
  assert.deepEqual(last().messages, [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Hi' },
  ]);
  assert.equal(last().max_tokens, 50);
});

test('responses: streaming gives the Responses event sequence the client assembles', async (t) => {
  const { openai } = await setup(t);
  const stream = openai.responses.stream({ model: 'm', input: 'Hi' });
  const types: string[] = [];
  for await (const e of stream) types.push(e.type);
  const final = await stream.finalResponse();
  assert.equal(final.output_text, 'Hello from r0');
  assert.deepEqual(types, [
    'response.created',
    'response.in_progress',
    'response.output_item.added',
    'response.content_part.added',
    'response.output_text.delta',
    'response.output_text.delta',
    'response.output_text.delta',
    'response.output_text.done',
    'response.content_part.done',
    'response.output_item.done',
    'response.completed',
  ]);
  assert.ok((final.usage?.output_tokens ?? 0) > 0);
});

test('responses: a 10-turn previous_response_id chain rebuilds the whole conversation for the engine', async (t) => {
  const { openai, last } = await setup(t);
  let previous: string | undefined;
  for (let turn = 1; turn <= 10; turn++) {
    const r = await openai.responses.create({ model: 'm', instructions: 'Be brief.', input: `question ${turn}`, previous_response_id: previous, stream: false });
    previous = r.id;
  }
  const messages = last().messages as { role: string; content: string }[];
  assert.equal(messages.length, 1 + 10 + 9);
  assert.deepEqual(messages[0], { role: 'system', content: 'Be brief.' });
  assert.deepEqual(messages.slice(-3), [
    { role: 'user', content: 'question 9' },
    { role: 'assistant', content: 'Hello from r0' },
    { role: 'user', content: 'question 10' },
  ]);
});

test('responses: a function call round trip, streamed and not', async (t) => {
  const { openai, last } = await setup(t);
  for (const stream of [false, true]) {
    const first = stream
      ? await openai.responses.stream({ model: 'm', input: 'Weather in Paris?', tools: [weather] }).finalResponse()
      : await openai.responses.create({ model: 'm', input: 'Weather in Paris?', tools: [weather] });
    const call = first.output.find((o) => o.type === 'function_call');
    assert.ok(call?.type === 'function_call');
    assert.equal(call.name, 'get_weather');
    assert.equal(call.arguments, fakeCallArguments.join(''));
    assert.deepEqual(last().tools, [{ type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: weather.parameters, strict: false } }]);
    const second = await openai.responses.create({
      model: 'm',
      previous_response_id: first.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temp": 21}' }],
      tools: [weather],
    });
    assert.equal(second.output_text, 'Hello from r0');
    assert.deepEqual((last().messages as unknown[]).slice(-2), [
      { role: 'assistant', content: null, tool_calls: [{ id: call.call_id, type: 'function', function: { name: 'get_weather', arguments: call.arguments } }] },
      { role: 'tool', tool_call_id: call.call_id, content: '{"temp": 21}' },
    ]);
  }
});

test('responses: stored responses belong to their key, and GET and DELETE serve them', async (t) => {
  const { openai, v1 } = await setup(t);
  const r = await openai.responses.create({ model: 'm', input: 'Hi' });
  assert.equal((await openai.responses.retrieve(r.id)).output_text, 'Hello from r0');
  const other = new OpenAI({ apiKey: keyB, baseURL: v1, maxRetries: 0 });
  await assert.rejects(other.responses.retrieve(r.id), (e: unknown) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(other.responses.create({ model: 'm', input: 'x', previous_response_id: r.id }), (e: unknown) => e instanceof OpenAI.NotFoundError);
  await openai.responses.delete(r.id);
  await assert.rejects(openai.responses.retrieve(r.id), (e: unknown) => e instanceof OpenAI.NotFoundError);
  const unstored = await openai.responses.create({ model: 'm', input: 'Hi', store: false });
  await assert.rejects(openai.responses.retrieve(unstored.id), (e: unknown) => e instanceof OpenAI.NotFoundError);
});

test('responses: an unknown or unsupported field is a 400 naming it', async (t) => {
  const { v1 } = await setup(t);
  const cases = [
    { body: { model: 'm', input: 'x', frobnicate: 1 }, param: 'frobnicate' },
    { body: { model: 'm', input: 'x', tools: [{ type: 'web_search' }] }, param: 'tools[0].type' },
    { body: { model: 'm', input: [{ type: 'message', role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] }, param: 'input[0].content[0].type' },
    { body: { model: 'm', input: 'x', truncation: 'auto' }, param: 'truncation' },
  ];
  for (const c of cases) {
    const res = await request(`${v1}/responses`, { method: 'POST', headers: { authorization: `Bearer ${keyA}`, 'content-type': 'application/json' }, body: JSON.stringify(c.body) });
    const body = (await res.body.json()) as { error: { param: string; message: string } };
    assert.equal(res.statusCode, 400, JSON.stringify(body));
    assert.equal(body.error.param, c.param);
    assert.ok(body.error.message.startsWith(c.param));
  }
});

const weatherTool = {
  name: 'get_weather',
  description: 'The weather in a city',
  input_schema: { type: 'object' as const, properties: { city: { type: 'string' } }, required: ['city'] },
};

test('messages: anthropic messages.create with x-api-key, system and stop sequences', async (t) => {
  const { anthropic, last } = await setup(t);
  const m = await anthropic.messages.create({ model: 'm', max_tokens: 64, system: 'Be brief.', stop_sequences: ['END'], messages: [{ role: 'user', content: 'Hi' }] });
  assert.deepEqual(m.content, [{ type: 'text', text: 'Hello from r0' }]);
  assert.equal(m.stop_reason, 'end_turn');
  assert.equal(m.usage.cache_read_input_tokens, 4);
  assert.ok(m.usage.input_tokens > 0);
  assert.deepEqual(last().messages, [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Hi' },
  ]);
  assert.deepEqual(last().stop, ['END']);
});

test('messages: streaming events in Anthropic\'s order, assembled by the client', async (t) => {
  const { anthropic } = await setup(t);
  const stream = anthropic.messages.stream({ model: 'm', max_tokens: 64, system: 'Be brief.', messages: [{ role: 'user', content: 'Hi' }] });
  const types: string[] = [];
  stream.on('streamEvent', (e) => types.push(e.type));
  const m = await stream.finalMessage();
  assert.deepEqual(m.content.map((b) => (b.type === 'text' ? b.text : b.type)), ['Hello from r0']);
  assert.deepEqual(types, ['message_start', 'content_block_start', 'content_block_delta', 'content_block_delta', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
  assert.ok(m.usage.input_tokens > 0);
  assert.equal(m.usage.cache_read_input_tokens, 4);
});

test('messages: a tool use round trip, streamed and not', async (t) => {
  const { anthropic, last } = await setup(t);
  for (const stream of [false, true]) {
    const params = { model: 'm', max_tokens: 64, tools: [weatherTool], messages: [{ role: 'user' as const, content: 'Weather in Paris?' }] };
    const first = stream ? await anthropic.messages.stream(params).finalMessage() : await anthropic.messages.create(params);
    assert.equal(first.stop_reason, 'tool_use');
    const use = first.content.find((b) => b.type === 'tool_use');
    assert.ok(use?.type === 'tool_use');
    assert.deepEqual(use.input, JSON.parse(fakeCallArguments.join('')));
    const second = await anthropic.messages.create({
      ...params,
      messages: [...params.messages, { role: 'assistant', content: first.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '21 C' }] }],
    });
    assert.equal(second.stop_reason, 'end_turn');
    assert.deepEqual((last().messages as unknown[]).slice(-2), [
      { role: 'assistant', content: null, tool_calls: [{ id: use.id, type: 'function', function: { name: 'get_weather', arguments: JSON.stringify(use.input) } }] },
      { role: 'tool', tool_call_id: use.id, content: '21 C' },
    ]);
  }
});

test('messages: countTokens asks the engine for the chat the request becomes', async (t) => {
  const { anthropic, engine } = await setup(t);
  const n = await anthropic.messages.countTokens({ model: 'm', system: 'Be brief.', messages: [{ role: 'user', content: 'Hi' }] });
  assert.equal(n.input_tokens, Buffer.byteLength('<system>Be brief.<user>Hi<assistant>'));
  assert.equal(engine.tokenizeCalls, 1);
});

test('messages: failures come in Anthropic\'s error shape', async (t) => {
  const { gw, anthropic } = await setup(t);
  const wrongKey = new Anthropic({ apiKey: 'sk-wrong', baseURL: gw.url.href.replace(/\/$/, ''), maxRetries: 0 });
  await assert.rejects(wrongKey.messages.create({ model: 'm', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }), (e: unknown) => e instanceof Anthropic.AuthenticationError);
  const res = await request(new URL('/v1/messages', gw.url), {
    method: 'POST',
    headers: { 'x-api-key': keyA, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', max_tokens: 8, messages: [{ role: 'user', content: 'x' }], thinking: { type: 'enabled', budget_tokens: 100 } }),
  });
  assert.equal(res.statusCode, 400);
  const body = (await res.body.json()) as { type: string; error: { type: string; message: string } };
  assert.equal(body.type, 'error');
  assert.equal(body.error.type, 'invalid_request_error');
  assert.match(body.error.message, /^thinking\.type/);
  await assert.rejects(anthropic.messages.create({ model: 'nope', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }), (e: unknown) => e instanceof Anthropic.NotFoundError);
});

test('ai sdk: the OpenAI responses provider and the Anthropic provider, text, streams and tools', async (t) => {
  const { v1 } = await setup(t);
  const openai = createOpenAI({ apiKey: keyA, baseURL: v1 });
  const anthropic = createAnthropic({ apiKey: keyA, baseURL: v1 });
  for (const model of [openai.responses('m'), anthropic('m')]) {
    const text = await generateText({ model, prompt: 'Hi', maxRetries: 0 });
    assert.equal(text.text, 'Hello from r0');
    assert.ok((text.usage.inputTokens ?? 0) > 0);
    const streamed = streamText({ model, prompt: 'Hi', maxRetries: 0 });
    assert.equal(await streamed.text, 'Hello from r0');
    const called = await generateText({
      model,
      prompt: 'Weather in Paris?',
      maxRetries: 0,
      tools: { get_weather: tool({ description: 'The weather in a city', inputSchema: jsonSchema<{ city: string }>({ type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }) }) },
    });
    assert.deepEqual(called.toolCalls.map((c) => [c.toolName, c.input]), [['get_weather', JSON.parse(fakeCallArguments.join(''))]]);
  }
});
