// A real engine in the loop: `llmgw serve` with two llama.cpp replicas (the prebuilt CPU
// llama-server, installed as an operator installs it, serving the project's tiny qwen3 model), and
// the official openai client in front. One serve and one pair of servers for every check, because a
// start costs seconds on CI's two cores; a second serve at the end adopts the same servers.
import { strict as assert } from 'node:assert';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import OpenAI from 'openai';
import { StateDir, type ShardRecord } from '../../src/actors/index.js';
import { installLlamaCpp, llamaCppTarball, tinyModel } from '../support/llamacpp.js';
import { servePlaces, startServe, type ServePlaces } from '../support/serve.js';
import { waitFor } from '../support/wait.js';

interface Setup {
  readonly model: string;
  readonly corrupt: string;
  readonly stateDir: string;
}

function config(p: ServePlaces, s: Setup): string {
  const profile = (path: string, gpuClass = 'cpu'): string => `[{ name: cpu, engine: llamacpp, gpu_class: ${gpuClass}, tp: 1, model_path: ${JSON.stringify(path)} }]`;
  return `node:
  name: local
  addr: 127.0.0.1
  # A GPU this machine does not have: the CPU build of llama.cpp runs the profile placed on it anyway.
  devices: [{ index: 0, name: NVIDIA L4, class: l4, compute_capability: "8.9" }]
  ports: { http_base: ${p.http}, kv_events_base: ${p.kv} }
agent:
  state_dir: ${JSON.stringify(s.stateDir)}
  log_dir: ${JSON.stringify(join(s.stateDir, 'logs'))}
  health_interval_ms: 200
  restart: { max_restarts: 2, backoff_base_ms: 200, backoff_max_ms: 1000 }
models:
  qwen3: { served_model_name: qwen3, profiles: ${profile(s.model)} }
  broken: { served_model_name: broken, profiles: ${profile(s.corrupt)} }
  missing: { served_model_name: missing, profiles: ${profile(join(p.dir, 'no-such-model.gguf'))} }
  gpu: { served_model_name: gpu, profiles: ${profile(s.model, 'l4')} }
replicas:
  - { model: qwen3, profile: cpu, count: 2 }
  - { model: broken, profile: cpu, count: 1 }
  - { model: missing, profile: cpu, count: 1 }
  - { model: gpu, profile: cpu, count: 1 }
gateway:
  host: 127.0.0.1
  port: ${p.port}
`;
}

const records = (stateDir: string): ShardRecord[] => new StateDir(stateDir).read(() => undefined);
const pidOf = (stateDir: string, replica: string): number | undefined => records(stateDir).find((r) => r.shard.spec.replicaId === replica)?.processes[0]?.pid;

async function readyCount(port: number): Promise<number> {
  const r = await fetch(`http://127.0.0.1:${port}/health`);
  const body = (await r.json()) as { ready?: Record<string, number> };
  return body.ready?.qwen3 ?? 0;
}

interface ActorJson {
  readonly id: string;
  readonly phase: string;
  readonly reason?: string;
  readonly transitions: readonly { readonly to: string }[];
}

async function actors(port: number): Promise<ActorJson[]> {
  const r = await fetch(`http://127.0.0.1:${port}/debug/actors/state`);
  return ((await r.json()) as { actors: ActorJson[] }).actors;
}

// What llama-server's /slots says of each slot, asked with the key the agent gave it.
async function busySlots(rec: ShardRecord): Promise<number> {
  const r = await fetch(`http://127.0.0.1:${rec.shard.spec.httpPort}/slots`, { headers: { authorization: `Bearer ${rec.shard.spec.apiKey}` } });
  const slots = (await r.json()) as { is_processing: boolean }[];
  return slots.filter((s) => s.is_processing).length;
}

function killEnginesAfter(t: TestContext, stateDir: string): void {
  // The servers outlive a killed serve by design; should the test fail before a serve stops them,
  // they must not outlive the test.
  t.after(() => {
    for (const r of records(stateDir)) {
      for (const p of r.processes) {
        try {
          process.kill(p.pid, 'SIGKILL');
        } catch {
          // already stopped by serve
        }
      }
    }
  });
}

