// The translations' rules, one row each: what a Responses or Messages request becomes for the engine.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { messagesChat, messagesOfInput } from '../../src/apis/index.js';
import { RequestError } from '../../src/errors/index.js';

const inputRules = [
  { why: 'a string is one user turn', input: 'hi', want: [{ role: 'user', content: 'hi' }] },
  { why: 'developer instructions are a system turn', input: [{ role: 'developer', content: 'x' }], want: [{ role: 'system', content: 'x' }] },
  {
    why: 'several text parts stay parts, for the engine to join as it joins a chat\'s',
    input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'a' }, { type: 'input_text', text: 'b' }] }],
    want: [{ role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }],
  },
  {
    why: 'an answer\'s text and its calls are one assistant turn, its reasoning with it',
    input: [
      { type: 'reasoning', summary: [], content: [{ type: 'reasoning_text', text: 'think' }] },
      { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'let me look' }] },
      { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' },
      { type: 'function_call', call_id: 'c2', name: 'g', arguments: '{"a":1}' },
      { type: 'function_call_output', call_id: 'c1', output: 'one' },
    ],
    want: [
      {
        role: 'assistant',
        content: 'let me look',
        reasoning: 'think',
        tool_calls: [
          { id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } },
          { id: 'c2', type: 'function', function: { name: 'g', arguments: '{"a":1}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'c1', content: 'one' },
    ],
  },
];
for (const r of inputRules) test(`responses input: ${r.why}`, () => assert.deepEqual(messagesOfInput(r.input), r.want));

const refusals = [
  { why: 'an item reference (the gateway keeps conversations, not items)', input: [{ type: 'item_reference', id: 'x' }], param: 'input[0].type' },
  { why: 'an image', input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }], param: 'input[0].content[0].type' },
  { why: 'an unknown role', input: [{ role: 'robot', content: 'x' }], param: 'input[0].role' },
];
for (const r of refusals) {
  test(`responses input: refuses ${r.why}, naming it`, () => {
    assert.throws(() => messagesOfInput(r.input), (e: unknown) => e instanceof RequestError && e.param === r.param);
  });
}

test('messages: tool results come before the user\'s text, tool_use becomes a call, thinking reasoning', () => {
  const chat = messagesChat(
    {
      model: 'm',
      max_tokens: 10,
      system: [{ type: 'text', text: 'sys', cache_control: { type: 'ephemeral' } }],
      messages: [
        { role: 'user', content: 'q' },
        {
          role: 'assistant',
          content: [
            { type: 'thinking', thinking: 'hm', signature: 's' },
            { type: 'tool_use', id: 't1', name: 'f', input: { b: 1.5, a: [1] } },
          ],
        },
        { role: 'user', content: [{ type: 'text', text: 'and?' }, { type: 'tool_result', tool_use_id: 't1', content: [{ type: 'text', text: 'r' }] }] },
      ],
      tool_choice: { type: 'any', disable_parallel_tool_use: true },
      tools: [{ name: 'f', input_schema: { type: 'object' } }],
    },
    { counting: false },
  );
  assert.deepEqual(chat.messages, [
    { role: 'system', content: 'sys' },
    { role: 'user', content: 'q' },
    { role: 'assistant', content: null, reasoning: 'hm', tool_calls: [{ id: 't1', type: 'function', function: { name: 'f', arguments: '{"b":1.5,"a":[1]}' } }] },
    { role: 'tool', tool_call_id: 't1', content: 'r' },
    { role: 'user', content: 'and?' },
  ]);
  assert.equal(chat.tool_choice, 'required');
  assert.equal(chat.parallel_tool_calls, false);
  assert.deepEqual(chat.tools, [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }]);
});

test('messages: server tools, images and a missing max_tokens are refused, naming the field', () => {
  const base = { model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] };
  const cases = [
    { body: { ...base, tools: [{ type: 'web_search_20250305', name: 'web_search' }] }, param: 'tools[0].type' },
    { body: { ...base, messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] }, param: 'messages[0].content[0].type' },
    { body: { ...base, max_tokens: undefined }, param: 'max_tokens' },
    { body: { ...base, top_k: 0 }, param: 'top_k' },
    { body: { ...base, mcp_servers: [] }, param: 'mcp_servers' },
  ];
  for (const c of cases) assert.throws(() => messagesChat(c.body, { counting: false }), (e: unknown) => e instanceof RequestError && e.param === c.param, c.param);
});
