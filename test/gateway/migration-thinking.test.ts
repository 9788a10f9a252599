// Thinking streams that outlive their engine: sims running as the default config runs them (Qwen3's
// tokenizer and template, --reasoning-parser qwen3, 32 think tokens) killed with SIGKILL mid-think
// and mid-answer. The gateway continues each raw on another replica; the client's reasoning and
// content must each be exactly what an unkilled run of the same request gives, and its usage the same.
import { strict as assert } from 'node:assert';
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'node:test';
import OpenAI from 'openai';
import { Registry } from 'prom-client';
import { gatewayDefaults, startGateway } from '../../src/gateway/index.js';
import type { GatewayConfig } from '../../src/gateway/index.js';
import type { ReplicaView } from '../../src/routing/index.js';
import { HashPool } from '../../src/workers/index.js';
import { spawnSim } from '../sim/spawn-sim.js';
import { metric } from './sim-cluster.js';

interface Engine {
  readonly view: ReplicaView;
  readonly child: ChildProcess;
}

// The default config's sim profile: reasoning_parser qwen3 and args [--think-tokens, "32"].
const thinkingSim = ['--reasoning-parser', 'qwen3', '--think-tokens', '32'];

async function fleet(t: import('node:test').TestContext, o: { engines: number }) {
  const pool = new HashPool({ indexBuffer: null, maxThreads: 1 });
  t.after(() => pool.close());
  const engines: Engine[] = [];
  for (let i = 0; i < o.engines; i++) {
    const { url, child } = await spawnSim(t, ['qwen3', '--served-model-name', 'qwen3', '--decode-tokens-per-s', '100', ...thinkingSim], { PYTHONHASHSEED: '0' });
    const view: ReplicaView = { id: `e${i}`, node: 'local', model: 'qwen3', adapters: [], url: new URL(url), apiKey: undefined, generation: 1, kvEvents: true, blockSizeTokens: 16, hashSeed: '0', dataParallelSize: 1 };
    engines.push({ view, child });
  }
  const views = engines.map((e) => e.view);
  const registry = new Registry();
  const config: GatewayConfig = { ...gatewayDefaults, port: 0 };
  const gw = await startGateway({
    config,
    registry,
    closeGraceMs: 500,
    directory: { ready: (m) => (m === 'qwen3' ? views : []), models: () => ['qwen3'] },
    tokenizePool: pool,
    tokenizerOf: () => 'qwen3',
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

interface Read {
  reasoning: string;
  content: string;
  finish: string | null | undefined;
  usage: OpenAI.CompletionUsage | undefined;
  ids: number;
  roles: number;
  killed: boolean;
}

type Delta = { reasoning?: string; reasoning_content?: string; content?: string | null; role?: string };

// One streamed chat; `killAt` says, from what the client has so far, when to kill the engine serving it.
async function read(f: Awaited<ReturnType<typeof fleet>>, body: Record<string, unknown>, killAt?: (r: Read) => boolean): Promise<Read> {
  const { data: stream, response } = await f.client.chat.completions
    .create({ model: 'qwen3', messages: [{ role: 'user', content: 'think, then tell me a story' }], stream: true, stream_options: { include_usage: true }, ...body })
    .withResponse();
  const first = response.headers.get('x-llmgw-replica');
  const r: Read = { reasoning: '', content: '', finish: undefined, usage: undefined, ids: 0, roles: 0, killed: false };
  const ids = new Set<string>();
  for await (const chunk of stream) {
    ids.add(chunk.id);
    const c = chunk.choices[0];
    const d = (c?.delta ?? {}) as Delta;
    assert.equal(d.reasoning_content, undefined, 'the field the sim writes, not the old one');
    if (d.role !== undefined) r.roles++;
    r.reasoning += d.reasoning ?? '';
    r.content += d.content ?? '';
    r.finish = c?.finish_reason ?? r.finish;
    if (chunk.usage) r.usage = chunk.usage;
    if (!r.killed && killAt?.(r) === true) {
      r.killed = true;
      await kill9(f.engines.find((e) => e.view.id === first));
    }
  }
  r.ids = ids.size;
  return r;
}

void test('kill -9 mid-think and mid-answer: both fields come out exactly as unkilled, one id, one role, usage counted once', async (t) => {
  const f = await fleet(t, { engines: 3 });
  const body = { max_tokens: 60 };
  const whole = await read(f, body);
  assert.ok(whole.reasoning.length > 20 && whole.content.length > 10, 'the sim thought and answered');
  assert.equal(whole.finish, 'length');

  const midThink = await read(f, body, (r) => r.reasoning.length >= 20);
  const midAnswer = await read(f, body, (r) => r.content.length >= 8);
  for (const [name, r] of [
    ['mid-think', midThink],
    ['mid-answer', midAnswer],
  ] as const) {
    assert.ok(r.killed, name);
    assert.equal(r.reasoning, whole.reasoning, `${name}: reasoning, no gap or repeat`);
    assert.equal(r.content, whole.content, `${name}: content, no gap or repeat`);
    assert.equal(r.finish, 'length', name);
    assert.equal(r.ids, 1, `${name}: one id`);
    assert.equal(r.roles, 1, `${name}: one role delta`);
    assert.deepEqual(
      [r.usage?.prompt_tokens, r.usage?.completion_tokens],
      [whole.usage?.prompt_tokens, whole.usage?.completion_tokens],
      `${name}: the prompt once, every token the engine wrote`,
    );
  }
  const m = await f.registry.metrics();
  assert.equal(metric(m, 'llmgw_gateway_stream_migrations_total{reason="reset",outcome="resumed"}'), 2);
});

void test('a thinking chat offered tools is not continued raw (a tool call after the seam would go unparsed): the error event says why', async (t) => {
  const f = await fleet(t, { engines: 2 });
  const tools = [{ type: 'function' as const, function: { name: 'look', parameters: { type: 'object', properties: {} } } }];
  await assert.rejects(
    read(f, { max_tokens: 60, tools }, (r) => r.reasoning.length >= 20),
    (e) => e instanceof Error && /could not be continued \(tools\)/.test(e.message),
  );
  const m = await f.registry.metrics();
  assert.equal(metric(m, 'llmgw_gateway_stream_migrations_total{reason="reset",outcome="tools"}'), 1);
});

// An agent-API stream read raw (Messages or Responses): `pick` names each event's thinking or text
// piece; the engine is killed once `killAt` says so.
type Pick = (e: Record<string, unknown>) => { thinking?: string; text?: string; stop?: unknown };
async function readAgent(
  f: Awaited<ReturnType<typeof fleet>>,
  path: string,
  body: Record<string, unknown>,
  pick: Pick,
  killAt?: (thinking: string, text: string) => boolean,
): Promise<{ thinking: string; text: string; killed: boolean; stop: unknown }> {
  const res = await fetch(new URL(path, f.gw.url), {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'qwen3', stream: true, ...body }),
    signal: AbortSignal.timeout(30_000),
  });
  assert.equal(res.status, 200);
  const first = res.headers.get('x-llmgw-replica');
  const out = { thinking: '', text: '', killed: false, stop: undefined as unknown };
  let buf = '';
  const decoder = new TextDecoder();
  for await (const bytes of res.body as unknown as AsyncIterable<Uint8Array>) {
    buf += decoder.decode(bytes, { stream: true });
    let at: number;
    while ((at = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, at);
      buf = buf.slice(at + 2);
      const data = event.split('\n').find((l) => l.startsWith('data: '));
      if (data === undefined || data === 'data: [DONE]') continue;
      const e = JSON.parse(data.slice(6)) as Record<string, unknown>;
      assert.notEqual(e.type, 'error', data);
      assert.notEqual(e.type, 'response.failed', data);
      const p = pick(e);
      out.thinking += p.thinking ?? '';
      out.text += p.text ?? '';
      if (p.stop !== undefined) out.stop = p.stop;
    }
    if (!out.killed && killAt?.(out.thinking, out.text) === true) {
      out.killed = true;
      await kill9(f.engines.find((x) => x.view.id === first));
    }
  }
  return out;
}

const messagesPick: Pick = (e) => {
  const d = e.delta as { type?: string; thinking?: string; text?: string; stop_reason?: string } | undefined;
  if (e.type === 'content_block_delta') return { thinking: d?.thinking, text: d?.text };
  return e.type === 'message_delta' ? { stop: d?.stop_reason } : {};
};
const responsesPick: Pick = (e) => {
  if (e.type === 'response.reasoning_text.delta') return { thinking: String(e.delta) };
  if (e.type === 'response.output_text.delta') return { text: String(e.delta) };
  return e.type === 'response.completed' ? { stop: (e.response as { status?: string } | undefined)?.status } : {};
};
const ask = 'think, then tell me a story';

void test('Messages and Responses: kill -9 mid-thinking, the thinking and text come out exactly as unkilled', async (t) => {
  const f = await fleet(t, { engines: 3 });
  for (const [path, body, pick] of [
    ['/v1/messages', { max_tokens: 60, messages: [{ role: 'user', content: ask }] }, messagesPick],
    ['/v1/responses', { max_output_tokens: 60, input: ask, store: false }, responsesPick],
  ] as const) {
    const whole = await readAgent(f, path, body, pick);
    assert.ok(whole.thinking.length > 20 && whole.text.length > 0, `${path}: the answer has thinking and text`);
    const cut = await readAgent(f, path, body, pick, (thinking) => thinking.length >= 20);
    assert.ok(cut.killed, path);
    assert.deepEqual(cut, { ...whole, killed: true }, path);
  }
});