void test('llama.cpp through llmgw serve: chat, completions, streams, cached usage, errors, cancellation, kill -9, a corrupt model, CPU fallback, adoption', { timeout: 240_000 }, async (t) => {
  const places = await servePlaces(t);
  const stateDir = join(places.dir, 'state');
  await installLlamaCpp(llamaCppTarball(), stateDir);
  const model = await tinyModel();
  // A GGUF cut short inside its tensor data: the header reads, the load fails.
  const corrupt = join(places.dir, 'corrupt.gguf');
  writeFileSync(corrupt, readFileSync(model).subarray(0, 8 * 1024 * 1024));
  const setup: Setup = { model, corrupt, stateDir };
  killEnginesAfter(t, stateDir);
  const served = await startServe(t, (p) => config(p, setup), { places, until: 'serve.listening' });
  const { port } = served;
  await waitFor(async () => (await readyCount(port)) === 2, { timeoutMs: 60_000, what: 'both llama.cpp replicas ready' });
  const client = new OpenAI({ apiKey: 'none', baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0, timeout: 30_000 });

  await t.test('chat and completions, streamed and not, with usage', async () => {
    const chat = await client.chat.completions.create({ model: 'qwen3', messages: [{ role: 'user', content: 'hello' }], max_tokens: 4 });
    assert.equal(chat.choices[0]?.message.role, 'assistant');
    assert.equal(chat.usage?.completion_tokens, 4);
    assert.ok((chat.usage?.prompt_tokens ?? 0) > 0);
    assert.equal(typeof chat.usage?.prompt_tokens_details?.cached_tokens, 'number');
    let chunks = 0;
    let usage: OpenAI.CompletionUsage | undefined | null;
    for await (const c of await client.chat.completions.create({ model: 'qwen3', messages: [{ role: 'user', content: 'hello' }], max_tokens: 4, stream: true, stream_options: { include_usage: true } })) {
      if (c.choices.length > 0) chunks++;
      usage = c.usage ?? usage;
    }
    assert.ok(chunks >= 1);
    assert.equal(usage?.completion_tokens, 4);
    const done = await client.completions.create({ model: 'qwen3', prompt: 'The gateway', max_tokens: 3 });
    assert.equal(done.usage?.completion_tokens, 3);
    let text = 0;
    for await (const c of await client.completions.create({ model: 'qwen3', prompt: 'The gateway', max_tokens: 3, stream: true })) text += c.choices.length;
    assert.ok(text >= 1);
  });

  await t.test('a repeated long conversation comes back from the same replica with its prompt cached', async () => {
    const messages = [{ role: 'user' as const, content: 'Tell me how the gateway routes a conversation to the replica that holds it. '.repeat(60) }];
    const first = await client.chat.completions.create({ model: 'qwen3', messages, max_tokens: 2 }).withResponse();
    const again = await client.chat.completions.create({ model: 'qwen3', messages, max_tokens: 2 }).withResponse();
    assert.equal(again.response.headers.get('x-llmgw-replica'), first.response.headers.get('x-llmgw-replica'));
    const prompt = again.data.usage?.prompt_tokens ?? 0;
    const cached = again.data.usage?.prompt_tokens_details?.cached_tokens ?? 0;
    assert.ok(prompt > 600, `a long prompt (${prompt} tokens)`);
    // llama.cpp evaluates the last prompt token again to get its logits: all but one is cached.
    assert.ok(cached >= prompt - 1, `${cached} of ${prompt} prompt tokens cached`);
  });

  await t.test('the model is tokenized from its GGUF, verified against llama-server\'s /tokenize with no mismatch', async () => {
    const metrics = async (): Promise<string> => (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    const line = (text: string, l: string): number => Number(new RegExp(`^${l.replace(/[{}"]/g, '\\$&')} (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
    const state = (text: string, s: string): number => line(text, `llmgw_gateway_tokenize_local_state{model="qwen3",state="${s}"}`);
    // The 151k-token vocabulary loads in the pool in seconds; /tokenize serves meanwhile.
    await waitFor(async () => state(await metrics(), 'loading') === 0, { timeoutMs: 60_000, what: 'the GGUF tokenizer loaded' });
    for (const content of ['How do you route?', 'naïve café, 日本語 🙂', 'Tell me more. '.repeat(40)]) {
      await client.chat.completions.create({ model: 'qwen3', messages: [{ role: 'user', content }], max_tokens: 1 });
    }
    // The checks run in the background, the requests not held for them.
    await waitFor(async () => line(await metrics(), 'llmgw_gateway_tokenize_checks_total{model="qwen3",outcome="match"}') + line(await metrics(), 'llmgw_gateway_tokenize_checks_total{model="qwen3",outcome="mismatch"}') >= 3, { timeoutMs: 60_000, what: 'the checks against /tokenize' });
    const text = await metrics();
    const why = text.split('\n').filter((l) => l.startsWith('llmgw_gateway_tokenize_checks') || l.startsWith('llmgw_gateway_tokenize_local')).join('\n');
    assert.ok(line(text, 'llmgw_gateway_tokenize_checks_total{model="qwen3",outcome="match"}') >= 3, why);
    assert.equal(line(text, 'llmgw_gateway_tokenize_checks_total{model="qwen3",outcome="mismatch"}'), 0, why);
    assert.equal(state(text, 'verifying') + state(text, 'trusted'), 1, why);
  });

  await t.test("the engine's own error reaches the client as an OpenAI error", async () => {
    await assert.rejects(
      client.chat.completions.create({ model: 'qwen3', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'bogus' } } } }),
      (e: unknown) => e instanceof OpenAI.BadRequestError && e.status === 400 && /schema/i.test(e.message),
    );
  });

  await t.test('a client that goes away frees its slot on the engine', async () => {
    const ac = new AbortController();
    const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      // ignore_eos: the answer runs to max_tokens, far longer than the wait below, unless cancelled.
      body: JSON.stringify({ model: 'qwen3', messages: [{ role: 'user', content: 'write at length' }], max_tokens: 3500, ignore_eos: true, stream: true }),
      signal: ac.signal,
    });
    const replica = res.headers.get('x-llmgw-replica');
    const rec = records(stateDir).find((r) => r.shard.spec.replicaId === replica);
    assert.ok(rec !== undefined, `a record of ${String(replica)}`);
    const reader = res.body?.getReader();
    await reader?.read();
    assert.equal(await busySlots(rec), 1, 'the stream holds a slot');
    ac.abort();
    await waitFor(async () => (await busySlots(rec)) === 0, { timeoutMs: 5_000, what: 'the slot freed once the client left' });
  });

  await t.test('a corrupt or missing model fails with the engine\'s own words, without a restart storm', async () => {
    for (const name of ['broken', 'missing']) {
      const shard = await waitFor(async () => (await actors(port)).find((a) => a.id.startsWith(`shard:${name}-`) && a.phase === 'failed' && a.transitions.filter((x) => x.to === 'starting').length > 2), {
        timeoutMs: 60_000,
        what: `the ${name} model's shard failed for good`,
      });
      assert.match(shard.reason ?? '', /llama-server exited with code 1: .*(model|gguf)/i, `${name}: ${String(shard.reason)}`);
      // One start and max_restarts (2) restarts, then it stays failed.
      assert.equal(shard.transitions.filter((x) => x.to === 'starting').length, 3);
    }
  });

  await t.test('a GPU profile whose build has no GPU backend runs on the CPU, shown as cpu-fallback and not routed', async () => {
    await waitFor(async () => (await actors(port)).some((a) => a.id === 'replica:gpu-cpu-0' && a.phase === 'cpu-fallback'), { timeoutMs: 30_000, what: 'the GPU replica in cpu-fallback' });
    const shard = (await actors(port)).find((a) => a.id === 'shard:gpu-cpu-0-r0');
    assert.equal(shard?.phase, 'cpu-fallback');
    assert.match(shard.reason ?? '', /lists no GPU device/);
    await assert.rejects(client.chat.completions.create({ model: 'gpu', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }), (e: unknown) => e instanceof OpenAI.APIError && e.status === 503);
  });

  await t.test('a server killed with -9 is restarted and back, and the other serves meanwhile', async () => {
    const replica = 'qwen3-cpu-0';
    const pid = pidOf(stateDir, replica);
    assert.ok(pid !== undefined);
    process.kill(pid, 'SIGKILL');
    await waitFor(async () => (await readyCount(port)) === 1, { timeoutMs: 15_000, what: 'the killed replica out of routing' });
    const meanwhile = await client.chat.completions.create({ model: 'qwen3', messages: [{ role: 'user', content: 'still there?' }], max_tokens: 2 }).withResponse();
    assert.equal(meanwhile.response.headers.get('x-llmgw-replica'), 'qwen3-cpu-1');
    await waitFor(async () => (await readyCount(port)) === 2, { timeoutMs: 60_000, what: 'the killed replica restarted and ready' });
    assert.notEqual(pidOf(stateDir, replica), pid);
  });

  await t.test('serve killed and started again adopts the running servers', async () => {
    const before = records(stateDir).filter((r) => r.shard.spec.replicaId.startsWith('qwen3-')).map((r) => r.processes[0]?.pid).sort();
    await served.kill();
    const again = await startServe(t, (p) => config(p, setup), { places, until: 'serve.listening' });
    await waitFor(async () => (await readyCount(port)) === 2, { timeoutMs: 30_000, what: 'both replicas adopted and ready' });
    const after = records(stateDir).filter((r) => r.shard.spec.replicaId.startsWith('qwen3-')).map((r) => r.processes[0]?.pid).sort();
    assert.deepEqual(after, before, 'the same llama-server processes, not restarted');
    const chat = await client.chat.completions.create({ model: 'qwen3', messages: [{ role: 'user', content: 'hello again' }], max_tokens: 2 });
    assert.equal(chat.usage?.completion_tokens, 2);
    assert.equal(await again.stop(), 0);
    assert.deepEqual(records(stateDir), [], 'a stopped serve leaves no engine running');
  });
});
