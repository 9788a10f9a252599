// One engine's KV events end to end: the subscriber's ordered, repaired batches applied to the
// engine's mirror, each net change handed to the owner (the agent's publisher actor, which sends it
// upstream to the gateway's index). Resets, gaps, hash mismatches and malformed input come out as
// typed status events so the owner can log, count and show them.
import { silentLogger, type Logger } from '../log/index.js';
import type { HashAlgo, BlockKey } from './hashing.js';
import { EngineMirror, type MirrorDelta, type MirrorStats, type MirrorStatus, type TierChange, type Verification } from './mirror.js';
import { KvEventSubscriber, type RankStats, type ResetReason, type SubscriberEvent } from './subscriber.js';

/** Everything about the stream except the batches themselves. */
export type EngineStreamStatus = Exclude<SubscriberEvent, { type: 'stream.batch' }> | MirrorStatus;

/** Options of an EngineEventStream; ports are rank 0's (rank r uses port + r). */
export interface EngineEventStreamOptions {
  readonly engineId: string;
  readonly port: number;
  readonly replayPort?: number | undefined;
  readonly dataParallelSize?: number;
  readonly topic?: string;
  readonly host?: string;
  /** Block size the router hashes prompts at. */
  readonly blockSizeTokens: number;
  /** PYTHONHASHSEED the engine was started with. */
  readonly seed: string;
  readonly algo?: HashAlgo;
  /** Blocks the engine can hold (all ranks and tiers); the mirror stays below this x marginFactor. */
  readonly capacityBlocks: number;
  readonly marginFactor?: number;
  readonly verifyBlocks?: number;
  readonly replayTimeoutMs?: number;
  readonly log?: Logger;
  readonly onDelta: (delta: MirrorDelta) => void;
  readonly onStatus?: (status: EngineStreamStatus) => void;
}

/** Counters of the stream, per rank and of the mirror. */
export interface EngineStreamStats {
  readonly ranks: RankStats[];
  readonly mirror: MirrorStats;
  readonly verification: Verification;
}

/** A subscriber and a mirror for one engine: vLLM's events in, net changes of our keys out. */
export class EngineEventStream {
  readonly engineId: string;
  readonly #o: EngineEventStreamOptions;
  readonly #log: Logger;
  readonly #mirror: EngineMirror;
  readonly #sub: KvEventSubscriber;

  constructor(o: EngineEventStreamOptions) {
    this.engineId = o.engineId;
    this.#o = o;
    this.#log = (o.log ?? silentLogger).child({ engine: o.engineId });
    this.#mirror = new EngineMirror({
      seed: o.seed,
      algo: o.algo,
      blockSizeTokens: o.blockSizeTokens,
      capacityBlocks: o.capacityBlocks,
      marginFactor: o.marginFactor,
      verifyBlocks: o.verifyBlocks,
      onStatus: (s) => this.#status(s),
    });
    this.#sub = new KvEventSubscriber({
      port: o.port,
      replayPort: o.replayPort,
      dataParallelSize: o.dataParallelSize,
      topic: o.topic,
      host: o.host,
      replayTimeoutMs: o.replayTimeoutMs,
      log: this.#log,
      onEvent: (e) => this.#onEvent(e),
    });
  }

  /** The endpoints the engine must publish to, one per data-parallel rank. */
  get endpoints(): string[] {
    return this.#sub.endpoints;
  }

  /** Binds the sockets; events flow from here on. */
  start(): Promise<void> {
    return this.#sub.start();
  }

  /** Every key the engine holds, for a new upstream stream. */
  snapshot(): BlockKey[] {
    return this.#mirror.snapshot();
  }

  /** Keys held only off the GPU, with their best tier. */
  tiersSnapshot(): TierChange[] {
    return this.#mirror.tiersSnapshot();
  }

  /** Whether the engine's hashes are known to equal ours. */
  get verification(): Verification {
    return this.#mirror.verification;
  }

  /** Counters of the subscriber and the mirror. */
  stats(): EngineStreamStats {
    return { ranks: this.#sub.stats(), mirror: this.#mirror.stats(), verification: this.#mirror.verification };
  }

  /** Starts every rank over, for when the supervisor knows the engine restarted. */
  reset(reason: ResetReason, detail: string): void {
    const ranks = this.#o.dataParallelSize ?? 1;
    for (let r = 0; r < ranks; r++) this.#sub.reset(r, reason, detail);
  }

  /** Resolves once no replay is in flight and nothing waits behind one. */
  whenIdle(): Promise<void> {
    return this.#sub.whenIdle();
  }

  /** Closes the sockets; safe to call twice. */
  close(): Promise<void> {
    return this.#sub.close();
  }

  #onEvent(e: SubscriberEvent): void {
    switch (e.type) {
      case 'stream.batch': {
        const d = this.#mirror.apply(e.batch, e.rank);
        if (d.reset !== undefined || d.added.length > 0 || d.removed.length > 0 || d.tiers !== undefined) this.#o.onDelta(d);
        return;
      }
      case 'stream.reset':
        this.#status(e);
        this.#o.onDelta(this.#mirror.resetRank(e.rank, e.reason));
        return;
      case 'stream.gap':
      case 'stream.resynced':
      case 'stream.malformed':
        this.#status(e);
        return;
    }
  }

  #status(s: EngineStreamStatus): void {
    switch (s.type) {
      case 'stream.reset':
      case 'mirror.reset':
        this.#log.warn({ rank: s.rank, reason: s.reason, detail: s.detail }, 'kv.stream.reset');
        break;
      case 'mirror.hash-mismatch':
        this.#log.error({ rank: s.rank, reason: s.reason }, 'kv.stream.hash_mismatch');
        break;
      case 'mirror.verified':
        this.#log.info({ blocks: s.blocks }, 'kv.stream.verified');
        break;
      case 'stream.gap':
        this.#log.info({ rank: s.rank, expected: s.expected, got: s.got }, 'kv.stream.gap');
        break;
      case 'stream.resynced':
        this.#log.info({ rank: s.rank, from: s.from, to: s.to, replayed: s.replayed }, 'kv.stream.resynced');
        break;
      case 'stream.malformed':
        // The subscriber logs these itself, at most once per interval.
        break;
    }
    this.#o.onStatus?.(s);
  }
}
