// A generation request once its prompt is token ids: checked against the context length, run on a
// rank, and answered as vLLM answers, in SSE chunks while it runs or as one body at the end.
import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { continuationOffset } from './continuation.js';
import { SimRequestError, StopMatcher } from './openai.js';
import type { GenerationParams } from './openai.js';
import type { SimOptions } from './options.js';
import { ChatAnswerFields } from './reasoning.js';
import type { FinishReason, RequestAccount } from './scheduler.js';
import { pickRank, requestIdOf } from './sim-context.js';
import type { ModelChoice, SimContext } from './sim-context.js';
import { scriptToken, thinkingStart } from './thinking.js';

const keptAccounts = 1000;

/** One generation request, parsed and tokenized. */
export interface Generation {
  readonly kind: 'chat' | 'completion';
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly params: GenerationParams;
  readonly promptIds: readonly number[];
  readonly model: ModelChoice;
  /** The text of a final assistant message the answer continues ('' for none). */
  readonly continued: string;
  /** The prompt as text, where thinking may start from; undefined when it was sent as ids or continues a message. */
  readonly prompt: string | undefined;
  /** Prompt tokens read from a prefill engine, whether to offer this request's blocks, and the client's kv_transfer_params. */
  readonly transfer: { remote: number; offer: boolean; params?: unknown };
}

/** Runs a generation request and answers it; throws a SimRequestError for one vLLM refuses. */
export function generate(ctx: SimContext, g: Generation): void {
  const { o } = ctx;
  const { params, res } = g;
  const promptLen = g.promptIds.length;
  const { maxTokens, answerTokens } = checkedLengths(o, g.kind, promptLen, params);
  let generated = 0;
  const rank = pickRank(ctx, g.req);
  const id = `${g.kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomBytes(16).toString('hex')}`;
  let offered: Record<string, unknown> | undefined;
  const offerBlocks = (ids: readonly number[]): void => {
    if (g.transfer.offer && ctx.transfers !== undefined) offered = ctx.transfers.offer(requestIdOf(g.req), promptLen, ids.slice(0, Math.ceil(promptLen / o.blockSizeTokens)), g.transfer.params);
  };
  const answer = answerWriter(ctx, g, id);
  const script = ctx.text.script;
  const thinksFrom = script === undefined || g.prompt === undefined ? undefined : thinkingStart(script, g.prompt);
  let finished = false;
  if (params.stream) {
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'x-llmgw-sim-rank': String(rank.rank) });
    res.flushHeaders();
  }
  const onFinish = (reason: FinishReason, a: RequestAccount): void => {
    finished = true;
    ctx.accounts.push({ ...a });
    if (ctx.accounts.length > keptAccounts) ctx.accounts.shift();
    ctx.metrics.observe(a, ctx.baseName);
    if (reason === 'abort') {
      if (!res.writableEnded) res.destroy();
      return;
    }
    answer.finish(reason, a, offered, () => {
      ctx.answered++;
      const n = o.faults.crashAfterRequests;
      if (n !== undefined && ctx.answered >= n) ctx.crash();
    });
  };
  const abort = rank.submit({
    id,
    promptTokenIds: g.promptIds,
    maxTokens,
    loraId: g.model.loraId,
    loraName: g.model.loraName,
    cacheSalt: params.cacheSalt,
    outputOffset: thinksFrom ?? continuationOffset(g.continued, ctx.text.cyclePieces),
    outputToken: thinksFrom === undefined || script === undefined ? undefined : (i) => scriptToken(script, i),
    priority: params.priority,
    remoteComputedTokens: g.transfer.remote,
    onBlocks: offerBlocks,
    onToken: (token) => {
      const stopped = answer.token(ctx.text.pieces.get(token) ?? '');
      generated++;
      const dieAt = o.faults.crashMidStreamAfterTokens;
      if (params.stream && dieAt !== undefined && generated === dieAt) {
        // Queued after this step's writes, so the client has the tokens before the engine is gone.
        setImmediate(ctx.crash);
      }
      return stopped || generated >= answerTokens ? 'stop' : 'continue';
    },
    onFinish,
  });
  // A client that leaves frees its sequence's blocks at the end of the current step, as vLLM aborts it.
  res.on('close', () => {
    if (!finished) abort();
  });
}

