// Streams that outlive their engine: sim processes killed with SIGKILL mid-answer, the gateway in
// front continuing each answer on another replica. The sim continues its own text exactly (its
// "model" writes one fixed cycle), so the client's text must equal an answer nobody interrupted.
import { strict as assert } from 'node:assert';
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'node:test';
import OpenAI from 'openai';
import { Registry } from 'prom-client';
import { gatewayDefaults, startGateway } from '../../src/gateway/index.js';
import type { GatewayConfig } from '../../src/gateway/index.js';
import type { ReplicaView, RouteReceipt } from '../../src/routing/index.js';
import { HashPool } from '../../src/workers/index.js';
import { spawnSim } from '../sim/spawn-sim.js';
import { waitFor } from '../support/wait.js';
import { metric } from './sim-cluster.js';

// The sim's text, one byte a token with the byte tokenizer.
const cycle = ' the quick brown fox jumps over the lazy dog and';
const uninterrupted = (tokens: number): string => cycle.repeat(Math.ceil(tokens / cycle.length)).slice(0, tokens);

interface Engine {
  readonly view: ReplicaView;
  readonly child: ChildProcess;
}

// `qwen3`: the sims run Qwen3's tokenizer and template, and the gateway renders them too (a pool
// of its own), so it knows where a continuation would not be exact.
async function fleet(t: import('node:test').TestContext, o: { engines: number; upstream?: Partial<GatewayConfig['upstream']>; simArgs?: readonly string[]; qwen3?: boolean }) {
  const engines: Engine[] = [];
  const pool = o.qwen3 === true ? new HashPool({ indexBuffer: null, maxThreads: 1 }) : undefined;
  if (pool !== undefined) t.after(() => pool.close());
  for (let i = 0; i < o.engines; i++) {
    const tokenizer = o.qwen3 === true ? [] : ['--tokenizer', 'bytes'];
    const { url, child } = await spawnSim(t, ['qwen3', '--served-model-name', 'qwen3', ...tokenizer, '--decode-tokens-per-s', '100', ...(o.simArgs ?? [])], { PYTHONHASHSEED: '0' });
    const view: ReplicaView = { id: `e${i}`, node: 'local', model: 'qwen3', adapters: [], url: new URL(url), apiKey: undefined, generation: 1, kvEvents: pool !== undefined, blockSizeTokens: 16, hashSeed: '0', dataParallelSize: 1 };
    engines.push({ view, child });
  }
  const views = engines.map((e) => e.view);
  const registry = new Registry();
  const config: GatewayConfig = { ...gatewayDefaults, port: 0, upstream: { ...gatewayDefaults.upstream, ...o.upstream } };
  // A killed engine stays in the directory, as it does until the agent sees its process gone: the
  // gateway must not send the continuation back to it.
  const gw = await startGateway({
    config,
    registry,
    closeGraceMs: 500,
    directory: { ready: (m) => (m === 'qwen3' ? views : []), models: () => ['qwen3'] },
    ...(pool === undefined ? {} : { tokenizePool: pool, tokenizerOf: () => 'qwen3' }),
  });
  t.after(() => gw.close());
  await gw.whenWarm();
  const client = new OpenAI({ baseURL: new URL('/v1', gw.url).href, apiKey: 'none', maxRetries: 0, timeout: 30_000 });
  return { gw, engines, registry, client };
}

const kill9 = async (e: Engine | undefined): Promise<void> => {
  assert.ok(e !== undefined, 'the replica that served the stream is one of ours');
  const exited = once(e.child, 'exit');
  e.child.kill('SIGKILL');
  await exited;
};

