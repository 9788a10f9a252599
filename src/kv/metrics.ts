// Per-engine metrics of the KV intake, added by wrapping: `KvMetrics.open` builds an
// EngineEventStream whose status and batch callbacks are counted on the way to the owner's, and
// reads the stream's own counters (blocks held, last sequence, verification) when /metrics is
// scraped. Nothing inside the transport, sequencer, decoder or mirror knows it is measured.
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { RESET_REASONS, type KvStatus, type Verification } from './delta.js';
import { EngineEventStream, type EngineEventStreamOptions } from './event-stream.js';

/** How KvMetrics is built. */
export interface KvMetricsOptions {
  readonly registry: Registry;
  /**
   * Requests in flight per engine (the router's count): an engine is expected to publish while it
   * serves, and one that does not for silentAfterMs is reported silent. Without it nothing is.
   */
  readonly inFlight?: (engineId: string) => number;
  readonly silentAfterMs?: number;
  readonly now?: () => number;
}

/** One engine's view for `llmgw doctor`, status pages and the agent's report. */
export interface KvEngineHealth {
  readonly engine: string;
  readonly silent: boolean;
  /** ms since the engine's last applied batch; null before the first. */
  readonly lastBatchAgeMs: number | null;
  readonly verification: Verification;
}

interface Heard {
  lastBatchAt: number | undefined;
  // When requests were first seen in flight with no batch since: the start of "expected to publish".
  busySince: number | undefined;
}

interface Tracked {
  readonly stream: EngineEventStream;
  readonly heard: Heard;
}

const outcomes: readonly Verification[] = ['pending', 'verified', 'mismatch'];

/** The llmgw_kv_* metrics of every engine stream it opens, on one registry. */
export class KvMetrics {
  readonly #o: KvMetricsOptions;
  readonly #now: () => number;
  readonly #streams = new Map<string, Tracked>();
  readonly #events: Counter<'engine'>;
  readonly #batches: Counter<'engine'>;
  readonly #decodeFailures: Counter<'engine'>;
  readonly #gaps: Counter<'engine'>;
  readonly #replaysAsked: Counter<'engine'>;
  readonly #replaysFilled: Counter<'engine'>;
  readonly #resets: Counter<'engine' | 'reason'>;
  readonly #lag: Histogram<'engine'>;

