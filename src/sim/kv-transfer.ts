// The sim's part in prefill/decode disaggregation, played as vLLM's NixlConnector plays it. A
// prefill engine asked for `do_remote_decode` computes the prompt, answers one token and says in its
// answer's kv_transfer_params where the blocks are (its engine id, block ids, side-channel host and
// port). A decode engine handed those params reads the blocks from that engine (here: an HTTP pull
// from the prefill sim's side channel, timed by bytes over a configured bandwidth) and then computes
// only the last token. A decode engine refuses params no prefill engine handed out: the pull fails,
// and a made-up engine id or block list is an error rather than a silent recompute.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { LlmgwError } from '../errors/index.js';
import { SimRequestError } from './openai.js';

/** vLLM's KVTransferConfig as the sim reads it from --kv-transfer-config. */
export interface KvTransferConfig {
  readonly kvConnector: 'NixlConnector';
  readonly kvRole: 'kv_producer' | 'kv_consumer' | 'kv_both';
}

const kvRoles = ['kv_producer', 'kv_consumer', 'kv_both'] as const;

/** Parses --kv-transfer-config JSON with vLLM's field names; the sim plays the NIXL connector only. */
export function parseKvTransferConfig(json: string): KvTransferConfig {
  let raw: unknown;
  try {
    raw = JSON.parse(json);
  } catch (e) {
    throw new LlmgwError('LLMGW_SIM_OPTIONS', `--kv-transfer-config: ${JSON.stringify(json)} is not JSON; pass e.g. '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'`, { cause: e });
  }
  const r = typeof raw === 'object' && raw !== null && !Array.isArray(raw) ? (raw as Record<string, unknown>) : undefined;
  if (r === undefined) throw new LlmgwError('LLMGW_SIM_OPTIONS', `--kv-transfer-config: ${json} is not a JSON object`);
  if (r.kv_connector !== 'NixlConnector') {
    throw new LlmgwError('LLMGW_SIM_OPTIONS', `--kv-transfer-config: kv_connector ${JSON.stringify(r.kv_connector)} is not one the sim plays; write "NixlConnector"`);
  }
  const role = r.kv_role;
  if (!kvRoles.some((k) => k === role)) throw new LlmgwError('LLMGW_SIM_OPTIONS', `--kv-transfer-config: kv_role ${JSON.stringify(role)} is not one of ${kvRoles.join(', ')}`);
  return Object.freeze({ kvConnector: 'NixlConnector', kvRole: role as KvTransferConfig['kvRole'] });
}

/** One transfer as /sim/kv-transfers shows it: what went where, and what the engine was sent. */
export interface TransferRecord {
  readonly requestId: string;
  /** offered: a prefill kept blocks for a remote decode; pulled: a decode read them; received: this decode's side. */
  state: 'offered' | 'pulled' | 'received';
  readonly engineId: string;
  readonly blockIds: readonly number[];
  readonly promptTokens: number;
  readonly bytes: number;
  /** The kv_transfer_params the request carried, as the engine received them. */
  readonly params: unknown;
  readonly transferMs?: number;
}

/** How a sim moves KV caches. */
export interface KvTransferOptions {
  readonly config: KvTransferConfig;
  readonly engineId: string;
  /** Bytes of KV cache per token (layers × 2 × kv heads × head dim × dtype bytes; 144 KiB is an 8B GQA model in bf16). */
  readonly bytesPerToken: number;
  /** The link's bandwidth between engines, in bytes per second. */
  readonly bytesPerS: number;
  /** Where this engine's side channel is: its own HTTP address. */
  readonly where: () => { host: string; port: number };
  readonly signal: AbortSignal;
}

// A prefill's blocks wait this long for their decode before they are forgotten (vLLM's
// VLLM_NIXL_ABORT_REQUEST_TIMEOUT frees them after 480 s; a sim keeps records, not memory).
const keptRecords = 1000;