/** The request's max_tokens and answer length, after vLLM's refusals of a prompt or request that does not fit. */
function checkedLengths(o: SimOptions, kind: Generation['kind'], promptLen: number, params: GenerationParams): { maxTokens: number; answerTokens: number } {
  const what = kind === 'chat' ? 'messages' : 'prompt';
  if (promptLen === 0) throw new SimRequestError('the prompt encodes to zero tokens; send a non-empty prompt', { param: what });
  if (promptLen >= o.maxModelLen) {
    throw new SimRequestError(
      `This model's maximum context length is ${o.maxModelLen} tokens. However, your request has ${promptLen} input tokens. Please reduce the length of the input ${what}.`,
      { param: what },
    );
  }
  const maxTokens = params.maxTokens ?? o.maxModelLen - promptLen;
  // A real model ends its answer with EOS long before max_model_len. Without this a client that
  // sends no max_tokens waited for the whole context at the decode speed: ten minutes at 50 tokens/s.
  // An explicit max_tokens is generated in full, so tests and benchmarks set output length exactly.
  const answerTokens = params.maxTokens === undefined ? o.answerTokens : Number.POSITIVE_INFINITY;
  if (promptLen + maxTokens > o.maxModelLen) {
    throw new SimRequestError(
      `This model's maximum context length is ${o.maxModelLen} tokens. However, you requested ${promptLen + maxTokens} tokens ` +
        `(${promptLen} in the ${what}, ${maxTokens} in the completion). Please reduce the length of the ${what} or completion.`,
      { param: 'max_tokens' },
    );
  }
  // vLLM's own refusal: a priority means nothing to a first-come-first-served scheduler.
  if (params.priority !== 0 && o.schedulingPolicy !== 'priority') {
    throw new SimRequestError(`Got priority ${params.priority} but Priority scheduling is not enabled.`, { param: 'priority' });
  }
  return { maxTokens, answerTokens };
}

/** How an answer goes out to the client. */
interface AnswerWriter {
  /** Takes one generated token's text (streamed at once when streaming); true when a stop string ended the answer. */
  token(piece: string): boolean;
  /** Sends the rest of the answer, or all of it, and then calls `done`. */
  finish(reason: FinishReason, a: RequestAccount, offered: Record<string, unknown> | undefined, done: () => void): void;
}

/** Writes a generation's answer in vLLM's shapes: SSE chunks when streaming, else one JSON body. */
function answerWriter(ctx: SimContext, g: Generation, id: string): AnswerWriter {
  const { kind, model, params, res } = g;
  const created = Math.floor(Date.now() / 1000);
  const object = kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
  const stop = new StopMatcher(params.stop, params.includeStopStrInOutput);
  // Only chat answers are parsed, as vLLM parses them; a completion's text is the raw output.
  const fields = new ChatAnswerFields(kind === 'chat' ? ctx.o.reasoningParser : undefined);
  let roleSent = false;
  const sse = (payload: unknown): void => {
    if (!res.destroyed) res.write(`data: ${JSON.stringify(payload)}\n\n`);
  };
  const chunk = (text: string, finishReason: FinishReason | null): unknown =>
    kind === 'chat'
      ? { id, object, created, model: model.name, choices: [{ index: 0, delta: text === '' ? {} : { content: text }, logprobs: null, finish_reason: finishReason }] }
      : { id, object, created, model: model.name, choices: [{ index: 0, text, logprobs: null, finish_reason: finishReason, stop_reason: null }] };
  const send = (text: string): void => {
    if (kind !== 'chat') {
      if (text !== '') sse(chunk(text, null));
      return;
    }
    const delta = text === '' ? fields.flush() : fields.push(text);
    if (delta !== undefined) sse({ id, object, created, model: model.name, choices: [{ index: 0, delta, logprobs: null, finish_reason: null }] });
  };
  const sendRole = (): void => {
    if (kind !== 'chat' || roleSent) return;
    roleSent = true;
    sse({ id, object, created, model: model.name, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] });
  };
  return {
    token(piece) {
      const { delta, stopped } = stop.push(piece);
      if (params.stream) {
        sendRole();
        if (delta !== '') send(delta);
      }
      return stopped;
    },
    finish(reason, a, offered, done) {
      const tail = stop.flush();
      if (params.stream) {
        sendRole();
        if (tail !== '') send(tail);
        send('');
        sse(chunk('', reason));
        if (params.includeUsage) sse({ id, object, created, model: model.name, choices: [], usage: usageOf(ctx.o, a) });
        res.end('data: [DONE]\n\n', done);
        return;
      }
      const text = stop.text;
      const choice =
        kind === 'chat'
          ? { index: 0, message: { role: 'assistant', ...fields.whole(text), tool_calls: [] }, logprobs: null, finish_reason: reason, stop_reason: null }
          : { index: 0, text, logprobs: null, finish_reason: reason, stop_reason: null, prompt_logprobs: null };
      const body = JSON.stringify({
        id,
        object: kind === 'chat' ? 'chat.completion' : 'text_completion',
        created,
        model: model.name,
        choices: [choice],
        usage: usageOf(ctx.o, a),
        ...(offered === undefined ? {} : { kv_transfer_params: offered }),
      });
      res.writeHead(200, {
        'content-type': 'application/json',
        'x-llmgw-sim-rank': String(a.rank),
        'x-llmgw-sim-cached-tokens': String(a.cachedTokens),
        'x-llmgw-sim-prefill-tokens': String(a.prefillComputedTokens),
      });
      res.end(body, done);
    },
  };
}

function usageOf(o: SimOptions, a: RequestAccount): Record<string, unknown> {
  return {
    prompt_tokens: a.promptTokens,
    total_tokens: a.promptTokens + a.completionTokens,
    completion_tokens: a.completionTokens,
    // vLLM reports cached tokens only when prompt-token details are enabled and some were cached.
    prompt_tokens_details: o.enablePromptTokensDetails && a.cachedTokens > 0 ? { cached_tokens: a.cachedTokens } : null,
  };
}
