// Generated chat requests for the tokenize property tests: seeded, so a failure names a seed that
// reproduces it. Multi-turn, system prompts, tools with tool calls and results, unicode of many
// scripts (combining marks, emoji sequences, right-to-left), long documents, and text that looks
// like the template's own special tokens.
import { prng } from '../../src/e2e/index.js';

const pieces = [
  'The quick brown fox jumps over the lazy dog.',
  'naïve café résumé',
  'e\u0301 and a\u0308 (combining marks)',
  '日本語のテキストと中文文本',
  'emoji 👩‍👩‍👧 🚀🦊 ✨',
  'עברית ו-العربية',
  '  leading spaces\t\ttabs\n\nblank lines\r\n',
  'function f(x) { return x * 2; }',
  '12345.678 and 1,000,000',
  "it's we're they'll I'd",
  '<think>reasoning-looking text</think>',
  'a literal <|im_end|> inside content',
  '```python\nprint("hi")\n```',
  '    ',
  '',
];

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Weather for a city, in °C.',
      parameters: { type: 'object', properties: { city: { type: 'string', description: 'e.g. Zürich' } }, required: ['city'] },
    },
  },
  { type: 'function', function: { name: 'search', description: 'Search the docs.', parameters: { type: 'object', properties: { q: { type: 'string' } } } } },
];

/** One chat request body as a client sends it. */
export type ChatBody = Record<string, unknown> & { messages: Record<string, unknown>[] };

function text(r: () => number, words: number): string {
  let s = '';
  for (let i = 0; i < words; i++) s += (pieces[Math.floor(r() * pieces.length)] ?? '') + (r() < 0.8 ? ' ' : '\n');
  return s;
}

/** A conversation of up to `maxTurns` messages after the optional system prompt. */
export function conversation(seed: number, o: { maxTurns?: number; longDocChars?: number } = {}): ChatBody {
  const r = prng(seed);
  const messages: Record<string, unknown>[] = [];
  if (r() < 0.6) messages.push({ role: 'system', content: text(r, 3 + Math.floor(r() * 10)) });
  const withTools = r() < 0.3;
  const turns = 1 + Math.floor(r() * (o.maxTurns ?? 8));
  for (let i = 0; i < turns; i++) {
    let content = text(r, 1 + Math.floor(r() * 12));
    if (i === 0 && (o.longDocChars ?? 0) > 0) content = `Summarise this document:\n${text(r, 40).repeat(Math.ceil((o.longDocChars ?? 0) / 800))}`;
    // Parts instead of a string: vLLM joins text parts with a newline.
    messages.push({ role: 'user', content: r() < 0.15 ? [{ type: 'text', text: content }, { type: 'text', text: text(r, 2) }] : content });
    if (i === turns - 1 && r() < 0.7) break;
    if (withTools && r() < 0.5) {
      messages.push({ role: 'assistant', content: '', tool_calls: [{ id: `call_${i}`, type: 'function', function: { name: 'get_weather', arguments: JSON.stringify({ city: 'Zürich' }) } }] });
      messages.push({ role: 'tool', tool_call_id: `call_${i}`, content: JSON.stringify({ temp_c: 21 + i, sky: 'clear ☀' }) });
    }
    messages.push({ role: 'assistant', content: text(r, 1 + Math.floor(r() * 12)) });
  }
  const body: ChatBody = { model: 'qwen3', messages };
  if (withTools) body.tools = tools;
  const last = messages.at(-1);
  if (last?.role === 'assistant' && r() < 0.5) {
    body.add_generation_prompt = false;
    body.continue_final_message = true;
    // Something to continue: transformers cuts after the final message's text, which must be there.
    last.content = `${typeof last.content === 'string' ? last.content : ''}To continue,`;
  }
  if (r() < 0.3) body.chat_template_kwargs = { enable_thinking: r() < 0.5 };
  return body;
}

/** The same conversation as it grows: one request per turn, each resending everything before. */
export function turnsOf(body: ChatBody): ChatBody[] {
  const out: ChatBody[] = [];
  for (let n = 1; n <= body.messages.length; n++) {
    const messages = body.messages.slice(0, n);
    if (messages.at(-1)?.role !== 'user' && n < body.messages.length) continue;
    const b: ChatBody = { ...body, messages };
    if (n < body.messages.length) {
      delete b.continue_final_message;
      delete b.add_generation_prompt;
    }
    out.push(b);
  }
  return out;
}