void test('kill -9 of the engine mid-stream: the chat completes on another replica, no gap or repeat at the seam, usage counted once', async (t) => {
  const { gw, engines, registry, client } = await fleet(t, { engines: 2 });
  const messages = [{ role: 'user' as const, content: 'tell me a story' }];
  // What the prompt costs when nothing breaks: the usage of the migrated stream must say the same.
  const plain = await client.chat.completions.create({ model: 'qwen3', messages, max_tokens: 1 });
  const { data: stream, response } = await client.chat.completions.create({ model: 'qwen3', messages, max_tokens: 120, stream: true, stream_options: { include_usage: true } }).withResponse();
  const first = response.headers.get('x-llmgw-replica');
  let text = '';
  let roles = 0;
  let killed = false;
  const ids = new Set<string>();
  let usage: OpenAI.CompletionUsage | null | undefined;
  let finish: string | null | undefined;
  for await (const chunk of stream) {
    ids.add(chunk.id);
    const c = chunk.choices[0];
    if (c?.delta.role !== undefined) roles++;
    text += c?.delta.content ?? '';
    finish = c?.finish_reason ?? finish;
    if (chunk.usage) usage = chunk.usage;
    if (!killed && text.length >= 12) {
      killed = true;
      await kill9(engines.find((e) => e.view.id === first));
    }
  }
  assert.ok(killed);
  assert.equal(text, uninterrupted(120));
  assert.equal(finish, 'length');
  assert.equal(ids.size, 1, 'one id from the first chunk to the last');
  assert.equal(roles, 1, 'one role delta');
  assert.equal(usage?.completion_tokens, 120);
  assert.equal(usage?.prompt_tokens, plain.usage?.prompt_tokens, 'the prompt counted once');
  const reqId = response.headers.get('x-request-id') ?? '';
  const receipt = (await (await fetch(new URL(`/debug/receipts?id=${reqId}`, gw.url))).json()) as RouteReceipt;
  assert.deepEqual(
    receipt.hops?.map((h) => [h.replica, h.broke]),
    [
      [first, 'reset'],
      [engines.find((e) => e.view.id !== first)?.view.id, undefined],
    ],
  );
  assert.ok((receipt.hops?.[1]?.fromToken ?? 0) >= 12);
  const m = await registry.metrics();
  assert.equal(metric(m, 'llmgw_gateway_stream_migrations_total{reason="reset",outcome="resumed"}'), 1);
  assert.equal(metric(m, 'llmgw_gateway_requests_total{endpoint="chat",status="200",route="load"}'), 2);
});

void test('kill -9 mid-stream: a completion continues with its answer appended to the prompt', async (t) => {
  const { engines, client } = await fleet(t, { engines: 2 });
  const { data: stream, response } = await client.completions.create({ model: 'qwen3', prompt: 'Once upon a time', max_tokens: 100, stream: true }).withResponse();
  const first = response.headers.get('x-llmgw-replica');
  let text = '';
  let killed = false;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.text ?? '';
    if (!killed && text.length >= 7) {
      killed = true;
      await kill9(engines.find((e) => e.view.id === first));
    }
  }
  assert.equal(text, uninterrupted(100));
});

void test('a stream that cannot be continued exactly ends with a clear error event', async (t) => {
  // A second replica is ready: the refusal is the request's kind, not a lack of somewhere to go.
  const { engines, registry, client } = await fleet(t, { engines: 2 });
  const { data: stream, response } = await client.chat.completions
    .create({ model: 'qwen3', messages: [{ role: 'user', content: 'json please' }], max_tokens: 100, stream: true, response_format: { type: 'json_object' } })
    .withResponse();
  const first = response.headers.get('x-llmgw-replica');
  let text = '';
  let killed = false;
  await assert.rejects(
    async () => {
      for await (const chunk of stream) {
        text += chunk.choices[0]?.delta.content ?? '';
        if (!killed && text.length >= 5) {
          killed = true;
          await kill9(engines.find((e) => e.view.id === first));
        }
      }
    },
    (e: Error) => /could not be continued \(structured\)/.test(e.message),
  );
  assert.equal(metric(await registry.metrics(), 'llmgw_gateway_stream_migrations_total{reason="reset",outcome="structured"}'), 1);
});

