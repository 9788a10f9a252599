// The sim's HTTP front: vLLM's OpenAI-compatible routes over one or more DP ranks. It listens at
// once and answers /health 503 until the tokenizer is loaded (and any injected load delay is over),
// so a supervisor sees the same "up but loading" phase a real engine has.
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { LlmgwError } from '../errors/index.js';
import { silentLogger } from '../log/index.js';
import type { Logger } from '../log/index.js';
import { continuationOffset } from './continuation.js';
import { readJson, renderChecked, sendJson } from './http-io.js';
import { KvTransfers, kvTransferRoutes, transferIntent } from './kv-transfer.js';
import { embeddingRoutes } from './embeddings.js';
import { createSimMetrics } from './metrics.js';
import { ChatAnswerFields } from './reasoning.js';
import { scriptToken, thinkingScript, thinkingStart } from './thinking.js';
import type { ThinkingScript } from './thinking.js';
import type { SimMetrics } from './metrics.js';
import {
  SimRequestError,
  StopMatcher,
  errorBody,
  parseChatRequest,
  parseCompletionRequest,
  parseDetokenizeRequest,
  parseTokenizeRequest,
} from './openai.js';
import type { GenerationParams } from './openai.js';
import { resolveSimOptions } from './options.js';
import type { SimOptions } from './options.js';
import { RankEvents } from './rank-events.js';
import { RankScheduler } from './scheduler.js';
import type { FinishReason, RequestAccount } from './scheduler.js';
import { loadTokenizer } from './tokenizer.js';
import type { SimTokenizer } from './tokenizer.js';

/** A running sim. */
export interface SimHandle {
  /** http://host:port of the API. */
  readonly url: string;
  readonly port: number;
  /** Settles when loading is over (rejects if the tokenizer failed to load). */
  readonly ready: Promise<void>;
  /** Waits until every KV event batch produced so far has been handed to its socket. */
  eventsIdle(): Promise<void>;
  close(): Promise<void>;
}

// The generated text: deterministic and made of whole-word tokens, so a stream's pieces are
// exactly the tokens counted and any test can predict what comes out.
const generatedText = ' the quick brown fox jumps over the lazy dog and';

const keptAccounts = 1000;

interface ModelChoice {
  readonly name: string;
  readonly loraId: number | null;
  readonly loraName: string | null;
}

// vLLM names a request by the client's X-Request-Id when it sends one; the two halves of a
// disaggregated request share it, and the prefill keeps its blocks under it.
function requestIdOf(req: IncomingMessage): string {
  const h = req.headers['x-request-id'];
  return typeof h === 'string' && h !== '' ? h : randomBytes(16).toString('hex');
}

