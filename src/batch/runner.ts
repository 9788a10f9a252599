// Runs batches: each open batch is leased by one gateway, validated, its unanswered lines sent
// through the gateway's own request path (auth, admission at the batch class, budget, routing,
// ledger) a few at a time, each answer recorded before it counts, then its output and error files
// written. A line refused for a spent budget or a full queue (429, 503) is not an answer: the batch
// pauses on it and sends it again later, so a budget stops a batch without failing it. A gateway
// killed mid-batch leaves its lease to run out; whoever takes the batch next (itself, restarted, or
// another gateway on the same PostgreSQL) skips every line with a recorded answer.
import { setMaxListeners } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../log/index.js';
import type { BatchStore, FileStore, StoredBatch } from '../store/index.js';
import { parseBatchFile, type BatchLine } from './lines.js';
import { newId } from './service.js';

/** What sending one line answered. */
export interface LineAnswer {
  readonly status: number;
  readonly body: string;
  readonly requestId: string;
  /** The refusal's Retry-After, when it said one. */
  readonly retryAfterMs: number | undefined;
}

/** Sends one line through the gateway as the key whose sha256 is given (cli wires it to the gateway's own URL). */
export type LineSender = (r: { endpoint: string; body: string; ownerSha256: string; signal: AbortSignal }) => Promise<LineAnswer>;

/** How the runner runs. */
export interface RunnerOptions {
  readonly files: FileStore;
  readonly batches: BatchStore;
  readonly send: LineSender;
  /** This gateway's name in batches.runner. */
  readonly runnerId: string;
  /** The most requests a batch may hold. */
  readonly maxLines: number;
  /** Lines of one batch in flight at once. */
  readonly concurrency: number;
  /** How often open batches are looked for, and the shortest pause. */
  readonly pollMs: number;
  /** How long a lease lasts without renewal: what a dead gateway's batch waits before another takes it. */
  readonly leaseMs: number;
  /** The longest a paused line waits before it is tried again. */
  readonly maxPauseMs: number;
  readonly log: Logger;
  readonly now?: (() => number) | undefined;
}

// Refusals that say "not now" rather than "never": the line is tried again, not answered.
const isRetryLater = (status: number): boolean => status === 429 || status === 503;

/** Runs every open batch in the store until close(). */
export class BatchRunner {
  readonly #o: RunnerOptions;
  readonly #now: () => number;
  readonly #stop = new AbortController();
  #wake: (() => void) | undefined;
  #loop: Promise<void> | undefined;
  #closing: Promise<void> | undefined;

