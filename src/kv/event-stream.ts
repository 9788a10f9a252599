// One engine's KV events end to end: the subscriber's ordered, repaired batches applied to the
// mirror of the rank they came from (a data-parallel engine has one KV cache per rank, and the
// router must know which rank holds a prefix), each net change handed to the owner (the agent's publisher actor, which sends it
// upstream to the gateway's index). Resets, gaps, hash mismatches and malformed input come out as
// typed status events so the owner can log, count and show them.
import { silentLogger, type Logger } from '../log/index.js';
import type { HashAlgo, BlockKey } from './hashing.js';
import { EngineMirror, type MirrorDelta, type MirrorStats, type MirrorStatus, type Verification } from './mirror.js';
import { KvEventSubscriber, type EngineBoundEndpoints, type RankStats, type ResetReason, type SubscriberEvent } from './subscriber.js';

/** Everything about the stream except the batches themselves. */
export type EngineStreamStatus = Exclude<SubscriberEvent, { type: 'stream.batch' }> | MirrorStatus;

/** Options of an EngineEventStream; ports are rank 0's (rank r uses port + r). */
export interface EngineEventStreamOptions {
  readonly engineId: string;
  readonly port: number;
  readonly replayPort?: number | undefined;
  /** The engine binds ipc:// sockets here and the stream connects (see KvEventSubscriberOptions). */
  readonly engineBound?: EngineBoundEndpoints | undefined;
  readonly dataParallelSize?: number;
  readonly topic?: string;
  readonly host?: string;
  /** Block size the router hashes prompts at. */
  readonly blockSizeTokens: number;
  /** PYTHONHASHSEED the engine was started with. */
  readonly seed: string;
  readonly algo?: HashAlgo;
  /**
   * Blocks ONE rank can hold (all its tiers); each rank's mirror stays below this x marginFactor.
   * Per rank because the flags it is read from (vLLM's --num-gpu-blocks-override, the sim's
   * --kv-capacity-blocks) size each data-parallel rank's cache, not their sum.
   */
  readonly capacityBlocks: number;
  readonly marginFactor?: number;
  readonly verifyBlocks?: number;
  readonly replayTimeoutMs?: number;
  readonly log?: Logger;
  /** A net change of one rank's keys; `rank` is set when the engine has more than one. */
  readonly onDelta: (delta: MirrorDelta) => void;
  readonly onStatus?: (status: EngineStreamStatus) => void;
}

/** Counters of the stream, per rank and of the mirrors (summed over the ranks). */
export interface EngineStreamStats {
  readonly ranks: RankStats[];
  readonly mirror: MirrorStats;
  readonly verification: Verification;
}

function sumStats(all: readonly MirrorStats[]): MirrorStats {
  const out: MirrorStats = { blocks: 0, keys: 0, stored: 0, removed: 0, unknownRemovals: 0, reannounced: 0, unkeyed: 0, overCapacityResets: 0, clears: 0 };
  for (const s of all) for (const k of Object.keys(out) as (keyof MirrorStats)[]) out[k] += s[k];
  return out;
}

/** A subscriber and one mirror per data-parallel rank for one engine: vLLM's events in, net changes of our keys out. */
export class EngineEventStream {
  readonly engineId: string;
  readonly #o: EngineEventStreamOptions;
  readonly #log: Logger;
  // Index = data-parallel rank.
  readonly #mirrors: EngineMirror[];
  readonly #sub: KvEventSubscriber;
  #verifiedReported = false;

  constructor(o: EngineEventStreamOptions) {
    this.engineId = o.engineId;
    this.#o = o;
    this.#log = (o.log ?? silentLogger).child({ engine: o.engineId });
    const ranks = Math.max(1, o.dataParallelSize ?? 1);
    this.#mirrors = Array.from(
      { length: ranks },
      () =>
        new EngineMirror({
          seed: o.seed,
          algo: o.algo,
          blockSizeTokens: o.blockSizeTokens,
          capacityBlocks: o.capacityBlocks,
          marginFactor: o.marginFactor,
          verifyBlocks: o.verifyBlocks,
          onStatus: (s) => this.#mirrorStatus(s),
        }),
    );
    this.#sub = new KvEventSubscriber({
      port: o.port,
      replayPort: o.replayPort,
      engineBound: o.engineBound,
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

  /**
   * A full copy for a new upstream stream: one delta per rank, each a reset followed by every key
   * the rank holds (with the tiers of those not on the GPU), so the receiver replaces what it held.
   */
  snapshot(reason: ResetReason): MirrorDelta[] {
    return this.#mirrors.map((m, rank) => {
      const d: MirrorDelta = { added: m.snapshot(), removed: [], reset: reason };
      const tiers = m.tiersSnapshot();
      if (tiers.length > 0) d.tiers = tiers;
      return this.#ranked(d, rank);
    });
  }

  /** Every key held on any rank (for status and tests). */
  keys(): BlockKey[] {
    if (this.#mirrors.length === 1) return this.#mirrors[0]?.snapshot() ?? [];
    return [...new Set(this.#mirrors.flatMap((m) => m.snapshot()))];
  }

  /** Whether the engine's hashes are known to equal ours: a mismatch on any rank is the engine's. */
  get verification(): Verification {
    const all = this.#mirrors.map((m) => m.verification);
    if (all.includes('mismatch')) return 'mismatch';
    return all.includes('verified') ? 'verified' : 'pending';
  }

  /** Counters of the subscriber and the mirrors. */
  stats(): EngineStreamStats {
    return { ranks: this.#sub.stats(), mirror: sumStats(this.#mirrors.map((m) => m.stats())), verification: this.verification };
  }

  /** Starts every rank over, for when the supervisor knows the engine restarted. */
  reset(reason: ResetReason, detail: string): void {
    for (let r = 0; r < this.#mirrors.length; r++) this.#sub.reset(r, reason, detail);
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
        const m = this.#mirrors[e.rank];
        if (m === undefined) return; // the subscriber binds only ranks 0..N-1
        const d = m.apply(e.batch, e.rank);
        if (d.reset !== undefined || d.added.length > 0 || d.removed.length > 0 || d.tiers !== undefined) this.#o.onDelta(this.#ranked(d, e.rank));
        return;
      }
      case 'stream.reset': {
        this.#status(e);
        const m = this.#mirrors[e.rank];
        if (m !== undefined) this.#o.onDelta(this.#ranked(m.resetRank(e.rank, e.reason), e.rank));
        return;
      }
      case 'stream.gap':
      case 'stream.resynced':
      case 'stream.malformed':
        this.#status(e);
        return;
    }
  }

  // A single-rank engine's deltas stay unranked (the index's merged slot, scored whole); a
  // data-parallel engine's name their rank, so the router scores each rank's cache as its own.
  #ranked(d: MirrorDelta, rank: number): MirrorDelta {
    if (this.#mirrors.length > 1) d.rank = rank;
    return d;
  }

  // Every rank's mirror verifies itself; the engine counts as verified once, at the first.
  #mirrorStatus(s: MirrorStatus): void {
    if (s.type === 'mirror.verified') {
      if (this.#verifiedReported) return;
      this.#verifiedReported = true;
    }
    this.#status(s);
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
