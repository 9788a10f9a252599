// stderr's log lines, gathered and written once a turn of the event loop. A write(2) a line took 9%
// of a loaded gateway's main thread (issue 51); the lines of one turn now take one. Every write is
// synchronous, so none is ever in flight when the process exits: pino's asynchronous destination
// loses the chunk it is retrying when a full pipe's reader is slow and a SIGTERM handler calls
// process.exit. A full pipe (EAGAIN) keeps the lines here and tries again shortly, instead of
// stalling every request behind the reader; past `blockingFromBytes` kept, it waits as a
// synchronous logger would, so memory stays bounded and no line is dropped.
import { writeSync } from 'node:fs';

const retryMs = 5;
const sleeper = new Int32Array(new SharedArrayBuffer(4));

/** A pino destination writing lines to `fd` in batches; `flushSync` writes whatever is kept. */
export class BatchedLines {
  readonly #fd: number;
  readonly #blockingFromBytes: number;
  #kept: string[] = [];
  #scheduled = false;

  constructor(fd: number, blockingFromBytes = 16 * 1024 * 1024) {
    this.#fd = fd;
    this.#blockingFromBytes = blockingFromBytes;
  }

  write(line: string): boolean {
    this.#kept.push(line);
    if (!this.#scheduled) {
      this.#scheduled = true;
      setImmediate(() => this.#flush(false));
    }
    return true;
  }

  /** Writes every kept line now, waiting out a full pipe: at exit, and for a caller that must. */
  flushSync(): void {
    this.#flush(true);
  }

  #flush(wait: boolean): void {
    this.#scheduled = false;
    if (this.#kept.length === 0) return;
    let buf = Buffer.from(this.#kept.join(''), 'utf8');
    this.#kept = [];
    while (buf.length > 0) {
      try {
        buf = buf.subarray(writeSync(this.#fd, buf));
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EAGAIN') throw e;
        if (!wait && buf.length < this.#blockingFromBytes) {
          // The unwritten rest goes first next time, before lines logged meanwhile.
          this.#kept = [buf.toString('utf8')];
          this.#scheduled = true;
          setTimeout(() => this.#flush(false), retryMs);
          return;
        }
        Atomics.wait(sleeper, 0, 0, 1);
      }
    }
  }
}

let stderr: BatchedLines | undefined;

/** The process's one batched stderr, flushed whole when the process exits however it exits. */
export function stderrLines(): BatchedLines {
  if (stderr === undefined) {
    const lines = new BatchedLines(2);
    process.once('exit', () => lines.flushSync());
    stderr = lines;
  }
  return stderr;
}
