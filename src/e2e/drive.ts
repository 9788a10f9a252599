// Drives a trace against a gateway as clients would: each request is sent at its arrival time (or,
// for a later turn, once the previous answer is back), streamed, and timed from send to its first
// event (TTFT) and to its last byte. What the engine reported (usage, with cached tokens) and where
// the gateway sent it (x-llmgw-replica, x-llmgw-route) are kept per request.
import { setMaxListeners } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, request } from 'undici';
import type { Trace } from './workload.js';

/** One request's outcome. */
export interface RequestResult {
  readonly id: number;
  readonly status: number;
  readonly sentMs: number;
  readonly ttftMs: number | undefined;
  readonly e2eMs: number;
  readonly replica: string;
  readonly route: string;
  readonly promptTokens: number | undefined;
  readonly cachedTokens: number;
  readonly completionTokens: number;
  readonly receipt: string | undefined;
  readonly error: string | undefined;
  /** Gaps between the answer's successive content events, as the client saw them (inter-token latency). */
  readonly itlMs: readonly number[];
}

interface Usage {
  prompt_tokens?: unknown;
  completion_tokens?: unknown;
  prompt_tokens_details?: { cached_tokens?: unknown } | null;
}

const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
const header = (v: string | string[] | undefined): string => (Array.isArray(v) ? v.join(',') : (v ?? ''));

async function once(
  gateway: URL,
  dispatcher: Agent,
  body: string,
  o: { id: number; sentMs: number; timeoutMs: number; signal: AbortSignal },
): Promise<RequestResult> {
  const t0 = performance.now();
  const stop = new AbortController();
  const timer = setTimeout(() => stop.abort(new Error(`no answer within ${o.timeoutMs} ms`)), o.timeoutMs);
  const onAbort = (): void => stop.abort(o.signal.reason);
  o.signal.addEventListener('abort', onAbort, { once: true });
  let ttftMs: number | undefined;
  let usage: Usage | undefined;
  const itlMs: number[] = [];
  let lastTokenAt: number | undefined;
  try {
    const res = await request(new URL('/v1/chat/completions', gateway), {
      method: 'POST',
      dispatcher,
      headers: { 'content-type': 'application/json' },
      body,
      signal: stop.signal,
    });
    let pending = '';
    res.body.setEncoding('utf8');
    for await (const chunk of res.body as AsyncIterable<string>) {
      const now = performance.now();
      ttftMs ??= now - t0;
      pending += chunk;
      let cut = pending.indexOf('\n\n');
      while (cut >= 0) {
        const event = pending.slice(0, cut);
        pending = pending.slice(cut + 2);
        // A content event is a token (or a few); the gap since the previous one is what a reader waits.
        if (event.includes('"content":"') && !event.includes('"content":""')) {
          if (lastTokenAt !== undefined) itlMs.push(now - lastTokenAt);
          lastTokenAt = now;
        }
        if (event.includes('"usage"') && event.startsWith('data: ')) {
          const parsed = JSON.parse(event.slice(6)) as { usage?: Usage | null };
          if (parsed.usage !== undefined && parsed.usage !== null) usage = parsed.usage;
        }
        cut = pending.indexOf('\n\n');
      }
    }
    return {
      id: o.id,
      status: res.statusCode,
      sentMs: o.sentMs,
      ttftMs: res.statusCode === 200 ? ttftMs : undefined,
      e2eMs: performance.now() - t0,
      replica: header(res.headers['x-llmgw-replica']),
      route: header(res.headers['x-llmgw-route']),
      promptTokens: num(usage?.prompt_tokens),
      cachedTokens: num(usage?.prompt_tokens_details?.cached_tokens) ?? 0,
      completionTokens: num(usage?.completion_tokens) ?? 0,
      receipt: res.headers['x-llmgw-receipt'] === undefined ? undefined : header(res.headers['x-llmgw-receipt']),
      error: res.statusCode === 200 ? undefined : pending.slice(0, 300),
      itlMs,
    };
  } catch (e) {
    return {
      id: o.id,
      status: 0,
      sentMs: o.sentMs,
      ttftMs: undefined,
      e2eMs: performance.now() - t0,
      replica: '',
      route: '',
      promptTokens: undefined,
      cachedTokens: 0,
      completionTokens: 0,
      receipt: undefined,
      error: e instanceof Error ? e.message : String(e),
      itlMs,
    };
  } finally {
    clearTimeout(timer);
    o.signal.removeEventListener('abort', onAbort);
  }
}

/** Sends every request of `trace` to `gateway` on schedule; resolves with all results in trace order. */
export async function driveTrace(
  trace: Trace,
  gateway: URL,
  o: { model: string; timeoutMs: number; signal: AbortSignal },
): Promise<{ results: RequestResult[]; wallMs: number }> {
  const dispatcher = new Agent({ connections: 1024, keepAliveTimeout: 30_000 });
  // Every request in flight listens for the run's abort: hundreds at once is the design, not a leak.
  setMaxListeners(2 * trace.requests.length + 16, o.signal);
  const start = performance.now();
  const done = new Map<number, Promise<RequestResult>>();
  try {
    for (const r of trace.requests) {
      const body = JSON.stringify({
        model: o.model,
        messages: r.messages,
        max_tokens: r.maxTokens,
        stream: true,
        stream_options: { include_usage: true },
      });
      const prior = r.after === undefined ? undefined : done.get(r.after);
      const run = async (): Promise<RequestResult> => {
        const wait = start + r.atMs - performance.now();
        if (wait > 0) await sleep(wait, undefined, { signal: o.signal });
        await prior;
        return once(gateway, dispatcher, body, { id: r.id, sentMs: performance.now() - start, timeoutMs: o.timeoutMs, signal: o.signal });
      };
      done.set(r.id, run());
    }
    const results = await Promise.all(trace.requests.map((r) => done.get(r.id) ?? Promise.reject(new Error(`request ${r.id} was never started`))));
    return { results, wallMs: performance.now() - start };
  } finally {
    await dispatcher.close();
  }
}
