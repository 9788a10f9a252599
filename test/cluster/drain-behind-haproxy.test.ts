// A gateway taken out of a running cluster, as an operator (or Kubernetes) does it: three `llmgw
// serve` gateways on one PostgreSQL behind haproxy (health checks on /ready, retries of requests
// that never reached a gateway), streams flowing through haproxy, SIGTERM to one gateway while it
// holds streams. Every stream ends with [DONE] and its whole answer, wherever it ran; once the
// gateway is gone the new streams go to the others and none fails; it exits 0 having drained, not
// cut, within gateway.drain_timeout_ms.
import { strict as assert } from 'node:assert';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import { Agent, request, type Dispatcher } from 'undici';
import { loggedEvent } from '../support/serve.js';
import { waitFor } from '../support/wait.js';
import { haproxyBin, serveCluster, startHaproxy } from './serve-cluster.js';

const maxTokens = 30;
const drainTimeoutMs = 30_000;

/** One stream through haproxy, read to its end. */
interface StreamResult {
  readonly n: number;
  readonly status: number;
  /** The gateway that answered (haproxy's x-served-by). */
  readonly servedBy: string;
  /** Where the test stood when it was sent: before the signal, while the gateway drained, after it exited. */
  readonly sent: Phase;
  readonly done: boolean;
  readonly finish: string | undefined;
  readonly completionTokens: number | undefined;
  readonly contentChunks: number;
  readonly error: string | undefined;
}

type Phase = 'before' | 'draining' | 'exited';

// The events of a streamed chat answer: how it finished, its usage, how many content deltas it had.
function readEvents(body: string): Pick<StreamResult, 'done' | 'finish' | 'completionTokens' | 'contentChunks'> {
  let finish: string | undefined;
  let completionTokens: number | undefined;
  let contentChunks = 0;
  const datas = body.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6).trim());
  for (const d of datas) {
    if (d === '[DONE]') continue;
    const e = JSON.parse(d) as { choices?: { delta?: { content?: string }; finish_reason?: string | null }[]; usage?: { completion_tokens?: number } | null };
    for (const c of e.choices ?? []) {
      if (typeof c.delta?.content === 'string' && c.delta.content !== '') contentChunks++;
      if (typeof c.finish_reason === 'string') finish = c.finish_reason;
    }
    if (typeof e.usage?.completion_tokens === 'number') completionTokens = e.usage.completion_tokens;
  }
  return { done: datas.at(-1) === '[DONE]', finish, completionTokens, contentChunks };
}

async function stream(front: string, dispatcher: Dispatcher, n: number, sent: Phase, onHeaders: (servedBy: string) => void): Promise<StreamResult> {
  let status = 0;
  let servedBy = '';
  let body = '';
  try {
    const r = await request(`${front}/v1/chat/completions`, {
      method: 'POST',
      dispatcher,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'qwen3', stream: true, stream_options: { include_usage: true }, max_tokens: maxTokens, messages: [{ role: 'user', content: `stream ${n}: keep talking` }] }),
    });
    status = r.statusCode;
    servedBy = String(r.headers['x-served-by']);
    onHeaders(servedBy);
    for await (const chunk of r.body) body += String(chunk);
  } catch (e) {
    return { n, status, servedBy, sent, done: false, finish: undefined, completionTokens: undefined, contentChunks: 0, error: e instanceof Error ? e.message : String(e) };
  }
  return { n, status, servedBy, sent, ...readEvents(body), error: undefined };
}

