// The Batch API over the store: /v1/files and /v1/batches as OpenAI shapes them. A batch is created
// `validating`; the runner (runner.ts) moves it on. Times are stored in milliseconds and answered in
// seconds, as OpenAI does.
import { randomBytes } from 'node:crypto';
import { LlmgwError, RequestError } from '../errors/index.js';
import type { BatchStore, FileStore, StoredBatch, StoredFile } from '../store/index.js';
import { parseMultipart } from './multipart.js';

/** OpenAI's 24 hours, the only completion window it offers. */
export const completionWindowMs = 24 * 3_600_000;

const endpoints = ['/v1/chat/completions', '/v1/completions', '/v1/responses', '/v1/embeddings'];

/** An id of OpenAI's form: a prefix and 24 random hex characters. */
export const newId = (prefix: string): string => `${prefix}${randomBytes(12).toString('hex')}`;

const seconds = (ms: number | undefined): number | null => (ms === undefined ? null : Math.floor(ms / 1000));

/** A stored file as OpenAI's FileObject. */
export function fileObject(f: StoredFile): Record<string, unknown> {
  return { id: f.id, object: 'file', bytes: f.bytes, created_at: seconds(f.createdAt), filename: f.filename, purpose: f.purpose, status: 'processed', expires_at: null, status_details: null };
}

/** A stored batch and its counts as OpenAI's Batch. */
export function batchObject(b: StoredBatch, counts: { completed: number; failed: number }): Record<string, unknown> {
  return {
    id: b.id,
    object: 'batch',
    endpoint: b.endpoint,
    errors: b.errors === undefined ? null : { object: 'list', data: JSON.parse(b.errors) as unknown },
    input_file_id: b.inputFileId,
    completion_window: b.completionWindow,
    status: b.status,
    output_file_id: b.outputFileId ?? null,
    error_file_id: b.errorFileId ?? null,
    created_at: seconds(b.createdAt),
    in_progress_at: seconds(b.at.in_progress),
    expires_at: seconds(b.expiresAt),
    finalizing_at: seconds(b.at.finalizing),
    completed_at: seconds(b.at.completed),
    failed_at: seconds(b.at.failed),
    expired_at: seconds(b.at.expired),
    cancelling_at: seconds(b.at.cancelling),
    cancelled_at: seconds(b.at.cancelled),
    request_counts: { total: b.total, completed: counts.completed, failed: counts.failed },
    metadata: b.metadata === undefined ? null : (JSON.parse(b.metadata) as unknown),
    // Not OpenAI's: when the batch last stopped for its key's spent budget (null: it is not paused).
    llmgw_paused_at: seconds(b.at.paused),
  };
}

const notFound = (what: string, id: string): LlmgwError => new LlmgwError('LLMGW_NOT_FOUND', `no ${what} with id ${JSON.stringify(id).slice(0, 80)} for this API key`);

function limitOf(params: URLSearchParams): number {
  const raw = params.get('limit');
  if (raw === null) return 20;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1 || n > 10_000) throw new RequestError('LLMGW_BAD_REQUEST', `limit: ${JSON.stringify(raw).slice(0, 20)} is not a whole number from 1 to 10000`, 'limit');
  return n;
}

function listOf(data: Record<string, unknown>[], limit: number, more: boolean): Record<string, unknown> {
  const first = data[0]?.id ?? null;
  const last = data.at(-1)?.id ?? null;
  return { object: 'list', data: data.slice(0, limit), first_id: first, last_id: more ? (data[limit - 1]?.id ?? last) : last, has_more: more };
}

/** Files and batches for the gateway's routes. */
export class BatchService {
  readonly #files: FileStore;
  readonly #batches: BatchStore;
  readonly #now: () => number;
  /** The largest input file accepted (OpenAI's: 200 MB). */
  readonly maxFileBytes: number;
  readonly #wake: () => void;

  constructor(o: { files: FileStore; batches: BatchStore; maxFileBytes: number; now?: () => number; wake?: () => void }) {
    this.#files = o.files;
    this.#batches = o.batches;
    this.maxFileBytes = o.maxFileBytes;
    this.#now = o.now ?? Date.now;
    this.#wake = o.wake ?? (() => undefined);
  }

