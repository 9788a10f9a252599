// The engine's chat stream written as each protocol's event sequence: reasoning, then text, then a
// tool call, each its own item or block, closed before the next opens; the end says why it ended.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { MemoryResponseStore, messagesTurn, responsesTurn, type ApiTurn } from '../../src/apis/index.js';

const chunk = (delta: Record<string, unknown>, finish: string | null = null, stop: string | null = null): unknown => ({
  choices: [{ index: 0, delta, finish_reason: finish, stop_reason: stop }],
});
const usage = { choices: [], usage: { prompt_tokens: 100, completion_tokens: 7, prompt_tokens_details: { cached_tokens: 64 } } };

async function play(turn: ApiTurn, chunks: readonly unknown[]): Promise<{ type: string; data: Record<string, unknown> }[]> {
  let text = chunks.map((c) => turn.event(c)).join('');
  text += turn.event(undefined) + (await turn.end());
  return text
    .split('\n\n')
    .filter((e) => e !== '')
    .map((e) => {
      const [head = '', data = ''] = e.split('\n');
      return { type: head.replace('event: ', ''), data: JSON.parse(data.replace('data: ', '')) as Record<string, unknown> };
    });
}

const answer = [
  chunk({ role: 'assistant', reasoning: 'think' }),
  chunk({ reasoning: ' more' }),
  chunk({ content: 'Hi' }),
  chunk({ tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"a":' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: '1}' } }] }),
];

test('responses stream: reasoning, message and call items in order, and the response stored whole', async () => {
  const store = new MemoryResponseStore({ maxEntries: 10, maxBytes: 1 << 20 });
  const turn = await responsesTurn({ model: 'm', input: 'q', stream: true }, { store, owner: 'k', retentionMs: 60_000 });
  const events = await play(turn, [...answer, chunk({}, 'length'), usage]);
  assert.deepEqual(
    events.map((e) => e.type),
    [
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.reasoning_text.delta',
      'response.reasoning_text.delta',
      'response.reasoning_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.incomplete',
    ],
  );
  assert.deepEqual(events.map((e) => e.data.sequence_number), events.map((_, i) => i));
  const last = events.at(-1)?.data.response as { id: string; status: string; output: { type: string }[]; usage: { input_tokens_details: { cached_tokens: number } } };
  assert.equal(last.status, 'incomplete');
  assert.deepEqual(last.output.map((o) => o.type), ['reasoning', 'message', 'function_call']);
  assert.equal(last.usage.input_tokens_details.cached_tokens, 64);
  const stored = await store.get('k', last.id);
  const messages = (JSON.parse(stored?.body ?? '{}') as { messages: unknown[] }).messages;
  assert.deepEqual(messages.at(-1), { role: 'assistant', content: 'Hi', reasoning: 'think more', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }] });
});

test('messages stream: thinking, text and tool_use blocks, a stop sequence named, cached tokens apart', async () => {
  const turn = messagesTurn({ model: 'm', max_tokens: 9, stream: true, stop_sequences: ['END'], messages: [{ role: 'user', content: 'q' }] });
  const events = await play(turn, [...answer, chunk({}, 'stop', 'END'), usage]);
  assert.deepEqual(
    events.map((e) => [e.type, (e.data.content_block as { type?: string } | undefined)?.type ?? (e.data.delta as { type?: string } | undefined)?.type ?? '']),
    [
      ['message_start', ''],
      ['content_block_start', 'thinking'],
      ['content_block_delta', 'thinking_delta'],
      ['content_block_delta', 'thinking_delta'],
      ['content_block_stop', ''],
      ['content_block_start', 'text'],
      ['content_block_delta', 'text_delta'],
      ['content_block_stop', ''],
      ['content_block_start', 'tool_use'],
      ['content_block_delta', 'input_json_delta'],
      ['content_block_delta', 'input_json_delta'],
      ['content_block_stop', ''],
      ['message_delta', ''],
      ['message_stop', ''],
    ],
  );
  const delta = events.at(-2)?.data as { delta: unknown; usage: unknown };
  assert.deepEqual(delta.delta, { stop_reason: 'stop_sequence', stop_sequence: 'END' });
  assert.deepEqual(delta.usage, { input_tokens: 36, output_tokens: 7, cache_read_input_tokens: 64, cache_creation_input_tokens: 0 });
});