/** A sim's NIXL connector: offers on the prefill side, pulls on the decode side, every transfer on record. */
export class KvTransfers {
  readonly #o: KvTransferOptions;
  readonly #records: TransferRecord[] = [];
  readonly #offered = new Map<string, TransferRecord>();

  constructor(o: KvTransferOptions) {
    this.#o = o;
  }

  /** Every transfer this engine took part in, oldest first. */
  list(): readonly TransferRecord[] {
    return this.#records;
  }

  #keep(r: TransferRecord): void {
    this.#records.push(r);
    if (this.#records.length > keptRecords) {
      const old = this.#records.shift();
      if (old !== undefined && this.#offered.get(old.requestId) === old) this.#offered.delete(old.requestId);
    }
  }

  /** Prefill side: after computing the prompt, the kv_transfer_params the answer carries. */
  offer(requestId: string, promptTokens: number, blockIds: readonly number[], params: unknown): Record<string, unknown> {
    if (this.#o.config.kvRole === 'kv_consumer') throw new SimRequestError('kv_transfer_params: do_remote_decode asked of an engine whose kv_role is kv_consumer; send the prefill to a kv_producer or kv_both engine', { param: 'kv_transfer_params' });
    const r: TransferRecord = { requestId, state: 'offered', engineId: this.#o.engineId, blockIds, promptTokens, bytes: promptTokens * this.#o.bytesPerToken, params };
    this.#offered.set(requestId, r);
    this.#keep(r);
    const { host, port } = this.#o.where();
    // NixlConnector.request_finished's answer, field for field.
    return {
      do_remote_prefill: true,
      do_remote_decode: false,
      remote_block_ids: [...blockIds],
      remote_engine_id: this.#o.engineId,
      remote_request_id: requestId,
      remote_host: host,
      remote_port: port,
      tp_size: 1,
    };
  }

  /** Prefill side of the side channel: a decode engine reads the blocks it was handed. */
  pull(raw: unknown): { promptTokens: number; bytes: number } {
    const b = typeof raw === 'object' && raw !== null ? (raw as Record<string, unknown>) : {};
    const id = typeof b.remote_request_id === 'string' ? b.remote_request_id : '';
    const r = this.#offered.get(id);
    if (r === undefined) throw new SimRequestError(`no blocks are kept for request ${JSON.stringify(id)} on engine ${this.#o.engineId}`, { status: 404, type: 'NotFoundError', param: 'remote_request_id' });
    if (b.remote_engine_id !== r.engineId) throw new SimRequestError(`remote_engine_id ${JSON.stringify(b.remote_engine_id)} is not this engine (${r.engineId})`, { param: 'remote_engine_id' });
    if (JSON.stringify(b.remote_block_ids) !== JSON.stringify(r.blockIds)) throw new SimRequestError(`remote_block_ids are not the blocks kept for request ${id}`, { param: 'remote_block_ids' });
    // Read once: vLLM frees the blocks when the decode side says it has them.
    this.#offered.delete(id);
    r.state = 'pulled';
    return { promptTokens: r.promptTokens, bytes: r.bytes };
  }

  /**
   * Decode side: reads the blocks the params point at, past the `localTokens` this engine already
   * caches, taking their bytes over the bandwidth; resolves with the prompt tokens then held.
   */
  async receive(requestId: string, params: Readonly<Record<string, unknown>>, promptTokens: number, localTokens = 0): Promise<number> {
    if (this.#o.config.kvRole === 'kv_producer') throw new SimRequestError('kv_transfer_params: do_remote_prefill handed to an engine whose kv_role is kv_producer; send the decode to a kv_consumer or kv_both engine', { param: 'kv_transfer_params' });
    const host = params.remote_host;
    const port = params.remote_port;
    const engineId = params.remote_engine_id;
    const blocks = params.remote_block_ids;
    if (typeof host !== 'string' || typeof port !== 'number' || typeof engineId !== 'string' || !Array.isArray(blocks)) {
      throw new SimRequestError('kv_transfer_params: do_remote_prefill without remote_host, remote_port, remote_engine_id and remote_block_ids; pass the prefill answer\'s kv_transfer_params as it returned them', { param: 'kv_transfer_params' });
    }
    const started = performance.now();
    let res: Response;
    try {
      res = await fetch(`http://${host.includes(':') ? `[${host}]` : host}:${port}/sim/kv-transfers/pull`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(params),
        signal: AbortSignal.any([this.#o.signal, AbortSignal.timeout(10_000)]),
      });
    } catch (e) {
      throw new SimRequestError(`kv_transfer_params: prefill engine ${engineId} at ${host}:${port} could not be reached (${e instanceof Error ? e.message : String(e)})`, { param: 'kv_transfer_params' });
    }
    const answer: unknown = await res.json().catch(() => undefined);
    if (res.status !== 200) {
      const why = (answer as { error?: { message?: unknown } } | undefined)?.error?.message;
      throw new SimRequestError(`kv_transfer_params: prefill engine ${engineId} did not hand these blocks over (${typeof why === 'string' ? why : `status ${res.status}`})`, { param: 'kv_transfer_params' });
    }
    const got = answer as { promptTokens?: unknown };
    if (got.promptTokens !== promptTokens) {
      throw new SimRequestError(`kv_transfer_params: the blocks hold ${String(got.promptTokens)} prompt tokens, and this request's prompt has ${promptTokens}; send the decode the same prompt as the prefill`, { param: 'kv_transfer_params' });
    }
    const bytes = Math.max(0, promptTokens - localTokens) * this.#o.bytesPerToken;
    const left = (bytes / this.#o.bytesPerS) * 1000 - (performance.now() - started);
    if (left > 0) await sleep(left, undefined, { signal: this.#o.signal });
    this.#keep({ requestId, state: 'received', engineId, blockIds: blocks.filter((b): b is number => typeof b === 'number'), promptTokens, bytes, params, transferMs: Math.round(performance.now() - started) });
    return promptTokens;
  }
}

/** What a request's kv_transfer_params ask of the engine: nothing, to prefill for a remote decode, or to decode from a remote prefill. */
export type TransferIntent =
  | { readonly kind: 'none' }
  | { readonly kind: 'prefill'; readonly params: Readonly<Record<string, unknown>> }
  | { readonly kind: 'decode'; readonly params: Readonly<Record<string, unknown>> };

/** Reads a request body's kv_transfer_params. */
export function transferIntent(raw: unknown): TransferIntent {
  const p = typeof raw === 'object' && raw !== null ? (raw as Record<string, unknown>).kv_transfer_params : undefined;
  if (p === undefined || p === null) return { kind: 'none' };
  if (typeof p !== 'object' || Array.isArray(p)) throw new SimRequestError(`kv_transfer_params: ${JSON.stringify(p)} is not an object`, { param: 'kv_transfer_params' });
  const params = p as Record<string, unknown>;
  if (params.do_remote_decode === true && params.do_remote_prefill === true) {
    throw new SimRequestError('kv_transfer_params: do_remote_decode and do_remote_prefill are both true; a request is the prefill half or the decode half', { param: 'kv_transfer_params' });
  }
  if (params.do_remote_decode === true) return { kind: 'prefill', params };
  if (params.do_remote_prefill === true) return { kind: 'decode', params };
  return { kind: 'none' };
}

type Route = (req: IncomingMessage, res: ServerResponse, body: () => Promise<unknown>) => Promise<void>;

/** The inspection route (GET /sim/kv-transfers) and, with a connector, the side channel a decode engine pulls from. */
export function kvTransferRoutes(t: KvTransfers | undefined): Record<string, Record<string, Route>> {
  const json = (res: ServerResponse, body: unknown): void => {
    const text = JSON.stringify(body);
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }).end(text);
  };
  return {
    '/sim/kv-transfers': { GET: async (_req, res) => json(res, { data: t?.list() ?? [] }) },
    ...(t === undefined ? {} : { '/sim/kv-transfers/pull': { POST: async (_req, res, body) => json(res, t.pull(await body())) } }),
  };
}