  constructor(o: RunnerOptions) {
    this.#o = o;
    this.#now = o.now ?? Date.now;
    // Every line in flight listens for close() on its request and its pause (undici drops its
    // listener a tick late), and the poll loop once: Node's warning at 10 is no leak here.
    setMaxListeners(4 * Math.max(1, o.concurrency) + 2, this.#stop.signal);
  }

  /** Starts looking for work; the loop logs its own failures and goes on. */
  start(): void {
    // Deliberately in the background: close() awaits it.
    this.#loop ??= this.#run().catch((e: unknown) => this.#o.log.error({ err: e }, 'batch.runner_failed'));
  }

  /** Looks for work now rather than at the next poll (a batch was created or cancelled). */
  wake(): void {
    this.#wake?.();
  }

  async #run(): Promise<void> {
    const signal = this.#stop.signal;
    while (!signal.aborted) {
      try {
        for (const id of await this.#o.batches.open()) {
          if (signal.aborted) break;
          if (await this.#o.batches.lease(id, this.#o.runnerId, this.#now(), this.#now() + this.#o.leaseMs)) await this.#step(id, signal);
        }
      } catch (e) {
        if (signal.aborted) break;
        this.#o.log.warn({ err: e }, 'batch.step_failed');
      }
      await new Promise<void>((resolve) => {
        const t = setTimeout(done, this.#o.pollMs);
        function done(): void {
          clearTimeout(t);
          signal.removeEventListener('abort', done);
          resolve();
        }
        this.#wake = done;
        signal.addEventListener('abort', done, { once: true });
      });
    }
  }

  async #step(id: string, signal: AbortSignal): Promise<void> {
    const b = await this.#o.batches.get(id);
    if (b === undefined) return;
    const body = await this.#o.files.body(b.owner, b.inputFileId);
    const now = this.#now();
    if (b.status === 'validating') {
      const parsed = parseBatchFile(body ?? '', b.endpoint, this.#o.maxLines);
      if (body === undefined) parsed.errors.push({ code: 'invalid_request', message: `input file ${b.inputFileId} was deleted before the batch started`, param: 'input_file_id', line: null });
      if (parsed.errors.length > 0) await this.#o.batches.change(id, ['validating'], { status: 'failed', at: { failed: now }, errors: JSON.stringify(parsed.errors) });
      else await this.#o.batches.change(id, ['validating'], { status: 'in_progress', at: { in_progress: now }, total: parsed.lines.length });
      this.#o.log.info({ batch: id, lines: parsed.lines.length, errors: parsed.errors.length }, 'batch.validated');
      return this.#step(id, signal);
    }
    // Validated already: a max_lines lowered since must not empty a batch it took.
    const lines = parseBatchFile(body ?? '', b.endpoint, Infinity).lines;
    if (b.status === 'in_progress') {
      if (now >= b.expiresAt) {
        await this.#finish(b, lines, 'expired');
        return;
      }
      await this.#sendAll(b, lines, signal);
      if (signal.aborted) return;
      const after = await this.#o.batches.get(id);
      if (after?.status === 'in_progress' && (await this.#o.batches.answered(id)).size >= lines.length) {
        await this.#o.batches.change(id, ['in_progress'], { status: 'finalizing', at: { finalizing: this.#now(), paused: null } });
      }
      return this.#step(id, signal);
    }
    if (b.status === 'finalizing') await this.#finish(b, lines, 'completed');
    else if (b.status === 'cancelling') await this.#finish(b, lines, 'cancelled');
  }

  // Sends every unanswered line, `concurrency` at a time, until all are answered, the batch leaves
  // in_progress (cancelled), or the runner closes.
  async #sendAll(b: StoredBatch, lines: readonly BatchLine[], signal: AbortSignal): Promise<void> {
    const answered = await this.#o.batches.answered(b.id);
    const pending = lines.filter((l) => !answered.has(l.line));
    let next = 0;
    let moving = true;
    let checkedAt = 0;
    const stillRunning = async (): Promise<boolean> => {
      if (!moving || signal.aborted) return false;
      if (this.#now() - checkedAt < this.#o.pollMs) return true;
      checkedAt = this.#now();
      const cur = await this.#o.batches.get(b.id);
      moving = cur?.status === 'in_progress' && (await this.#o.batches.lease(b.id, this.#o.runnerId, this.#now(), this.#now() + this.#o.leaseMs));
      return moving;
    };
    // Lines waiting out a refusal now: the batch is paused while there is one.
    const refused = { lines: 0 };
    const worker = async (): Promise<void> => {
      while (await stillRunning()) {
        const l = pending[next++];
        if (l === undefined) return;
        await this.#sendLine(b, l, signal, stillRunning, refused);
      }
    };
    // Checked only as lines start, the lease would run out under lines slower than lease_ms, and
    // another gateway would send them again while their answers are still coming: it is renewed on
    // a timer for as long as any line is out.
    const renewal = setInterval(() => {
      stillRunning().catch((e: unknown) => this.#o.log.warn({ err: e, batch: b.id }, 'batch.lease_renewal_failed'));
    }, this.#o.pollMs);
    try {
      await Promise.all(Array.from({ length: Math.max(1, this.#o.concurrency) }, worker));
    } finally {
      clearInterval(renewal);
    }
  }

  async #sendLine(b: StoredBatch, l: BatchLine, signal: AbortSignal, stillRunning: () => Promise<boolean>, refused: { lines: number }): Promise<void> {
    let waiting = false;
    while (await stillRunning()) {
      let a: LineAnswer;
      try {
        a = await this.#o.send({ endpoint: b.endpoint, body: l.body, ownerSha256: b.ownerSha256, signal });
      } catch (e) {
        if (signal.aborted) return;
        // The gateway itself could not be reached (it is closing): the line waits, unanswered.
        this.#o.log.warn({ err: e, batch: b.id, line: l.line }, 'batch.send_failed');
        await sleep(this.#o.pollMs, undefined, { signal }).catch(() => undefined);
        continue;
      }
      if (!isRetryLater(a.status)) {
        await this.#o.batches.record(b.id, { line: l.line, customId: l.customId, statusCode: a.status, requestId: a.requestId, body: a.body });
        // The last refused line through: the batch moves again.
        if (waiting && --refused.lines === 0) await this.#o.batches.change(b.id, ['in_progress'], { at: { paused: null } });
        return;
      }
      if (!waiting) {
        waiting = true;
        if (refused.lines++ === 0) {
          await this.#o.batches.change(b.id, ['in_progress'], { at: { paused: this.#now() } });
          this.#o.log.info({ batch: b.id, line: l.line, status: a.status }, 'batch.paused');
        }
      }
      const waitMs = Math.min(this.#o.maxPauseMs, Math.max(this.#o.pollMs, a.retryAfterMs ?? 0));
      await sleep(waitMs, undefined, { signal }).catch(() => undefined);
    }
  }

  // Writes the output file (2xx answers) and the error file (the rest), then the final status.
  async #finish(b: StoredBatch, lines: readonly BatchLine[], to: 'completed' | 'cancelled' | 'expired'): Promise<void> {
    const results = await this.#o.batches.results(b.id);
    const out: string[] = [];
    const err: string[] = [];
    for (const r of results) {
      let body: unknown;
      try {
        body = JSON.parse(r.body);
      } catch {
        body = r.body;
      }
      const line = JSON.stringify({ id: `batch_req_${r.requestId.replaceAll('-', '')}`, custom_id: r.customId, response: { status_code: r.statusCode, request_id: r.requestId, body }, error: null });
      (r.statusCode >= 200 && r.statusCode < 300 ? out : err).push(line);
    }
    if (to === 'expired') {
      const done = new Set(results.map((r) => r.line));
      for (const l of lines.filter((x) => !done.has(x.line))) {
        err.push(JSON.stringify({ id: newId('batch_req_'), custom_id: l.customId, response: null, error: { code: 'batch_expired', message: 'This request could not be executed before the completion window expired.' } }));
      }
    }
    const now = this.#now();
    const write = async (rows: string[]): Promise<string | undefined> => {
      if (rows.length === 0) return undefined;
      const text = `${rows.join('\n')}\n`;
      const id = newId('file-');
      await this.#o.files.put({ id, owner: b.owner, purpose: 'batch_output', filename: `${b.id}_${rows === out ? 'output' : 'error'}.jsonl`, bytes: Buffer.byteLength(text), createdAt: now }, text);
      return id;
    };
    const outputFileId = await write(out);
    const errorFileId = await write(err);
    const from = to === 'completed' ? (['finalizing'] as const) : to === 'cancelled' ? (['cancelling'] as const) : (['in_progress'] as const);
    await this.#o.batches.change(b.id, from, { status: to, at: { [to]: now, paused: null }, ...(outputFileId === undefined ? {} : { outputFileId }), ...(errorFileId === undefined ? {} : { errorFileId }) });
    await this.#o.batches.unlease(b.id, this.#o.runnerId);
    this.#o.log.info({ batch: b.id, status: to, answered: results.length, total: lines.length }, 'batch.finished');
  }

  /** Stops sending (lines in flight are cut and stay unanswered) and waits for the loop; idempotent. */
  close(): Promise<void> {
    return (this.#closing ??= (async () => {
      this.#stop.abort();
      await this.#loop;
    })());
  }
}
