// The real llama-server (the prebuilt CPU build, serving the project's tiny qwen3) in the embedding
// mode the llama.cpp builder writes for task: embed with pooling: mean, behind the gateway, spoken to
// by the openai SDK unchanged: its vectors come back as floats and as base64 alike, with its usage.
import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import OpenAI from 'openai';
import { Registry } from 'prom-client';
import { embeddingArgs } from '../../src/engines/index.js';
import { gatewayDefaults, startGateway } from '../../src/gateway/index.js';
import { profile } from '../engines/specs.js';
import { installLlamaCpp, llamaCppTarball, tinyModel } from '../support/llamacpp.js';
import { freePort, waitFor } from '../support/wait.js';
import { replicaView } from './replica-view.js';

void test('llama.cpp embeddings: llama-server in the builder\'s embedding mode answers the openai SDK through the gateway', { timeout: 120_000 }, async (t) => {
  const model = await tinyModel();
  const stateDir = mkdtempSync(join(tmpdir(), 'llmgw-llama-embed-'));
  t.after(() => rmSync(stateDir, { recursive: true, force: true }));
  const { bin } = await installLlamaCpp(llamaCppTarball(), stateDir);
  const port = await freePort();
  const flags = embeddingArgs('llamacpp', profile({ engine: 'llamacpp', task: 'embed', pooling: 'mean' }));
  assert.deepEqual(flags, ['--embeddings', '--pooling', 'mean']);
  const child = spawn(bin, ['-m', model, '--host', '127.0.0.1', '--port', String(port), '-np', '2', '-c', '2048', '-t', '2', '--alias', 'tiny-embed', ...flags], { stdio: 'ignore' });
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
  const view = replicaView('llama', { model: 'tiny-embed', url, kvEvents: false, embeds: true, tokenizeApi: 'llamacpp' });
  const gw = await startGateway({
    config: { ...gatewayDefaults, port: 0, router: { ...gatewayDefaults.router, loadPollIntervalMs: 0 } },
    directory: { ready: (m: string) => (m === 'tiny-embed' ? [view] : []), models: () => ['tiny-embed'] },
    registry: new Registry(),
  });
  t.after(() => gw.close());
  const client = new OpenAI({ apiKey: 'none', baseURL: new URL('/v1', gw.url).href, maxRetries: 0, timeout: 30_000 });
  const asFloat = await client.embeddings.create({ model: 'tiny-embed', input: ['the quick brown fox', 'jumps over'], encoding_format: 'float' });
  const asDefault = await client.embeddings.create({ model: 'tiny-embed', input: ['the quick brown fox', 'jumps over'] });
  assert.equal(asFloat.data.length, 2);
  for (const [i, d] of asFloat.data.entries()) {
    assert.ok(d.embedding.length > 0);
    assert.ok(d.embedding.every((x) => Number.isFinite(x)));
    assert.deepEqual(asDefault.data[i]?.embedding, d.embedding.map((x) => Math.fround(x)), 'base64 decodes to the floats');
  }
  assert.ok(asFloat.usage.prompt_tokens > 0, 'llama-server counts the prompt');
  const ids = await client.embeddings.create({ model: 'tiny-embed', input: [785, 3974, 13876], encoding_format: 'float' });
  assert.equal(ids.data[0]?.embedding.length, asFloat.data[0]?.embedding.length);
});