  constructor(o: KvMetricsOptions) {
    this.#o = o;
    this.#now = o.now ?? Date.now;
    const registers = [o.registry];
    const counter = (name: string, help: string): Counter<'engine'> => new Counter({ name, help, labelNames: ['engine'], registers });
    this.#events = counter('llmgw_kv_events_received_total', 'KV events in batches applied to the mirror, replayed ones included.');
    this.#batches = counter('llmgw_kv_batches_received_total', 'KV event batches applied to the mirror, replayed ones included.');
    this.#decodeFailures = counter('llmgw_kv_decode_failures_total', 'Messages counted and skipped as malformed (framing, topic, sequence frame or payload).');
    this.#gaps = counter('llmgw_kv_gaps_total', 'Sequence numbers skipped on the live socket (PUB/SUB drops silently).');
    this.#replaysAsked = counter('llmgw_kv_replays_requested_total', 'Replays asked of the engine (after a gap, or from 0 on a late join).');
    this.#replaysFilled = counter('llmgw_kv_replays_filled_total', 'Replays that returned the missing batches.');
    this.#resets = new Counter({
      name: 'llmgw_kv_resets_total',
      help: 'Times an engine rank\'s mirrored blocks were thrown away, by reason (engine-restart, replay-gap, over-capacity, ...).',
      labelNames: ['engine', 'reason'],
      registers,
    });
    this.#lag = new Histogram({
      name: 'llmgw_kv_apply_lag_seconds',
      help: 'From the engine stamping a batch to our mirror applying it (clocks of two hosts: skew shows here too).',
      labelNames: ['engine'],
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30],
      registers,
    });
    const streams = (): Iterable<[string, Tracked]> => this.#live();
    new Gauge({
      name: 'llmgw_kv_held_blocks',
      help: 'Blocks the engine\'s mirror holds, over its ranks and tiers.',
      labelNames: ['engine'],
      registers,
      collect() {
        this.reset();
        for (const [engine, t] of streams()) this.set({ engine }, t.stream.stats().mirror.blocks);
      },
    });
    new Gauge({
      name: 'llmgw_kv_last_sequence',
      help: 'The last sequence number applied, per data-parallel rank (absent before the first).',
      labelNames: ['engine', 'rank'],
      registers,
      collect() {
        this.reset();
        for (const [engine, t] of streams()) {
          for (const [rank, r] of t.stream.stats().ranks.entries()) if (r.lastSeq !== null) this.set({ engine, rank: String(rank) }, r.lastSeq);
        }
      },
    });
    new Gauge({
      name: 'llmgw_kv_hash_verification',
      help: '1 for the engine\'s current hash verification outcome: pending, verified, or mismatch (another seed or algorithm).',
      labelNames: ['engine', 'outcome'],
      registers,
      collect() {
        this.reset();
        for (const [engine, t] of streams()) {
          const v = t.stream.verification;
          for (const outcome of outcomes) this.set({ engine, outcome }, v === outcome ? 1 : 0);
        }
      },
    });
    const health = (engine: string, t: Tracked): KvEngineHealth => this.#health(engine, t);
    new Gauge({
      name: 'llmgw_kv_engine_silent',
      help: `1 when the engine has had requests in flight for ${(o.silentAfterMs ?? 60_000) / 1000} s without publishing a KV event: its prefixes are unknown to routing.`,
      labelNames: ['engine'],
      registers,
      collect() {
        this.reset();
        for (const [engine, t] of streams()) this.set({ engine }, health(engine, t).silent ? 1 : 0);
      },
    });
  }

  /** Builds and tracks one engine's stream; its facts are counted, then handed to `o`'s own callbacks. */
  open(o: EngineEventStreamOptions): EngineEventStream {
    const engine = o.engineId;
    const heard: Heard = { lastBatchAt: undefined, busySince: undefined };
    // Every series shows from the first scrape, so a rate() or increase() over it has a baseline.
    for (const reason of RESET_REASONS) this.#resets.inc({ engine, reason }, 0);
    for (const c of [this.#events, this.#batches, this.#decodeFailures, this.#gaps, this.#replaysAsked, this.#replaysFilled]) c.inc({ engine }, 0);
    const stream = new EngineEventStream({
      ...o,
      onStatus: (s) => {
        this.#count(engine, s);
        o.onStatus?.(s);
      },
      onBatch: (b) => {
        const now = this.#now();
        heard.lastBatchAt = now;
        heard.busySince = undefined;
        this.#batches.inc({ engine });
        this.#events.inc({ engine }, b.events);
        this.#lag.observe({ engine }, Math.max(0, now / 1000 - b.ts));
        o.onBatch?.(b);
      },
    });
    // A new stream for the same engine (a rebind, a new agent) replaces the old one's gauges.
    this.#streams.set(engine, { stream, heard });
    return stream;
  }

  /** Every open engine stream's health, for status pages and `llmgw doctor`; also what the gauges show. */
  health(): KvEngineHealth[] {
    return [...this.#live()].map(([engine, t]) => this.#health(engine, t));
  }

  #count(engine: string, s: KvStatus): void {
    switch (s.type) {
      case 'stream.gapped':
        this.#gaps.inc({ engine });
        return;
      case 'stream.replaying':
        this.#replaysAsked.inc({ engine });
        return;
      case 'stream.resynced':
        this.#replaysFilled.inc({ engine });
        return;
      case 'stream.reset':
      case 'mirror.reset':
        this.#resets.inc({ engine, reason: s.reason });
        return;
      case 'stream.malformed':
        this.#decodeFailures.inc({ engine });
        return;
      case 'mirror.verified':
      case 'mirror.hash-mismatch':
        return; // read from the stream at scrape time
    }
  }

  // Closed streams drop out here, so a stopped replica's gauges disappear at the next scrape.
  *#live(): Generator<[string, Tracked]> {
    for (const [engine, t] of this.#streams) {
      if (t.stream.closed) this.#streams.delete(engine);
      else yield [engine, t];
    }
  }

  #health(engine: string, t: Tracked): KvEngineHealth {
    const now = this.#now();
    const busy = (this.#o.inFlight?.(engine) ?? 0) > 0;
    if (!busy) t.heard.busySince = undefined;
    else t.heard.busySince ??= now;
    const since = t.heard.busySince;
    return {
      engine,
      silent: since !== undefined && now - since >= (this.#o.silentAfterMs ?? 60_000),
      lastBatchAgeMs: t.heard.lastBatchAt === undefined ? null : now - t.heard.lastBatchAt,
      verification: t.stream.verification,
    };
  }
}
