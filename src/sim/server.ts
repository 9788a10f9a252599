// The sim's HTTP front: vLLM's OpenAI-compatible routes over one or more DP ranks. It listens at
// once and answers /health 503 until the tokenizer is loaded (and any injected load delay is over),
// so a supervisor sees the same "up but loading" phase a real engine has.
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { silentLogger } from '../log/index.js';
import type { Logger } from '../log/index.js';
import { embeddingRoutes } from './embeddings.js';
import { readJson, sendJson } from './http-io.js';
import { KvTransfers, kvTransferRoutes } from './kv-transfer.js';
import { createSimMetrics } from './metrics.js';
import { SimRequestError, errorBody } from './openai.js';
import { resolveSimOptions } from './options.js';
import type { SimOptions } from './options.js';
import { RankEvents } from './rank-events.js';
import { chatCompletions, completions } from './routes-generation.js';
import { health, listModels, resetPrefixCache, scrapeMetrics, simRequests, version } from './routes-engine.js';
import { loadLoraAdapter, unloadLoraAdapter } from './routes-lora.js';
import { detokenize, tokenize } from './routes-tokenize.js';
import { RankScheduler } from './scheduler.js';
import { resolveModel, tokenizerOrBusy } from './sim-context.js';
import type { AnswerText, SimContext, SimRoute } from './sim-context.js';
import { loadTokenizer } from './tokenizer.js';
import { thinkingScript } from './thinking.js';

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
  const text: AnswerText = { cycle: [], pieces: new Map(), cyclePieces: [], script: undefined };
  const { ranks, events } = rankSchedulers(o, hashSeed, log, text);
  let where = { host: o.host, port: o.port };
  const engineId = randomBytes(8).toString('hex');
  const kvt = o.kvTransfer;
  const transfers =
    kvt === undefined ? undefined : new KvTransfers({ config: kvt, engineId, bytesPerToken: o.kvBytesPerToken, bytesPerS: o.kvTransferBytesPerS, where: () => where, signal: closed.signal });
  // vLLM numbers adapters from 1 in the order they were added: that number is BlockStored.lora_id.
  const loras = new Map<string, { id: number; path: string }>(o.loraModules.map((l, i) => [l.name, { id: i + 1, path: l.path }]));
  const ctx: SimContext = {
    o,
    log,
    baseName,
    ranks,
    metrics: createSimMetrics(ranks, baseName),
    transfers,
    signal: closed.signal,
    text,
    accounts: [],
    loras,
    loading: new Set(),
    nextLoraId: loras.size + 1,
    tokenizer: undefined,
    healthFailing: false,
    answered: 0,
    nextRank: 0,
    crash: () => {
      log.error({ afterRequests: ctx.answered }, 'sim.fault.crash');
      if (o.onCrash !== undefined) o.onCrash();
      else void close().catch(() => undefined);
    },
  };
  const timers: NodeJS.Timeout[] = [];
  const ready = loadModel(ctx, events, timers, closed.signal);
  // The handle exposes `ready`; this keeps an unawaited load failure from killing the process.
  ready.catch((e: unknown) => {
    if (!closed.signal.aborted) log.error({ err: e }, 'sim.load_failed');
  });

  const routes = routeTable(ctx);
  const server: Server = createServer((req, res) => {
    void handle(ctx, routes, req, res);
  });
  const port = await listen(server, o);
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
      await ctx.tokenizer?.close();
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

/** One scheduler per DP rank, each with its KV event publisher when events are published over ZMQ. */
function rankSchedulers(o: SimOptions, hashSeed: string, log: Logger, text: AnswerText): { ranks: RankScheduler[]; events: (RankEvents | undefined)[] } {
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
        outputToken: (i) => text.cycle[i % text.cycle.length] ?? 0,
        onEvents: (evs) => sink?.publish(evs),
      }),
    );
  }
  return { ranks, events };
}

/**
 * Loads the model: binds the event sockets, loads the tokenizer and encodes the generated text,
 * waits out any injected load delay, then makes the sim ready (and arms the failing-health fault).
 */
