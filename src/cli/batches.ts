// The Batch API wired for `llmgw serve`: the service the gateway's routes call, and the runner that
// sends each line to this gateway's own URL at the batch priority, as the key that created the batch.
import { randomUUID } from 'node:crypto';
import { request } from 'undici';
import { BatchRunner, BatchService, InnerKeys, type BatchConfig } from '../batch/index.js';
import type { Logger } from '../log/index.js';
import type { Store } from '../store/index.js';

/** The batch service and, once the gateway listens, its runner. */
export interface Batches {
  readonly service: BatchService;
  readonly innerKeyOf: (authorization: string | undefined) => string | undefined;
  /** Starts the runner against the gateway at `url`. */
  start(url: URL): void;
  close(): Promise<void>;
}

/** Builds the Batch API over `store` with the limits of gateway.batch; nothing runs until start(). */
export function batchesFor(store: Store, o: { runnerId: string; log: Logger; config: BatchConfig }): Batches {
  const keys = new InnerKeys();
  const c = o.config;
  let runner: BatchRunner | undefined;
  const service = new BatchService({ files: store.files, batches: store.batches, maxFileBytes: c.maxFileBytes, wake: () => runner?.wake() });
  return {
    service,
    innerKeyOf: (a) => keys.sha256Of(a),
    start(url) {
      runner = new BatchRunner({
        files: store.files,
        batches: store.batches,
        runnerId: o.runnerId,
        maxLines: c.maxLines,
        concurrency: c.linesInFlight,
        pollMs: c.pollIntervalMs,
        leaseMs: c.leaseMs,
        maxPauseMs: c.maxPauseMs,
        log: o.log,
        send: async ({ endpoint, body, ownerSha256, signal }) => {
          const r = await request(new URL(endpoint, url), {
            method: 'POST',
            headers: { 'content-type': 'application/json', authorization: keys.authorization(ownerSha256), 'x-llmgw-priority': 'batch' },
            body,
            signal,
          });
          const text = await r.body.text();
          const retry = Number(r.headers['retry-after']);
          const requestId = r.headers['x-request-id'];
          return { status: r.statusCode, body: text, requestId: typeof requestId === 'string' ? requestId : randomUUID(), retryAfterMs: Number.isFinite(retry) ? retry * 1000 : undefined };
        },
      });
      runner.start();
    },
    close: async () => runner?.close(),
  };
}
