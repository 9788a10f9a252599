// A llama.cpp model tokenized by the gateway from its GGUF, checked against the real llama-server
// (the prebuilt CPU build, installed as an operator installs it, serving the project's tiny qwen3):
// the GGUF-built tokenizer gives /tokenize's ids and /apply-template's prompt, and through the
// gateway local tokenizing of the llama model is verified against the engine's own formats until
// trusted, with no mismatch.
import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import OpenAI from 'openai';
import { Registry } from 'prom-client';
import { gatewayDefaults, poolOptionsOf, startGateway } from '../../src/gateway/index.js';
import { ClusterIndex, MAX_SLOTS } from '../../src/kv/index.js';
import type { ReplicaView } from '../../src/routing/index.js';
import { ggufModel, renderChat, type ChatMessage } from '../../src/tokenize/index.js';
import { HashPool } from '../../src/workers/index.js';
import { installLlamaCpp, llamaCppTarball, tinyModel } from '../support/llamacpp.js';
import { freePort, waitFor } from '../support/wait.js';
import { metric } from './sim-cluster.js';

// One llama-server for every check here: a start costs seconds on two cores.
async function llamaServer(t: TestContext, model: string): Promise<URL> {
  const stateDir = mkdtempSync(join(tmpdir(), 'llmgw-llama-tok-'));
  t.after(() => rmSync(stateDir, { recursive: true, force: true }));
  const { bin } = await installLlamaCpp(llamaCppTarball(), stateDir);
  const port = await freePort();
  const child = spawn(bin, ['-m', model, '--host', '127.0.0.1', '--port', String(port), '-np', '2', '-c', '8192', '-t', '2'], { stdio: 'ignore' });
  t.after(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, 'exit');
    child.kill('SIGKILL');
    await exited;
  });
  const url = new URL(`http://127.0.0.1:${port}/`);
  await waitFor(
    async () => {
      if (child.exitCode !== null) throw new Error(`llama-server exited ${child.exitCode}`);
      return (await fetch(new URL('/health', url), { signal: AbortSignal.timeout(1000) }).catch(() => undefined))?.status === 200;
    },
    { what: 'llama-server to load the tiny model', timeoutMs: 60_000, intervalMs: 100 },
  );
  return url;
}

async function post<T>(url: URL, path: string, body: unknown): Promise<T> {
  const r = await fetch(new URL(path, url), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  assert.equal(r.status, 200, `${path}: ${await r.clone().text()}`);
  return (await r.json()) as T;
}

const prompts: readonly { why: string; text: string }[] = [
  { why: 'ASCII', text: "Hello, world! It's 2026; the cache holds 1,909 of 1,910 tokens." },
  { why: 'unicode', text: 'naïve café, 日本語のテキスト, Привет, emoji 🙂🚀 and a combining e\u0301 NFC would fold' },
  { why: 'special tokens', text: '<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' },
  { why: 'whitespace runs', text: 'a  b\t\tc\n\n\n  d   \r\n e  ' },
];

const chats: readonly OpenAI.ChatCompletionMessageParam[][] = [
  [{ role: 'user', content: 'What is the capital of France?' }],
  [
    { role: 'system', content: 'You answer in one word.' },
    { role: 'user', content: 'Name a colour.' },
    { role: 'assistant', content: 'Blue.' },
    { role: 'user', content: 'Another, in 日本語 please 🙂' },
  ],
];

void test('llama.cpp tokenize: the GGUF-built tokenizer gives llama-server\'s /tokenize ids and /apply-template prompt, and the gateway trusts it', async (t) => {
  const model = await tinyModel();
  const url = await llamaServer(t, model);
  const local = await ggufModel(model);

  for (const p of prompts) {
    const engine = await post<{ tokens: number[] }>(url, '/tokenize', { content: p.text, add_special: true, parse_special: true });
    assert.deepEqual([...(await local.encodeWhole(p.text, true))], engine.tokens, p.why);
  }
  for (const messages of chats) {
    const engine = await post<{ prompt: string }>(url, '/apply-template', { messages });
    const rendered: ChatMessage[] = messages.map((m) => ({ role: m.role, content: String(m.content) }));
    assert.equal(renderChat(local.template, rendered, { addGenerationPrompt: true, continueFinalMessage: false }), engine.prompt);
  }

  // Through the gateway: the llama replica's tokenizer is its GGUF, its /tokenize spoken in
  // llama-server's format; the first three requests are checked both ways, then local ids alone.
  const index = new ClusterIndex({ capacityBlocks: 10_000 });
  const router = { ...gatewayDefaults.router, localTokenize: true, tokenizeVerifyFirst: 3, tokenizeVerifyEvery: 0, tokenizeTimeoutMs: 10_000 };
  const pool = new HashPool({ indexBuffer: index.buffer, maxThreads: 1, ...poolOptionsOf({ ...gatewayDefaults, router }) });
  t.after(() => pool.close());
  const view: ReplicaView = { id: 'l0', node: 'local', model: 'tiny', adapters: [], url, apiKey: undefined, generation: 1, kvEvents: false, blockSizeTokens: 16, hashSeed: '0', dataParallelSize: 1, tokenizeApi: 'llamacpp' };
  const registry = new Registry();
  const gw = await startGateway({
    config: { ...gatewayDefaults, port: 0, router },
    registry,
    directory: { ready: (m) => (m === 'tiny' ? [view] : []), models: () => ['tiny'] },
    index: { index, slotCount: MAX_SLOTS },
    scorer: pool,
    parsePool: pool,
    tokenizePool: pool,
    tokenizerOf: () => model,
  });
  t.after(() => gw.close());
  // The GGUF's tokenizer loads in the pool in a second or two; until then /tokenize alone serves
  // (as `serve` waits for it before /ready says ready).
  await gw.whenWarm();
  assert.equal(metric(await registry.metrics(), 'llmgw_gateway_tokenize_local_state{model="tiny",state="verifying"}'), 1);
  const client = new OpenAI({ baseURL: new URL('/v1', gw.url).href, apiKey: 'none', maxRetries: 0, timeout: 120_000 });
  for (const [i, messages] of [...chats, ...chats, chats[0] ?? []].entries()) {
    const data = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 2, temperature: 0 });
    assert.ok(data.usage !== undefined, `chat ${i} reports usage`);
  }
  const done = await client.completions.create({ model: 'tiny', prompt: prompts[1]?.text ?? '', max_tokens: 2, temperature: 0 });
  assert.ok(done.usage !== undefined);
  // The checks run in the background, the requests not held for them.
  await waitFor(async () => metric(await registry.metrics(), 'llmgw_gateway_tokenize_local_state{model="tiny",state="verifying"}') === 0, { timeoutMs: 60_000, what: 'the checks against /tokenize' });
  const text = await registry.metrics();
  assert.equal(metric(text, 'llmgw_gateway_tokenize_checks_total{model="tiny",outcome="match"}'), 3, text.split('\n').filter((l) => l.includes('tokenize')).join('\n'));
  assert.equal(metric(text, 'llmgw_gateway_tokenize_checks_total{model="tiny",outcome="mismatch"}'), 0);
  assert.equal(metric(text, 'llmgw_gateway_tokenize_local_state{model="tiny",state="trusted"}'), 1);
});