async function loadModel(ctx: SimContext, events: readonly (RankEvents | undefined)[], timers: NodeJS.Timeout[], signal: AbortSignal): Promise<void> {
  const { o, log, text } = ctx;
  const started = performance.now();
  // vLLM fails at start when its event sockets cannot bind; so does the sim, not at its first step.
  await Promise.all(events.map((e) => e?.ready()));
  const tk = await loadTokenizer(o.tokenizer);
  if (signal.aborted) {
    await tk.close();
    return;
  }
  text.cycle = await tk.encode(generatedText, false);
  for (const id of new Set(text.cycle)) text.pieces.set(id, await tk.decode([id], false));
  text.cyclePieces = text.cycle.map((id) => text.pieces.get(id) ?? '');
  if (o.thinkTokens > 0) {
    const script = await thinkingScript((t) => tk.encode(t, false), text.cycle, o.thinkTokens, (id) => text.pieces.get(id) ?? '');
    text.script = script;
    for (const id of new Set(script.head)) if (!text.pieces.has(id)) text.pieces.set(id, await tk.decode([id], false));
  }
  const left = o.faults.loadTimeMs - (performance.now() - started);
  if (left > 0) await sleep(left, undefined, { signal });
  ctx.tokenizer = tk;
  log.info({ model: ctx.baseName, tokenizer: tk.name, tookMs: Math.round(performance.now() - started) }, 'sim.ready');
  const failAfter = o.faults.failHealthAfterMs;
  if (failAfter !== undefined) {
    timers.push(
      setTimeout(() => {
        ctx.healthFailing = true;
        log.warn({ afterMs: failAfter }, 'sim.fault.health_failing');
      }, failAfter),
    );
  }
}

/** Path to method to handler: each handler lives in the routes-*.ts file named for what it serves. */
function routeTable(ctx: SimContext): Record<string, Record<string, SimRoute>> {
  const { o } = ctx;
  return {
    '/health': { GET: (_req, res) => health(ctx, res) },
    '/metrics': { GET: (_req, res) => scrapeMetrics(ctx, res) },
    '/version': { GET: (_req, res) => version(res) },
    '/v1/models': { GET: (_req, res) => listModels(ctx, res) },
    '/v1/chat/completions': { POST: (req, res, body, bytes) => chatCompletions(ctx, req, res, body, bytes) },
    '/v1/completions': { POST: (req, res, body) => completions(ctx, req, res, body) },
    ...embeddingRoutes({ ...o, dimensions: o.embeddingDimensions, tokenizer: () => tokenizerOrBusy(ctx), model: (name) => resolveModel(ctx, name).name, signal: ctx.signal }),
    '/tokenize': { POST: (_req, res, body, bytes) => tokenize(ctx, res, body, bytes) },
    '/detokenize': { POST: (_req, res, body) => detokenize(ctx, res, body) },
    '/reset_prefix_cache': { POST: (_req, res) => resetPrefixCache(ctx, res) },
    ...(o.allowRuntimeLoraUpdating
      ? {
          '/v1/load_lora_adapter': { POST: (_req: IncomingMessage, res: ServerResponse, body: () => Promise<unknown>) => loadLoraAdapter(ctx, res, body) },
          '/v1/unload_lora_adapter': { POST: (_req: IncomingMessage, res: ServerResponse, body: () => Promise<unknown>) => unloadLoraAdapter(ctx, res, body) },
        }
      : {}),
    ...kvTransferRoutes(ctx.transfers),
    '/sim/requests': { GET: (req, res) => simRequests(ctx, req, res) },
  };
}

/** Answers one HTTP request: the faults and auth first, then its route, then a refusal's error body. */
async function handle(ctx: SimContext, routes: Record<string, Record<string, SimRoute>>, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const { o, log } = ctx;
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
}

/** Listens on the configured host and port; resolves with the port bound. */
async function listen(server: Server, o: SimOptions): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, o.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return (server.address() as AddressInfo).port;
}
