// The `gateway.batch:` section: how large a batch may be and how the runner paces its lines. Parsed
// once, every problem reported with its path.
import { deepFreeze, type Issues, type MapReader } from '../config/index.js';

/** The Batch API's limits and the runner's pace; the defaults are OpenAI's limits and a gentle pace. */
export interface BatchConfig {
  /** The largest input file POST /v1/files takes; a bigger one is a 413 and nothing of it is kept. */
  readonly maxFileBytes: number;
  /** The most requests one batch may hold; more fail it at validation (too_many_tasks). */
  readonly maxLines: number;
  /** Lines of one batch sent at once. */
  readonly linesInFlight: number;
  /** How often the runner looks for open batches, rereads its batch (a cancel) and renews its lease; the shortest pause. */
  readonly pollIntervalMs: number;
  /** How long a batch's lease lasts without renewal: what a dead gateway's batch waits before another takes it. */
  readonly leaseMs: number;
  /** The longest a refused line (429, 503) waits before it is tried again, whatever its Retry-After says. */
  readonly maxPauseMs: number;
}

/** Defaults of the section. */
export const batchDefaults: BatchConfig = deepFreeze({
  // OpenAI's limit on a batch input file.
  maxFileBytes: 200 * 1024 * 1024,
  maxLines: 50_000,
  // A batch line is admitted at the lowest class, which admission keeps to one waiting request per
  // replica: more in flight only wait in the gateway's queue.
  linesInFlight: 8,
  pollIntervalMs: 500,
  leaseMs: 30_000,
  // A spent day budget says "retry tomorrow": a raised budget is found within this.
  maxPauseMs: 30_000,
});

// A file is kept as one string: V8's longest is about 512 MiB.
const maxStringBytes = 512 * 1024 * 1024;

/** Reads `gateway.batch` (absent: the defaults). */
export function parseBatchSection(m: MapReader | undefined, issues: Issues): BatchConfig {
  const d = batchDefaults;
  if (m === undefined) return d;
  const out = {
    maxFileBytes: m.int('max_file_bytes', d.maxFileBytes, 1024, maxStringBytes),
    maxLines: m.int('max_lines', d.maxLines, 1, 10_000_000),
    linesInFlight: m.int('lines_in_flight', d.linesInFlight, 1, 10_000),
    pollIntervalMs: m.int('poll_interval_ms', d.pollIntervalMs, 1, 60_000),
    leaseMs: m.int('lease_ms', d.leaseMs, 100, 3_600_000),
    maxPauseMs: m.int('max_pause_ms', d.maxPauseMs, 1, 3_600_000),
  };
  // The lease is renewed at most once a poll interval: shorter, it would run out under a live runner
  // and a second gateway would send the same lines.
  if (out.leaseMs < 3 * out.pollIntervalMs) {
    issues.push({
      path: m.at('lease_ms'),
      message: `${out.leaseMs} is under three poll intervals (poll_interval_ms ${out.pollIntervalMs}): the lease would run out between renewals and another gateway would send the same lines; raise lease_ms or lower poll_interval_ms`,
    });
  }
  if (out.maxPauseMs < out.pollIntervalMs) {
    issues.push({
      path: m.at('max_pause_ms'),
      message: `${out.maxPauseMs} is under poll_interval_ms (${out.pollIntervalMs}), the shortest pause; raise max_pause_ms to at least ${out.pollIntervalMs}`,
    });
  }
  return deepFreeze(out);
}

/** The keys of the section, for the gateway's reader. */
export const batchKeys = ['max_file_bytes', 'max_lines', 'lines_in_flight', 'poll_interval_ms', 'lease_ms', 'max_pause_ms'] as const;