void test('haproxy in front of three serves: SIGTERM to one under streaming load loses no stream, new streams go to the others, it exits drained', { timeout: 300_000, skip: existsSync(haproxyBin) ? false : 'haproxy is not installed (apt-get install haproxy)' }, async (t) => {
  const c = await serveCluster(t, {
    gateways: 3,
    replicas: 2,
    // 30 tokens at 20 tokens/s: a stream lasts 1.5 s, so the signal finds several running.
    simArgs: ['--decode-tokens-per-s', '20'],
    gatewayYaml: `  drain_grace_ms: 6000\n  drain_timeout_ms: ${drainTimeoutMs}`,
  });
  const front = await startHaproxy(t, c.dir, c.gateways);
  const target = c.gateways[1];
  if (target === undefined) throw new Error('three gateways');

  const clients = 6;
  const dispatcher = new Agent({ connections: clients * 2 });
  t.after(() => dispatcher.close());
  let phase: Phase = 'before';
  let stop = false;
  let n = 0;
  const results: StreamResult[] = [];
  const running = new Map<string, number>();
  const loop = async (): Promise<void> => {
    while (!stop) {
      let on = '';
      const r = await stream(front, dispatcher, n++, phase, (g) => {
        on = g;
        running.set(g, (running.get(g) ?? 0) + 1);
      });
      if (on !== '') running.set(on, (running.get(on) ?? 1) - 1);
      results.push(r);
    }
  };
  const loops = Array.from({ length: clients }, loop);
  const servedBy = (g: string): number => results.filter((r) => r.servedBy === g).length;
  await waitFor(() => c.gateways.every((g) => servedBy(g.name) >= 2) && (running.get(target.name) ?? 0) >= 2, {
    timeoutMs: 60_000,
    what: `streams on every gateway and two running on ${target.name} (${JSON.stringify(Object.fromEntries(running))})`,
  });

  const onTarget = running.get(target.name) ?? 0;
  const exited = once(target.proc.child, 'exit');
  phase = 'draining';
  target.proc.child.kill('SIGTERM');
  const [code] = (await Promise.race([exited, new Promise((_, reject) => setTimeout(() => reject(new Error(`${target.name} did not exit: ${target.proc.err.slice(-1500)}`)), drainTimeoutMs + 20_000))])) as [number | null];
  phase = 'exited';
  const atExit = results.length;
  await waitFor(() => results.length >= atExit + 3 * clients, { timeoutMs: 60_000, what: 'streams after the gateway exited' });
  stop = true;
  await Promise.all(loops);

  const broken = results.filter((r) => r.status !== 200 || !r.done || r.finish !== 'length' || r.completionTokens !== maxTokens || r.contentChunks === 0 || r.error !== undefined);
  assert.deepEqual(broken, [], `${broken.length} of ${results.length} streams lost or cut`);
  assert.ok(onTarget >= 1, 'the signal found streams running on the gateway');
  const drainedOn = results.filter((r) => r.servedBy === target.name && r.sent === 'before').length;
  assert.ok(drainedOn >= onTarget, `the streams that were running on ${target.name} all completed (${drainedOn} from before the signal)`);
  const after = results.filter((r) => r.sent === 'exited');
  assert.ok(after.length >= 3 * clients);
  assert.deepEqual(after.filter((r) => r.servedBy === target.name), [], 'nothing goes to the gateway that left');
  assert.deepEqual(new Set(after.map((r) => r.servedBy)), new Set(c.gateways.filter((g) => g !== target).map((g) => g.name)), 'the others take the new streams');

  assert.equal(code, 0, target.proc.err.slice(-2000));
  const drained = loggedEvent(target.proc.err, 'gateway.drained');
  assert.equal(drained?.cut, 0, `drained without cutting a stream: ${JSON.stringify(drained)}`);
  assert.ok(typeof drained.tookMs === 'number' && drained.tookMs < drainTimeoutMs, `drained before gateway.drain_timeout_ms: ${JSON.stringify(drained)}`);
  t.diagnostic(`${results.length} streams; ${onTarget} running on ${target.name} at the signal; drained in ${String(drained.tookMs)} ms; per gateway ${JSON.stringify(Object.fromEntries(c.gateways.map((g) => [g.name, servedBy(g.name)])))}`);
});
