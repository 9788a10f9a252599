// `llmgw serve` taken out of a cluster with SIGTERM, as a load balancer's operator does it: every
// stream already running ends with its [DONE], /ready answers 503 as soon as the drain starts, a
// request that still arrives in the grace is served (on a connection that then closes), and the
// process exits 0. A stream longer than gateway.drain_timeout_ms is cut and counted instead.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { Agent, request, type Dispatcher } from 'undici';
import { loggedEvent, simConfig, startServe } from '../support/serve.js';
import { waitFor } from '../support/wait.js';

const streams = 12;

// A streamed chat answer read to its end: the text of its events, or why it broke.
async function stream(port: number, dispatcher: Dispatcher, maxTokens: number, started: () => void): Promise<{ status: number; body: string; error?: string }> {
  const r = await request(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST',
    dispatcher,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'qwen3', stream: true, max_tokens: maxTokens, messages: [{ role: 'user', content: 'keep talking' }] }),
  });
  let body = '';
  try {
    for await (const chunk of r.body) {
      if (body === '') started();
      body += String(chunk);
    }
  } catch (e) {
    return { status: r.statusCode, body, error: e instanceof Error ? e.message : String(e) };
  }
  return { status: r.statusCode, body };
}

void test('serve: SIGTERM under load loses no stream, /ready answers 503 while it drains, a request in the grace is served, exit 0', { timeout: 120_000 }, async (t) => {
  // 40 tokens at 20 tokens/s: every stream is still running when the signal comes.
  const served = await startServe(t, (p) =>
    simConfig(p, { count: 2, args: ['--decode-tokens-per-s', '20'], gatewayExtra: '  drain_grace_ms: 600000\n  drain_timeout_ms: 60000\n' }),
  );
  const { port } = served;
  // One connection per stream, so none waits behind another on the client side.
  const dispatcher = new Agent({ connections: streams * 2 });
  t.after(() => dispatcher.close());
  let running = 0;
  const answers = Array.from({ length: streams }, () => stream(port, dispatcher, 40, () => running++));
  await waitFor(() => running === streams, { timeoutMs: 30_000, what: `${streams} streams under way (${running})` });

  const stopping = served.stop();
  const ready = async (): Promise<{ status: number; body: { status?: string } }> => {
    const r = await request(`http://127.0.0.1:${port}/ready`);
    return { status: r.statusCode, body: (await r.body.json()) as { status?: string } };
  };
  await waitFor(async () => (await ready()).body.status === 'draining', { timeoutMs: 10_000, what: '/ready to say draining' });
  const r = await ready();
  assert.equal(r.status, 503);

  // Sent after the balancer could have seen the 503 but within the grace: served, and its connection
  // closes after it, so the client's next request goes to a gateway that is staying.
  const late = await request(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST',
    dispatcher,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'qwen3', max_tokens: 2, messages: [{ role: 'user', content: 'one more' }] }),
  });
  assert.equal(late.statusCode, 200, await late.body.text());
  assert.equal(late.headers.connection, 'close');

  const done = await Promise.all(answers);
  for (const [i, a] of done.entries()) {
    assert.equal(a.error, undefined, `stream ${i} broke: ${a.error ?? ''}`);
    assert.equal(a.status, 200);
    assert.match(a.body, /data: \[DONE\]\s*$/, `stream ${i} ended with [DONE]`);
  }
  assert.equal(await stopping, 0, served.err().slice(-2000));
  assert.deepEqual(
    Object.fromEntries(Object.entries(loggedEvent(served.err(), 'gateway.drained') ?? {}).filter(([k]) => k === 'cut')),
    { cut: 0 },
  );
});

void test('serve: a stream longer than gateway.drain_timeout_ms is cut and counted, and serve still exits 0', { timeout: 120_000 }, async (t) => {
  const served = await startServe(t, (p) =>
    simConfig(p, { count: 1, args: ['--decode-tokens-per-s', '5'], gatewayExtra: '  drain_grace_ms: 0\n  drain_timeout_ms: 300\n' }),
  );
  const dispatcher = new Agent();
  t.after(() => dispatcher.close());
  let running = 0;
  const answer = stream(served.port, dispatcher, 1_000, () => running++);
  await waitFor(() => running === 1, { timeoutMs: 30_000, what: 'the stream under way' });
  assert.equal(await served.stop(), 0, served.err().slice(-2000));
  const a = await answer;
  assert.doesNotMatch(a.body, /\[DONE\]/, 'the cut stream did not finish');
  assert.equal(loggedEvent(served.err(), 'gateway.drained')?.cut, 1);
});
