// What the sim's route handlers share, handed to each as one explicit object: the resolved
// options, the DP ranks, and the state that loading and requests change. The lookups every
// generation route makes (which model, which rank, the tokenizer once loaded) live beside it.
import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { LlmgwError } from '../errors/index.js';
import type { Logger } from '../log/index.js';
import type { KvTransfers } from './kv-transfer.js';
import type { SimMetrics } from './metrics.js';
import { SimRequestError } from './openai.js';
import type { SimOptions } from './options.js';
import type { RankScheduler, RequestAccount } from './scheduler.js';
import type { ThinkingScript } from './thinking.js';
import type { SimTokenizer } from './tokenizer.js';

/** One route's handler: body() is the parsed JSON; bytes() the text it was parsed from (read once for both). */
export type SimRoute = (req: IncomingMessage, res: ServerResponse, body: () => Promise<unknown>, bytes: () => Promise<Buffer>) => Promise<void>;

/** The generated text as token ids and their pieces, filled in once the tokenizer has loaded. */
export interface AnswerText {
  cycle: number[];
  readonly pieces: Map<number, string>;
  // The cycle's tokens as text, to find where a continued answer resumes.
  cyclePieces: string[];
  script: ThinkingScript | undefined;
}

/** The sim's state, shared by its route handlers. */
export interface SimContext {
  readonly o: SimOptions;
  readonly log: Logger;
  /** The first served model name, which metrics and logs use. */
  readonly baseName: string;
  readonly ranks: readonly RankScheduler[];
  readonly metrics: SimMetrics;
  readonly transfers: KvTransfers | undefined;
  /** Aborted when the sim closes. */
  readonly signal: AbortSignal;
  readonly text: AnswerText;
  /** The accounts of the last finished requests, oldest first, for /sim/requests. */
  readonly accounts: RequestAccount[];
  readonly loras: Map<string, { id: number; path: string }>;
  // Adapters being loaded: a second load of one is refused as vLLM refuses a duplicate, not run twice.
  readonly loading: Set<string>;
  nextLoraId: number;
  /** Undefined while loading: the routes that need it answer 503 meanwhile. */
  tokenizer: SimTokenizer | undefined;
  healthFailing: boolean;
  /** Requests answered in full, which the crash-after-requests fault counts. */
  answered: number;
  /** Where the next search for the least loaded rank starts. */
  nextRank: number;
  /** The crash fault: the engine goes away. */
  crash(): void;
}

/** The model a request named: a served name or a LoRA adapter. */
export interface ModelChoice {
  readonly name: string;
  readonly loraId: number | null;
  readonly loraName: string | null;
}

// vLLM names a request by the client's X-Request-Id when it sends one; the two halves of a
// disaggregated request share it, and the prefill keeps its blocks under it.
export function requestIdOf(req: IncomingMessage): string {
  const h = req.headers['x-request-id'];
  return typeof h === 'string' && h !== '' ? h : randomBytes(16).toString('hex');
}

/** The served model or adapter `name` means (the base model when it is absent); 404 for any other. */
export function resolveModel(ctx: SimContext, name: string | undefined): ModelChoice {
  if (name === undefined || ctx.o.servedModelNames.includes(name)) return { name: name ?? ctx.baseName, loraId: null, loraName: null };
  const lora = ctx.loras.get(name);
  if (lora !== undefined) return { name, loraId: lora.id, loraName: name };
  throw new SimRequestError(`The model \`${name}\` does not exist.`, { status: 404, type: 'NotFoundError', param: 'model' });
}

/** The tokenizer, or a 503 while the model is still loading. */
export function tokenizerOrBusy(ctx: SimContext): SimTokenizer {
  if (ctx.tokenizer === undefined) throw new SimRequestError('the model is still loading; retry when /health answers 200', { status: 503, type: 'ServiceUnavailableError' });
  return ctx.tokenizer;
}

/** The rank a request runs on: the one X-data-parallel-rank names, else the least loaded. */
export function pickRank(ctx: SimContext, req: IncomingMessage): RankScheduler {
  const ranks = ctx.ranks;
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
    const r = ranks[(ctx.nextRank + i) % ranks.length];
    if (r !== undefined && (best === undefined || r.load < best.load)) best = r;
  }
  ctx.nextRank = (ctx.nextRank + 1) % ranks.length;
  if (best === undefined) throw new LlmgwError('LLMGW_SIM_NO_RANK', 'no DP rank exists; --data-parallel-size must be at least 1');
  return best;
}