  async upload(owner: string, contentType: string | undefined, body: Buffer): Promise<Record<string, unknown>> {
    const form = parseMultipart(contentType, body);
    if (form.file === undefined) throw new RequestError('LLMGW_BAD_REQUEST', 'the form has no file part; send the JSONL as the "file" field', 'file');
    const purpose = form.fields.purpose;
    if (purpose !== 'batch') throw new RequestError('LLMGW_BAD_REQUEST', `purpose: ${JSON.stringify(purpose ?? null)} is not "batch", the only purpose this gateway keeps files for`, 'purpose');
    const text = form.file.data.toString('utf8');
    const f: StoredFile = { id: newId('file-'), owner, purpose, filename: form.file.filename, bytes: form.file.data.length, createdAt: this.#now() };
    await this.#files.put(f, text);
    return fileObject(f);
  }

  async listFiles(owner: string, params: URLSearchParams): Promise<Record<string, unknown>> {
    const limit = limitOf(params);
    const rows = await this.#files.list(owner, { limit: limit + 1, after: params.get('after') ?? undefined, purpose: params.get('purpose') ?? undefined });
    return listOf(rows.map(fileObject), limit, rows.length > limit);
  }

  async file(owner: string, id: string): Promise<Record<string, unknown>> {
    const f = await this.#files.get(owner, id);
    if (f === undefined) throw notFound('file', id);
    return fileObject(f);
  }

  async fileContent(owner: string, id: string): Promise<string> {
    const body = await this.#files.body(owner, id);
    if (body === undefined) throw notFound('file', id);
    return body;
  }

  async deleteFile(owner: string, id: string): Promise<Record<string, unknown>> {
    if (!(await this.#files.delete(owner, id))) throw notFound('file', id);
    return { id, object: 'file', deleted: true };
  }

  async createBatch(owner: string, ownerSha256: string, body: unknown): Promise<Record<string, unknown>> {
    if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new RequestError('LLMGW_BAD_JSON', 'the body is not a JSON object', null);
    const b = body as Record<string, unknown>;
    if (typeof b.input_file_id !== 'string') throw new RequestError('LLMGW_BAD_REQUEST', 'input_file_id: missing; upload the JSONL with POST /v1/files (purpose batch) and send its id', 'input_file_id');
    if (typeof b.endpoint !== 'string' || !endpoints.includes(b.endpoint)) {
      throw new RequestError('LLMGW_BAD_REQUEST', `endpoint: ${JSON.stringify(b.endpoint ?? null)} is not one of ${endpoints.join(', ')}`, 'endpoint');
    }
    if (b.completion_window !== '24h') throw new RequestError('LLMGW_BAD_REQUEST', `completion_window: ${JSON.stringify(b.completion_window ?? null)} is not "24h", the only window offered`, 'completion_window');
    const meta = b.metadata;
    if (meta !== undefined && meta !== null && (typeof meta !== 'object' || Array.isArray(meta) || Object.keys(meta).length > 16 || Object.values(meta).some((v) => typeof v !== 'string'))) {
      throw new RequestError('LLMGW_BAD_REQUEST', 'metadata: must be an object of at most 16 string values', 'metadata');
    }
    const file = await this.#files.get(owner, b.input_file_id);
    if (file === undefined) throw new RequestError('LLMGW_NOT_FOUND', `input_file_id: no file ${JSON.stringify(b.input_file_id).slice(0, 80)} for this API key`, 'input_file_id');
    const now = this.#now();
    const id = newId('batch_');
    await this.#batches.create({
      id,
      owner,
      ownerSha256,
      endpoint: b.endpoint,
      inputFileId: file.id,
      completionWindow: '24h',
      metadata: meta === undefined || meta === null ? undefined : JSON.stringify(meta),
      createdAt: now,
      expiresAt: now + completionWindowMs,
    });
    this.#wake();
    return this.batch(owner, id);
  }

  async batch(owner: string, id: string): Promise<Record<string, unknown>> {
    const b = await this.#batches.get(id, owner);
    if (b === undefined) throw notFound('batch', id);
    return batchObject(b, await this.#batches.counts(id));
  }

  async listBatches(owner: string, params: URLSearchParams): Promise<Record<string, unknown>> {
    const limit = limitOf(params);
    const rows = await this.#batches.list(owner, { limit: limit + 1, after: params.get('after') ?? undefined });
    const data = await Promise.all(rows.map(async (b) => batchObject(b, await this.#batches.counts(b.id))));
    return listOf(data, limit, rows.length > limit);
  }

  /** Moves a batch to cancelling; the runner finishes the lines in flight and ends it cancelled. */
  async cancelBatch(owner: string, id: string): Promise<Record<string, unknown>> {
    const b = await this.#batches.get(id, owner);
    if (b === undefined) throw notFound('batch', id);
    const moved = await this.#batches.change(id, ['validating', 'in_progress'], { status: 'cancelling', at: { cancelling: this.#now() } });
    if (!moved && b.status !== 'cancelling' && b.status !== 'cancelled') {
      throw new RequestError('LLMGW_BAD_REQUEST', `batch ${id} is ${b.status} and can no longer be cancelled`, null);
    }
    this.#wake();
    return this.batch(owner, id);
  }
}