void test('the migration limit holds: an answer whose every engine dies moves once, then ends with the error event', async (t) => {
  // Every sim dies once it has streamed 10 tokens of an answer; three of them, one migration allowed.
  const { engines, registry, client } = await fleet(t, { engines: 3, upstream: { maxMigrations: 1 }, simArgs: ['--crash-mid-stream-after-tokens', '10'] });
  const stream = await client.chat.completions.create({ model: 'qwen3', messages: [{ role: 'user', content: 'doomed' }], max_tokens: 100, stream: true });
  let text = '';
  await assert.rejects(
    async () => {
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    },
    (e: Error) => /could not be continued \(limit\)/.test(e.message),
  );
  assert.equal(text, uninterrupted(20), 'ten tokens from each of the two engines it ran on, nothing lost between them');
  const m = await registry.metrics();
  assert.equal(metric(m, 'llmgw_gateway_stream_migrations_total{reason="reset",outcome="resumed"}'), 1);
  assert.equal(metric(m, 'llmgw_gateway_stream_migrations_total{reason="reset",outcome="limit"}'), 1);
  const alive = (): number => engines.filter((e) => e.child.exitCode === null && e.child.signalCode === null).length;
  await waitFor(() => alive() <= 1, { what: 'the two engines that ran it to exit' });
  assert.equal(alive(), 1, 'the third engine never got it');
});

void test('an engine gone silent (SIGSTOP) past the idle timeout is left, and its stream continues elsewhere', async (t) => {
  const { engines, registry, client } = await fleet(t, { engines: 2, upstream: { idleTimeoutMs: 500 } });
  const { data: stream, response } = await client.chat.completions.create({ model: 'qwen3', messages: [{ role: 'user', content: 'hold on' }], max_tokens: 60, stream: true }).withResponse();
  const frozen = engines.find((e) => e.view.id === response.headers.get('x-llmgw-replica'));
  assert.ok(frozen !== undefined);
  // A stopped process keeps its sockets open: only the silence tells.
  t.after(async () => {
    frozen.child.kill('SIGKILL');
  });
  let text = '';
  let stopped = false;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta.content ?? '';
    if (!stopped && text.length >= 5) {
      stopped = true;
      frozen.child.kill('SIGSTOP');
    }
  }
  assert.equal(text, uninterrupted(60));
  assert.equal(metric(await registry.metrics(), 'llmgw_gateway_stream_migrations_total{reason="timeout",outcome="resumed"}'), 1);
});

void test("a chat whose template would not continue it exactly (Qwen3's, thinking on) ends with the error event; with thinking off it continues", async (t) => {
  const { engines, registry, client } = await fleet(t, { engines: 3, qwen3: true });
  const messages = [{ role: 'user' as const, content: 'tell me a story' }];
  const read = async (extra: Record<string, unknown>): Promise<{ text: string; failed: string | undefined }> => {
    const { data: stream, response } = await client.chat.completions.create({ model: 'qwen3', messages, max_tokens: 60, stream: true, ...extra }).withResponse();
    const first = response.headers.get('x-llmgw-replica');
    let text = '';
    let killed = false;
    try {
      for await (const chunk of stream) {
        text += chunk.choices[0]?.delta.content ?? '';
        if (!killed && text.length >= 12) {
          killed = true;
          await kill9(engines.find((e) => e.view.id === first));
        }
      }
    } catch (e) {
      return { text, failed: e instanceof Error ? e.message : String(e) };
    }
    return { text, failed: undefined };
  };
  const thinking = await read({});
  assert.match(thinking.failed ?? 'completed', /could not be continued \(template\)/);
  const m = await registry.metrics();
  assert.equal(metric(m, 'llmgw_gateway_stream_migrations_total{reason="reset",outcome="template"}'), 1);

  // Two engines are left: with thinking off the answer continues on the one not killed next.
  const off = { chat_template_kwargs: { enable_thinking: false } };
  const plain = await client.chat.completions.create({ model: 'qwen3', messages, max_tokens: 60, ...off });
  const { text, failed } = await read(off);
  assert.equal(failed, undefined);
  assert.equal(text, plain.choices[0]?.message.content);
});
