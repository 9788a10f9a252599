// Sending one request to one replica: the body as that replica's engine wants it, the wait for an
// adapter it must load first, and the upstream answers that are the gateway's fault, not the client's.
import type { PriorityClass } from '../admission/index.js';
import { enginePriorityOf } from '../admission/index.js';
import { UpstreamError } from '../errors/index.js';
import type { ReplicaView } from '../routing/index.js';
import { adapterRoute, sendUpstream } from '../upstream/index.js';
import type { UpstreamResponse } from '../upstream/index.js';
import type { GatewayContext } from './context.js';

/** POSTs `body` to `path` on `target` with the gateway's upstream timeouts. */
export function sendToReplica(ctx: GatewayContext, target: ReplicaView, path: string, body: Buffer | string, signal: AbortSignal, requestId?: string): Promise<UpstreamResponse> {
  const u = ctx.o.config.upstream;
  return sendUpstream({ replica: target.id, url: target.url, apiKey: target.apiKey }, path, body, {
    clients: ctx.upstream,
    signal,
    requestId,
    headersTimeoutMs: u.headersTimeoutMs,
    idleTimeoutMs: u.idleTimeoutMs,
  });
}

/**
 * The body for one replica: an adapter some engines name differently (SGLang's lora_path, llama.cpp's
 * lora list) gets its engine's fields over the client's and the gateway's (`added`); an engine that
 * schedules by priority gets the request's class as its integer, and one that does not never sees a
 * `priority` (vLLM without --scheduling-policy priority refuses any but 0); everything else goes as
 * forwardedBody wrote it.
 */
export function bodyFor(
  target: ReplicaView,
  model: string,
  body: Readonly<Record<string, unknown>>,
  added: Readonly<Record<string, unknown>>,
  plain: Buffer | string,
  priority: PriorityClass,
): Buffer | string {
  const fields = {
    ...adapterRoute(target, model)?.requestFields,
    ...(target.schedulesByPriority === true ? { priority: enginePriorityOf(priority) } : Object.hasOwn(body, 'priority') ? { priority: undefined } : {}),
  };
  return Object.keys(fields).length === 0 ? plain : JSON.stringify({ ...body, ...added, ...fields });
}

/**
 * Waits for an adapter load the request joined; a client that leaves stops waiting, not the load,
 * which other requests may share.
 */
export async function adapterReady(ready: Promise<void>, signal: AbortSignal): Promise<void> {
  signal.throwIfAborted();
  let onAbort: (() => void) | undefined;
  try {
    await new Promise<void>((resolve, reject) => {
      onAbort = () => reject(signal.reason);
      signal.addEventListener('abort', onAbort, { once: true });
      ready.then(resolve, reject);
    });
  } finally {
    if (onAbort !== undefined) signal.removeEventListener('abort', onAbort);
  }
}

/** Upstream answers that mean the gateway's own setup is wrong, not the client's request. */
export function upstreamFailure(replica: string, status: number): UpstreamError {
  const why =
    status === 401 || status === 403
      ? `refused the gateway's engine key (status ${status}); the agent and the engine disagree on VLLM_API_KEY`
      : `answered status ${status}`;
  return new UpstreamError('LLMGW_UPSTREAM', replica, `replica ${replica} ${why}`, { status });
}

/** An engine's answer as JSON; undefined when it is not JSON (it goes to the client as it is, with no usage to count). */
export function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    // A non-JSON answer goes to the client as it is; it just has no usage to count.
    return undefined;
  }
}