/** Starts a sim: listens at once, loads the tokenizer in the background. */
export async function startSim(input: Partial<SimOptions> & { model: string }): Promise<SimHandle> {
  const o = resolveSimOptions(input);
  const log: Logger = o.log ?? silentLogger;
  const baseName = o.servedModelNames[0] ?? o.model;
  let hashSeed = o.hashSeed;
  if (hashSeed === undefined) {
    // vLLM draws NONE_HASH from os.urandom when PYTHONHASHSEED is unset; no gateway can match it.
    hashSeed = randomBytes(16).toString('hex');
    log.warn({ hashSeed }, 'sim.hash_seed.random');
  }
  const closed = new AbortController();
  let cycle: number[] = [];
  const pieces = new Map<number, string>();
  // The cycle's tokens as text, to find where a continued answer resumes.
  let cyclePieces: string[] = [];
  let script: ThinkingScript | undefined;

  const ranks: RankScheduler[] = [];
  const events: (RankEvents | undefined)[] = [];
  const kv = o.kvEvents;
  const publishing = kv !== undefined && kv.enableKvCacheEvents && kv.publisher === 'zmq';
  for (let rank = 0; rank < o.dataParallelSize; rank++) {
    const sink = publishing
      ? new RankEvents({
          rank,
          config: kv,
          eventFormat: o.kvEventsFormat,
          replayFraming: o.kvReplayFraming,
          dropSeqs: new Set(o.faults.dropEventBatches),
          restartAfterBatches: o.faults.restartEventsAfterBatches,
          onRestart: () => ranks[rank]?.forgetCacheSilently(),
          log,
        })
      : undefined;
    events.push(sink);
    ranks.push(
      new RankScheduler({
        rank,
        blockSizeTokens: o.blockSizeTokens,
        numBlocks: o.kvCapacityBlocks,
        maxNumSeqs: o.maxNumSeqs,
        maxNumBatchedTokens: o.maxNumBatchedTokens,
        byPriority: o.schedulingPolicy === 'priority',
        prefillTokensPerS: o.prefillTokensPerS,
        decodeTokensPerS: o.decodeTokensPerS,
        enablePrefixCaching: o.enablePrefixCaching,
        hashSeed,
        hashAlgo: o.hashAlgo,
        emitEvents: publishing,
        intBlockHashes: o.intBlockHashes,
        outputToken: (i) => cycle[i % cycle.length] ?? 0,
        onEvents: (evs) => sink?.publish(evs),
      }),
    );
  }
  const metrics: SimMetrics = createSimMetrics(ranks, baseName);
  let where = { host: o.host, port: o.port };
  const engineId = randomBytes(8).toString('hex');
  const kvt = o.kvTransfer;
  const transfers =
    kvt === undefined ? undefined : new KvTransfers({ config: kvt, engineId, bytesPerToken: o.kvBytesPerToken, bytesPerS: o.kvTransferBytesPerS, where: () => where, signal: closed.signal });
  // vLLM without a connector ignores kv_transfer_params with a warning, and so does the sim; with
  // one, a decode half first reads its blocks from the prefill engine that holds them.
  const remoteTokens = async (req: IncomingMessage, raw: unknown, ids: readonly number[], model: ModelChoice, salt: string | null): Promise<{ remote: number; offer: boolean }> => {
    const intent = transferIntent(raw);
    if (intent.kind === 'none') return { remote: 0, offer: false };
    if (transfers === undefined) {
      log.warn({ kind: intent.kind }, 'sim.kv_transfer_params_ignored');
      return { remote: 0, offer: false };
    }
    if (intent.kind === 'prefill') return { remote: 0, offer: true };
    // As vLLM's connector: blocks the decode engine already caches are not read again.
    const local = Math.max(0, ...ranks.map((r) => r.cachedPrefixTokens(ids, model.loraName, salt)));
    return { remote: await transfers.receive(requestIdOf(req), intent.params, ids.length, local), offer: false };
  };
  const accounts: RequestAccount[] = [];
  let tokenizer: SimTokenizer | undefined;
  let healthFailing = false;
  let answered = 0;
  let rr = 0;
  const timers: NodeJS.Timeout[] = [];

  const ready = (async () => {
    const started = performance.now();
    // vLLM fails at start when its event sockets cannot bind; so does the sim, not at its first step.
    await Promise.all(events.map((e) => e?.ready()));
    const tk = await loadTokenizer(o.tokenizer);
    if (closed.signal.aborted) {
      await tk.close();
      return;
    }
    cycle = await tk.encode(generatedText, false);
    for (const id of new Set(cycle)) pieces.set(id, await tk.decode([id], false));
    cyclePieces = cycle.map((id) => pieces.get(id) ?? '');
    if (o.thinkTokens > 0) {
      script = await thinkingScript((t) => tk.encode(t, false), cycle, o.thinkTokens, (id) => pieces.get(id) ?? '');
      for (const id of new Set(script.head)) if (!pieces.has(id)) pieces.set(id, await tk.decode([id], false));
    }
    const left = o.faults.loadTimeMs - (performance.now() - started);
    if (left > 0) await sleep(left, undefined, { signal: closed.signal });
    tokenizer = tk;
    log.info({ model: baseName, tokenizer: tk.name, tookMs: Math.round(performance.now() - started) }, 'sim.ready');
    const failAfter = o.faults.failHealthAfterMs;
    if (failAfter !== undefined) {
      timers.push(
        setTimeout(() => {
          healthFailing = true;
          log.warn({ afterMs: failAfter }, 'sim.fault.health_failing');
        }, failAfter),
      );
    }
  })();
  // The handle exposes `ready`; this keeps an unawaited load failure from killing the process.
  ready.catch((e: unknown) => {
    if (!closed.signal.aborted) log.error({ err: e }, 'sim.load_failed');
  });

  // vLLM numbers adapters from 1 in the order they were added: that number is BlockStored.lora_id.
  const loras = new Map<string, { id: number; path: string }>(o.loraModules.map((l, i) => [l.name, { id: i + 1, path: l.path }]));
  let nextLoraId = loras.size + 1;
  // Adapters being loaded: a second load of one is refused as vLLM refuses a duplicate, not run twice.
  const loading = new Set<string>();
  const resolveModel = (name: string | undefined): ModelChoice => {
    if (name === undefined || o.servedModelNames.includes(name)) return { name: name ?? baseName, loraId: null, loraName: null };
    const lora = loras.get(name);
    if (lora !== undefined) return { name, loraId: lora.id, loraName: name };
    throw new SimRequestError(`The model \`${name}\` does not exist.`, { status: 404, type: 'NotFoundError', param: 'model' });
  };
  const loraName = (raw: unknown): string => {
    const n = (raw as { lora_name?: unknown } | null)?.lora_name;
    if (typeof n !== 'string' || n === '') throw new SimRequestError('lora_name: a non-empty string is required', { param: 'lora_name' });
    return n;
  };

  const pickRank = (req: IncomingMessage): RankScheduler => {
    const h = req.headers['x-data-parallel-rank'];
    if (typeof h === 'string') {
      const r = ranks[Number(h)];
      if (!/^\d+$/.test(h) || r === undefined) {
        throw new SimRequestError(`X-data-parallel-rank: ${JSON.stringify(h)} is not a rank below --data-parallel-size ${ranks.length}`);
      }
      return r;
    }
    // vLLM's internal DP balancer sends each request to the least loaded rank; ties rotate.
    let best: RankScheduler | undefined;
    for (let i = 0; i < ranks.length; i++) {
      const r = ranks[(rr + i) % ranks.length];
      if (r !== undefined && (best === undefined || r.load < best.load)) best = r;
    }
    rr = (rr + 1) % ranks.length;
    if (best === undefined) throw new LlmgwError('LLMGW_SIM_NO_RANK', 'no DP rank exists; --data-parallel-size must be at least 1');
    return best;
  };

  const crash = (): void => {
    log.error({ afterRequests: answered }, 'sim.fault.crash');
    if (o.onCrash !== undefined) o.onCrash();
    else void close().catch(() => undefined);
  };

  const usageOf = (a: RequestAccount): Record<string, unknown> => ({
    prompt_tokens: a.promptTokens,
    total_tokens: a.promptTokens + a.completionTokens,
    completion_tokens: a.completionTokens,
    // vLLM reports cached tokens only when prompt-token details are enabled and some were cached.
    prompt_tokens_details: o.enablePromptTokensDetails && a.cachedTokens > 0 ? { cached_tokens: a.cachedTokens } : null,
  });

  const generate = (
    kind: 'chat' | 'completion',
    req: IncomingMessage,
    res: ServerResponse,
    params: GenerationParams,
    promptIds: readonly number[],
    model: ModelChoice,
    continued: string,
    prompt: string | undefined,
    transfer: { remote: number; offer: boolean; params?: unknown } = { remote: 0, offer: false },
  ): void => {
    const promptLen = promptIds.length;
    if (promptLen === 0) throw new SimRequestError('the prompt encodes to zero tokens; send a non-empty prompt', { param: kind === 'chat' ? 'messages' : 'prompt' });
    if (promptLen >= o.maxModelLen) {
      throw new SimRequestError(
        `This model's maximum context length is ${o.maxModelLen} tokens. However, your request has ${promptLen} input tokens. Please reduce the length of the input ${kind === 'chat' ? 'messages' : 'prompt'}.`,
        { param: kind === 'chat' ? 'messages' : 'prompt' },
      );
    }
    const maxTokens = params.maxTokens ?? o.maxModelLen - promptLen;
    // A real model ends its answer with EOS long before max_model_len. Without this a client that
    // sends no max_tokens waited for the whole context at the decode speed: ten minutes at 50 tokens/s.
    // An explicit max_tokens is generated in full, so tests and benchmarks set output length exactly.
    const answerTokens = params.maxTokens === undefined ? o.answerTokens : Number.POSITIVE_INFINITY;
    let generated = 0;
    if (promptLen + maxTokens > o.maxModelLen) {
      throw new SimRequestError(
        `This model's maximum context length is ${o.maxModelLen} tokens. However, you requested ${promptLen + maxTokens} tokens ` +
          `(${promptLen} in the ${kind === 'chat' ? 'messages' : 'prompt'}, ${maxTokens} in the completion). Please reduce the length of the ${kind === 'chat' ? 'messages' : 'prompt'} or completion.`,
        { param: 'max_tokens' },
      );
    }
    // vLLM's own refusal: a priority means nothing to a first-come-first-served scheduler.
    if (params.priority !== 0 && o.schedulingPolicy !== 'priority') {
      throw new SimRequestError(`Got priority ${params.priority} but Priority scheduling is not enabled.`, { param: 'priority' });
    }
    const rank = pickRank(req);
    const id = `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomBytes(16).toString('hex')}`;
    let offered: Record<string, unknown> | undefined;
    const offerBlocks = (ids: readonly number[]): void => {
      if (transfer.offer && transfers !== undefined) offered = transfers.offer(requestIdOf(req), promptLen, ids.slice(0, Math.ceil(promptLen / o.blockSizeTokens)), transfer.params);
    };
    const created = Math.floor(Date.now() / 1000);
    const object = kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
    const stop = new StopMatcher(params.stop, params.includeStopStrInOutput);
    // Only chat answers are parsed, as vLLM parses them; a completion's text is the raw output.
    const fields = new ChatAnswerFields(kind === 'chat' ? o.reasoningParser : undefined);
    const thinksFrom = script === undefined || prompt === undefined ? undefined : thinkingStart(script, prompt);
    let finished = false;
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
    if (params.stream) {
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'x-llmgw-sim-rank': String(rank.rank) });
      res.flushHeaders();
    }
    const onFinish = (reason: FinishReason, a: RequestAccount): void => {
      finished = true;
      accounts.push({ ...a });
      if (accounts.length > keptAccounts) accounts.shift();
      metrics.observe(a, baseName);
      if (reason === 'abort') {
        if (!res.writableEnded) res.destroy();
        return;
      }
      const done = (): void => {
        answered++;
        const n = o.faults.crashAfterRequests;
        if (n !== undefined && answered >= n) crash();
      };
      const tail = stop.flush();
      if (params.stream) {
        sendRole();
        if (tail !== '') send(tail);
        send('');
        sse(chunk('', reason));
        if (params.includeUsage) sse({ id, object, created, model: model.name, choices: [], usage: usageOf(a) });
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
        usage: usageOf(a),
        ...(offered === undefined ? {} : { kv_transfer_params: offered }),
      });
      res.writeHead(200, {
        'content-type': 'application/json',
        'x-llmgw-sim-rank': String(a.rank),
        'x-llmgw-sim-cached-tokens': String(a.cachedTokens),
        'x-llmgw-sim-prefill-tokens': String(a.prefillComputedTokens),
      });
      res.end(body, done);
    };
    const abort = rank.submit({
      id,
      promptTokenIds: promptIds,
      maxTokens,
      loraId: model.loraId,
      loraName: model.loraName,
      cacheSalt: params.cacheSalt,
      outputOffset: thinksFrom ?? continuationOffset(continued, cyclePieces),
      outputToken: thinksFrom === undefined || script === undefined ? undefined : (i) => scriptToken(script as ThinkingScript, i),
      priority: params.priority,
      remoteComputedTokens: transfer.remote,
      onBlocks: offerBlocks,
      onToken: (token) => {
        const { delta, stopped } = stop.push(pieces.get(token) ?? '');
        if (params.stream) {
          sendRole();
          if (delta !== '') send(delta);
        }
        generated++;
        const dieAt = o.faults.crashMidStreamAfterTokens;
        if (params.stream && dieAt !== undefined && generated === dieAt) {
          // Queued after this step's writes, so the client has the tokens before the engine is gone.
          setImmediate(crash);
        }
        return stopped || generated >= answerTokens ? 'stop' : 'continue';
      },
      onFinish,
    });
    // A client that leaves frees its sequence's blocks at the end of the current step, as vLLM aborts it.
    res.on('close', () => {
      if (!finished) abort();
    });
  };

  const tokenizerOrBusy = (): SimTokenizer => {
    if (tokenizer === undefined) throw new SimRequestError('the model is still loading; retry when /health answers 200', { status: 503, type: 'ServiceUnavailableError' });
    return tokenizer;
  };

  // body() is the parsed JSON; bytes() the text it was parsed from (read once for both).
  const routes: Record<string, Record<string, (req: IncomingMessage, res: ServerResponse, body: () => Promise<unknown>, bytes: () => Promise<Buffer>) => Promise<void>>> = {
    '/health': {
      GET: async (_req, res) => {
        if (tokenizer !== undefined && !healthFailing) res.writeHead(200).end();
        else sendJson(res, 503, errorBody(healthFailing ? 'engine is unhealthy' : 'Loading model', 'ServiceUnavailableError', 503));
      },
    },
    '/metrics': {
      GET: async (_req, res) => {
        const text = await metrics.registry.metrics();
        res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(text);
      },
    },
    '/version': { GET: async (_req, res) => sendJson(res, 200, { version: 'llmgw-sim' }) },
    '/v1/models': {
      GET: async (_req, res) => {
        const created = Math.floor(Date.now() / 1000);
        const card = (id: string, root: string, parent: string | null) => ({ id, object: 'model', created, owned_by: 'vllm', root, parent, max_model_len: o.maxModelLen, permission: [] });
        sendJson(res, 200, {
          object: 'list',
          data: [...o.servedModelNames.map((n) => card(n, o.model, null)), ...[...loras].map(([name, l]) => card(name, l.path, baseName))],
        });
      },
    },
    '/v1/chat/completions': {
      POST: async (req, res, body, bytes) => {
        const tk = tokenizerOrBusy();
        const r = parseChatRequest(await body(), await bytes());
        const model = resolveModel(r.model);
        const text = await renderChecked(tk, r.render, o.trustRequestChatTemplate);
        const ids = await tk.encode(text, r.render.addSpecialTokens);
        const raw = await body();
        const transfer = { ...(await remoteTokens(req, raw, ids, model, r.cacheSalt)), params: (raw as { kv_transfer_params?: unknown }).kv_transfer_params };
        const continued = r.render.continueFinalMessage ? (r.render.messages.at(-1)?.content ?? '') : '';
        generate('chat', req, res, r, ids, model, continued, r.render.continueFinalMessage ? undefined : text, transfer);
      },
    },
    '/v1/completions': {
      POST: async (req, res, body) => {
        const tk = tokenizerOrBusy();
        const r = parseCompletionRequest(await body());
        const model = resolveModel(r.model);
        const ids = 'ids' in r.prompt ? r.prompt.ids : await tk.encode(r.prompt.text, r.addSpecialTokens);
        const raw = await body();
        const transfer = { ...(await remoteTokens(req, raw, ids, model, r.cacheSalt)), params: (raw as { kv_transfer_params?: unknown }).kv_transfer_params };
        const text = 'text' in r.prompt ? r.prompt.text : undefined;
        generate('completion', req, res, r, ids, model, text ?? '', text, transfer);
      },
    },
    ...embeddingRoutes({ ...o, dimensions: o.embeddingDimensions, tokenizer: tokenizerOrBusy, model: (name) => resolveModel(name).name, signal: closed.signal }),
    '/tokenize': {
      POST: async (_req, res, body, bytes) => {
        const tk = tokenizerOrBusy();
        const r = parseTokenizeRequest(await body(), await bytes());
        resolveModel(r.model);
        const ids =
          r.kind === 'chat'
            ? await tk.encode(await renderChecked(tk, r.render, o.trustRequestChatTemplate), r.render.addSpecialTokens)
            : await tk.encode(r.prompt, r.addSpecialTokens);
        sendJson(res, 200, { count: ids.length, max_model_len: o.maxModelLen, tokens: ids, token_strs: r.returnTokenStrs ? await tk.tokenStrs(ids) : null });
      },
    },
    '/detokenize': {
      POST: async (_req, res, body) => {
        const tk = tokenizerOrBusy();
        const r = parseDetokenizeRequest(await body());
        resolveModel(r.model);
        sendJson(res, 200, { prompt: await tk.decode(r.tokens, false) });
      },
    },
    '/reset_prefix_cache': {
      POST: async (_req, res) => {
        const refused = ranks.filter((r) => !r.resetPrefixCache()).map((r) => r.rank);
        // vLLM answers 200 either way and only logs a refusal; the header tells a test which it was.
        if (refused.length > 0) log.warn({ ranks: refused }, 'sim.reset_prefix_cache.refused_blocks_in_use');
        res.writeHead(200, { 'x-llmgw-sim-reset': refused.length > 0 ? 'refused' : 'ok' }).end();
      },
    },
    ...(o.allowRuntimeLoraUpdating
      ? {
          // vLLM's runtime adapter routes, present only with VLLM_ALLOW_RUNTIME_LORA_UPDATING; plain-text success bodies as vLLM's.
          '/v1/load_lora_adapter': {
            POST: async (_req: IncomingMessage, res: ServerResponse, body: () => Promise<unknown>) => {
              const raw = await body();
              const name = loraName(raw);
              const path = (raw as { lora_path?: unknown }).lora_path;
              if (typeof path !== 'string' || path === '') throw new SimRequestError('lora_path: a non-empty string is required', { param: 'lora_path' });
              if (loras.has(name) || loading.has(name) || o.servedModelNames.includes(name)) {
                throw new SimRequestError(`The lora adapter '${name}' has already been loaded.`, { param: 'lora_name' });
              }
              loading.add(name);
              try {
                // Reading the weights and moving them to the device: the cost a router pays once per replica.
                if (o.loraLoadTimeMs > 0) await sleep(o.loraLoadTimeMs, undefined, { signal: closed.signal });
              } finally {
                loading.delete(name);
              }
              if (o.faults.failLoraLoads?.includes(name) === true) {
                throw new SimRequestError(`Loading lora ${name} failed: No adapter found for ${path}`, { param: 'lora_path' });
              }
              loras.set(name, { id: nextLoraId++, path });
              log.info({ adapter: name, id: nextLoraId - 1 }, 'sim.lora.loaded');
              res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' }).end(`Success: LoRA adapter '${name}' added successfully.`);
            },
          },
          '/v1/unload_lora_adapter': {
            POST: async (_req: IncomingMessage, res: ServerResponse, body: () => Promise<unknown>) => {
              const name = loraName(await body());
              if (!loras.delete(name)) throw new SimRequestError(`The lora adapter '${name}' cannot be found.`, { status: 404, type: 'NotFoundError', param: 'lora_name' });
              res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' }).end(`Success: LoRA adapter '${name}' removed successfully.`);
            },
          },
        }
      : {}),
    ...kvTransferRoutes(transfers),
    '/sim/requests': {
      GET: async (req, res) => {
        const want = new URL(req.url ?? '/', 'http://sim').searchParams.get('id');
        sendJson(res, 200, { data: want === null ? accounts : accounts.filter((a) => a.id === want) });
      },
    },
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    if (o.faults.hang) return; // the hang fault: the connection stays open and nothing is ever sent
    const path = new URL(req.url ?? '/', 'http://sim').pathname;
    if (o.apiKey !== undefined && path.startsWith('/v1') && req.method !== 'OPTIONS' && req.headers.authorization !== `Bearer ${o.apiKey}`) {
      // vLLM's AuthenticationMiddleware body, exactly.
      sendJson(res, 401, { error: 'Unauthorized' });
      return;
    }
    const route = routes[path];
    if (route === undefined) {
      sendJson(res, 404, { detail: 'Not Found' });
      return;
    }
    const fn = route[req.method ?? 'GET'];
    if (fn === undefined) {
      sendJson(res, 405, { detail: 'Method Not Allowed' });
      return;
    }
    let read: Promise<{ value: unknown; bytes: Buffer }> | undefined;
    const once = (): Promise<{ value: unknown; bytes: Buffer }> => (read ??= readJson(req));
    try {
      await fn(
        req,
        res,
        async () => (await once()).value,
        async () => (await once()).bytes,
      );
    } catch (e) {
      if (e instanceof SimRequestError) {
        if (!res.headersSent) sendJson(res, e.status, errorBody(e.message, e.type, e.status, e.param));
        else res.destroy();
        return;
      }
      log.error({ path, err: e }, 'sim.request_failed');
      if (!res.headersSent) sendJson(res, 500, errorBody(e instanceof Error ? e.message : String(e), 'InternalServerError', 500));
      else res.destroy();
    }
  };

  const server: Server = createServer((req, res) => {
    void handle(req, res);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, o.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const hostForUrl = o.host.includes(':') ? `[${o.host}]` : o.host === '0.0.0.0' ? '127.0.0.1' : o.host;
  where = { host: o.host === '0.0.0.0' || o.host === '' ? '127.0.0.1' : o.host, port };
  log.info({ host: o.host, port, model: baseName, dataParallelSize: o.dataParallelSize }, 'sim.listening');

  let closing: Promise<void> | undefined;
  const close = (): Promise<void> =>
    (closing ??= (async () => {
      closed.abort();
      for (const t of timers) clearTimeout(t);
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      for (const r of ranks) r.close();
      await Promise.all(events.map((e) => e?.close()));
      await ready.catch(() => undefined);
      await tokenizer?.close();
    })());

  return {
    url: `http://${hostForUrl}:${port}`,
    port,
    ready,
    eventsIdle: async () => {
      await Promise.all(events.map((e) => e?.whenIdle()));
    },
    close,
  };
}
