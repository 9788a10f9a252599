// A tiny vLLM-like engine for gateway tests: OpenAI chat and completions (streaming or not, with
// usage), /tokenize over UTF-8 bytes, /metrics, and switches for the failures the gateway must survive.
// A chat offered tools and not answering a tool's result calls the first tool, as a model would.
import { createServer } from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface FakeEngine {
  readonly url: URL;
  readonly id: string;
  /** Bodies and authorization headers of every generation request received. */
  readonly seen: { path: string; authorization: string | undefined; body: Record<string, unknown> }[];
  /** Requests whose client went away before the answer ended. */
  aborted: number;
  /** Behaviour of the next generation requests. */
  mode: 'ok' | 'status-500' | 'die-mid-stream' | 'hang' | 'slow-stream' | 'held';
  /** In 'held' mode the stream waits after its first event until this is called. */
  release: () => void;
  tokenizeCalls: number;
  waiting: number;
  close(): Promise<void>;
}

/** Token ids of a request as this fake tokenizes them: the UTF-8 bytes of role and content per message. */
export function fakeTokens(body: Record<string, unknown>): number[] {
  if (typeof body.prompt === 'string') return [...Buffer.from(body.prompt)];
  const msgs = Array.isArray(body.messages) ? (body.messages as { role: string; content: string }[]) : [];
  return [...Buffer.from(msgs.map((m) => `<${m.role}>${m.content}`).join('') + '<assistant>')];
}

async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  for await (const c of req as AsyncIterable<Buffer>) chunks.push(c);
  return JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
}

/** Starts a fake engine on 127.0.0.1:0; `apiKey` set: it demands it like VLLM_API_KEY does. */
export async function startFakeEngine(o: { id: string; apiKey?: string; cachedTokens?: (body: Record<string, unknown>) => number }): Promise<FakeEngine> {
  const sockets = new Set<import('node:net').Socket>();
  const engine: FakeEngine = {
    url: new URL('http://127.0.0.1/'),
    id: o.id,
    seen: [],
    aborted: 0,
    mode: 'ok',
    tokenizeCalls: 0,
    waiting: 0,
    release: () => undefined,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const handler = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const path = req.url ?? '/';
    if (path === '/metrics') {
      res.end(`# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name="m"} ${engine.waiting}\n`);
      return;
    }
    if (o.apiKey !== undefined && req.headers.authorization !== `Bearer ${o.apiKey}`) {
      res.writeHead(401, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: 'Unauthorized' }));
      return;
    }
    const body = await readJson(req);
    if (path === '/tokenize') {
      engine.tokenizeCalls++;
      const tokens = fakeTokens(body);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ count: tokens.length, max_model_len: 1 << 20, tokens, token_strs: null }));
      return;
    }
    engine.seen.push({ path, authorization: req.headers.authorization, body });
    res.on('close', () => {
      if (!res.writableFinished) engine.aborted++;
    });
    if (engine.mode === 'status-500') {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: 'engine broke', type: 'InternalServerError', code: 500 } }));
      return;
    }
    if (engine.mode === 'hang') return;
    const chat = path === '/v1/chat/completions';
    const promptTokens = fakeTokens(body).length;
    const usage = {
      prompt_tokens: promptTokens,
      completion_tokens: 3,
      total_tokens: promptTokens + 3,
      prompt_tokens_details: { cached_tokens: o.cachedTokens?.(body) ?? 0 },
    };
    const words = ['Hello', ' from', ` ${o.id}`];
    const tool = chat ? toolToCall(body) : undefined;
    if (tool !== undefined) {
      answerWithCall(res, body, tool, usage);
      return;
    }
    if (body.stream !== true) {
      const choice = chat
        ? { index: 0, message: { role: 'assistant', content: words.join('') }, finish_reason: 'stop' }
        : { index: 0, text: words.join(''), finish_reason: 'stop' };
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: 'x1', object: chat ? 'chat.completion' : 'text_completion', created: 1, model: body.model, choices: [choice], usage }));
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
    const obj = chat ? 'chat.completion.chunk' : 'text_completion';
    const send = (data: unknown): void => void res.write(`data: ${JSON.stringify(data)}\n\n`);
    for (const [i, w] of words.entries()) {
      // The last word's chunk ends the choice, as vLLM's does.
      const finish = i === words.length - 1 ? 'stop' : null;
      const choice = chat ? { index: 0, delta: i === 0 ? { role: 'assistant', content: w } : { content: w }, finish_reason: finish } : { index: 0, text: w, finish_reason: finish };
      send({ id: 'x1', object: obj, created: 1, model: body.model, choices: [choice] });
      if (engine.mode === 'die-mid-stream') {
        // FIN after the data, not a reset that could overtake it: the gateway has the first event
        // and then sees the stream end unfinished, as when an engine process is killed mid-answer.
        req.socket.end();
        return;
      }
      if (engine.mode === 'slow-stream') await new Promise((r) => setTimeout(r, 200));
      if (engine.mode === 'held' && i === 0) await new Promise<void>((r) => (engine.release = r));
      if (res.destroyed) return;
    }
    const so = body.stream_options as { include_usage?: boolean } | undefined;
    if (so?.include_usage === true) send({ id: 'x1', object: obj, created: 1, model: body.model, choices: [], usage });
    res.end('data: [DONE]\n\n');
  };
  const server = createServer((req, res) => {
    handler(req, res).catch(() => res.destroy());
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  Object.assign(engine, { url: new URL(`http://127.0.0.1:${port}/`) });
  return engine;
}

/** The arguments the fake engine's tool call carries, in the two pieces it streams them in. */
export const fakeCallArguments = ['{"city": ', '"Paris", "days": 1.0}'];

function toolToCall(body: Record<string, unknown>): string | undefined {
  const tools = Array.isArray(body.tools) ? (body.tools as { function?: { name?: string } }[]) : [];
  const msgs = Array.isArray(body.messages) ? (body.messages as { role?: string }[]) : [];
  if (body.tool_choice === 'none' || msgs.at(-1)?.role === 'tool') return undefined;
  return tools[0]?.function?.name;
}

function answerWithCall(res: ServerResponse, body: Record<string, unknown>, name: string, usage: unknown): void {
  const args = fakeCallArguments.join('');
  if (body.stream !== true) {
    const message = { role: 'assistant', content: null, tool_calls: [{ id: 'call_fake1', type: 'function', function: { name, arguments: args } }] };
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ id: 'x1', object: 'chat.completion', created: 1, model: body.model, choices: [{ index: 0, message, finish_reason: 'tool_calls' }], usage }));
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
  const send = (delta: unknown, finish: string | null): void =>
    void res.write(`data: ${JSON.stringify({ id: 'x1', object: 'chat.completion.chunk', created: 1, model: body.model, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`);
  send({ role: 'assistant', tool_calls: [{ index: 0, id: 'call_fake1', type: 'function', function: { name, arguments: '' } }] }, null);
  for (const piece of fakeCallArguments) send({ tool_calls: [{ index: 0, function: { arguments: piece } }] }, null);
  send({}, 'tool_calls');
  res.write(`data: ${JSON.stringify({ id: 'x1', object: 'chat.completion.chunk', created: 1, model: body.model, choices: [], usage })}\n\n`);
  res.end('data: [DONE]\n\n');
}
