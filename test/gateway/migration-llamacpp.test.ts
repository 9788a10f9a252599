// A stream migrated between two real llama.cpp servers: the engine serving it killed with SIGKILL
// mid-answer, its answer continued on the other. The build is shared/engines/llama.cpp's prebuilt
// CPU llama-server, installed as `llmgw engines install` does; the model the project's tiny
// random-weight qwen3. Greedy decoding, so the continuation of prompt plus answer so far is the
// answer nobody interrupted, token for token, as long as the answer re-tokenizes as it was
// generated (the tiny model repeats a few words, which do).
import { strict as assert } from 'node:assert';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import OpenAI from 'openai';
import { Registry } from 'prom-client';
import { gatewayDefaults, startGateway } from '../../src/gateway/index.js';
import type { ReplicaView } from '../../src/routing/index.js';
import { installLlamaCpp, llamaCppTarball, tinyModel } from '../support/llamacpp.js';
import { freePort, waitFor } from '../support/wait.js';
import { metric } from './sim-cluster.js';

async function engine(t: TestContext): Promise<{ bin: string; model: string }> {
  const stateDir = mkdtempSync(join(tmpdir(), 'llmgw-migration-llamacpp-'));
  t.after(() => rmSync(stateDir, { recursive: true, force: true }));
  const installed = await installLlamaCpp(llamaCppTarball(), stateDir);
  return { bin: installed.bin, model: await tinyModel() };
}

async function llamaServer(t: TestContext, e: { bin: string; model: string }, id: string): Promise<{ view: ReplicaView; child: ChildProcess }> {
  const port = await freePort();
  const child = spawn(e.bin, ['-m', e.model, '--jinja', '--host', '127.0.0.1', '--port', String(port), '-np', '2'], { stdio: 'ignore' });
  t.after(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, 'exit');
    child.kill('SIGKILL');
    await exited;
  });
  const url = `http://127.0.0.1:${port}`;
  await waitFor(
    async () => {
      if (child.exitCode !== null) throw new Error(`llama-server exited ${child.exitCode}`);
      return (await fetch(`${url}/health`, { signal: AbortSignal.timeout(1000) }).catch(() => undefined))?.status === 200;
    },
    { what: 'llama-server to load its model', timeoutMs: 60_000, intervalMs: 100 },
  );
  const view: ReplicaView = { id, node: 'local', model: 'tiny', adapters: [], url: new URL(url), apiKey: undefined, generation: 1, kvEvents: false, blockSizeTokens: 16, hashSeed: '0', dataParallelSize: 1 };
  return { view, child };
}

/** Two llama-servers of the tiny model behind a gateway, and an OpenAI client of the gateway. */
async function pair(t: TestContext): Promise<{ engines: { view: ReplicaView; child: ChildProcess }[]; registry: Registry; client: OpenAI }> {
  const e = await engine(t);
  const engines = [await llamaServer(t, e, 'l0'), await llamaServer(t, e, 'l1')];
  const views = engines.map((x) => x.view);
  const registry = new Registry();
  const gw = await startGateway({ config: { ...gatewayDefaults, port: 0 }, registry, closeGraceMs: 500, directory: { ready: (m) => (m === 'tiny' ? views : []), models: () => ['tiny'] } });
  t.after(() => gw.close());
  return { engines, registry, client: new OpenAI({ baseURL: new URL('/v1', gw.url).href, apiKey: 'none', maxRetries: 0, timeout: 120_000 }) };
}

void test('llama.cpp: kill -9 of the engine mid-stream, the completion continues on the other server with nothing lost', { timeout: 180_000 }, async (t) => {
  const { engines, registry, client } = await pair(t);
  const ask = { model: 'tiny', prompt: 'Once upon a time', max_tokens: 40, temperature: 0 };
  const plain = await client.completions.create(ask);
  const { data: stream, response } = await client.completions.create({ ...ask, stream: true, stream_options: { include_usage: true } }).withResponse();
  const victim = engines.find((e) => e.view.id === response.headers.get('x-llmgw-replica'));
  assert.ok(victim !== undefined);
  let text = '';
  let pieces = 0;
  let usage: OpenAI.CompletionUsage | null | undefined;
  const ids = new Set<string>();
  for await (const chunk of stream) {
    ids.add(chunk.id);
    text += chunk.choices[0]?.text ?? '';
    if (chunk.usage) usage = chunk.usage;
    if (++pieces === 5) {
      const exited = once(victim.child, 'exit');
      victim.child.kill('SIGKILL');
      await exited;
    }
  }
  assert.ok(pieces > 5);
  assert.equal(text, plain.choices[0]?.text);
  assert.equal(ids.size, 1);
  assert.equal(usage?.completion_tokens, 40);
  assert.equal(usage?.prompt_tokens, plain.usage?.prompt_tokens);
  assert.equal(metric(await registry.metrics(), 'llmgw_gateway_stream_migrations_total{reason="reset",outcome="resumed"}'), 1);
});

// The tiny model answers a fresh chat with newlines alone, which are not continued (an answer of
// nothing but spaces so far); given the start of its answer, as a final assistant message to
// continue, it writes words. Qwen3's template renders that message as its start followed by the
// text, so appending the answer so far is exact. llama-server's whole answer repeats the given
// start; its stream does not, so the uninterrupted answer is read as a stream.
void test('llama.cpp: kill -9 of the engine mid-stream, a chat continuing its own final assistant message continues on the other server', { timeout: 180_000 }, async (t) => {
  const { engines, registry, client } = await pair(t);
  const ask = {
    model: 'tiny',
    messages: [
      { role: 'user' as const, content: 'Tell me a story.' },
      { role: 'assistant' as const, content: 'Once upon a time' },
    ],
    max_tokens: 30,
    temperature: 0,
    continue_final_message: true,
    add_generation_prompt: false,
    stream: true as const,
    stream_options: { include_usage: true },
  };
  const read = async (kill: boolean): Promise<{ text: string; usage: OpenAI.CompletionUsage | undefined; ids: number }> => {
    const { data: stream, response } = await client.chat.completions.create(ask).withResponse();
    const victim = engines.find((x) => x.view.id === response.headers.get('x-llmgw-replica'));
    assert.ok(victim !== undefined);
    let text = '';
    let pieces = 0;
    let usage: OpenAI.CompletionUsage | undefined;
    const ids = new Set<string>();
    for await (const chunk of stream) {
      ids.add(chunk.id);
      text += chunk.choices[0]?.delta.content ?? '';
      if (chunk.usage) usage = chunk.usage;
      if (kill && ++pieces === 5) {
        const exited = once(victim.child, 'exit');
        victim.child.kill('SIGKILL');
        await exited;
      }
    }
    assert.ok(!kill || pieces > 5);
    return { text, usage, ids: ids.size };
  };
  const whole = await read(false);
  const migrated = await read(true);
  assert.ok(whole.text.length > 0);
  assert.equal(migrated.text, whole.text);
  assert.equal(migrated.ids, 1);
  assert.equal(migrated.usage?.completion_tokens, whole.usage?.completion_tokens);
  assert.equal(migrated.usage?.prompt_tokens, whole.usage?.prompt_tokens);
  assert.equal(metric(await registry.metrics(), 'llmgw_gateway_stream_migrations_total{reason="reset",outcome="resumed"}'), 1);
});
