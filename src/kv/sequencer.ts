// The sequencer: orders one data-parallel rank's batches by their sequence numbers. Pure (no
// socket, no decoding): it takes frames, hands them on in order exactly once, and turns a gap, a
// regression or a late join into a replay (through the function it is given) or a reset, each
// reported as a status fact. What PUB/SUB silently loses is repaired here or declared lost: a
// mirror that quietly misses a BlockRemoved keeps routing requests to a replica for a prefix it
// dropped long ago.
import type { KvStatus, ResetReason } from './delta.js';

/** The status facts a sequencer reports. */
export type SequencerStatus = Extract<KvStatus, { type: 'stream.gapped' | 'stream.replaying' | 'stream.resynced' | 'stream.reset' }>;

/** One live or replayed message reduced to what sequencing needs. */
export interface SeqFrame {
  readonly seq: number;
  readonly payload: Uint8Array;
}

/** What asking the replay socket gave: the batches it still holds from `from` on, or why nothing. */
export type ReplayResult =
  | { ok: true; frames: SeqFrame[] }
  | { ok: false; reason: 'replay-timeout' | 'replay-unavailable'; detail: string };

/** Asks a rank's replay socket for every batch from `from` on. Must settle within a bound. */
export type ReplayFn = (from: number, signal: AbortSignal) => Promise<ReplayResult>;

/** Counters of one rank, for status pages and tests. */
export interface RankStats {
  lastSeq: number | null;
  batches: number;
  gaps: number;
  replays: number;
  replayedBatches: number;
  duplicates: number;
  resets: number;
  malformed: number;
  /** Live batches dropped because too many waited behind a replay; the next gap replays them. */
  dropped: number;
}

/** What a sequencer is given: how to ask for a replay, where ordered frames and status facts go. */
export interface SequencerHooks {
  readonly replay: ReplayFn | undefined;
  readonly deliver: (frame: SeqFrame, replayed: boolean) => void;
  readonly report: (e: SequencerStatus) => void;
  readonly maxBuffered: number;
}

/**
 * Orders one rank's batches: applies each sequence number exactly once, in order, and turns a gap,
 * a regression or a late join into a replay or a reset. Holds no socket, so every path is testable
 * with a scripted replay.
 */
export class RankSequencer {
  readonly rank: number;
  readonly stats: RankStats = {
    lastSeq: null,
    batches: 0,
    gaps: 0,
    replays: 0,
    replayedBatches: 0,
    duplicates: 0,
    resets: 0,
    malformed: 0,
    dropped: 0,
  };
  readonly #hooks: SequencerHooks;
  // Live batches that arrived while a replay was in flight: applied after it, in order, so nothing
  // is applied twice and nothing is lost.
  #buffer: SeqFrame[] = [];
  #replaying: Promise<void> | undefined;
  #acceptNext = false;
  #closed = new AbortController();
  #idleWaiters: (() => void)[] = [];

  constructor(rank: number, hooks: SequencerHooks) {
    this.rank = rank;
    this.#hooks = hooks;
  }

  /** Takes the next message as it came off the socket. */
  push(frame: SeqFrame): void {
    if (this.#closed.signal.aborted) return;
    if (this.#replaying !== undefined) {
      // Bounded while a replay is slow: what does not fit is dropped and shows up as one more
      // gap after this replay, which the next replay fills or turns into a reset.
      if (this.#buffer.length >= this.#hooks.maxBuffered) this.stats.dropped++;
      else this.#buffer.push(frame);
      return;
    }
    this.#accept(frame);
  }

  /**
   * Continues after `lastSeq` (a restored position): the next batch past it is a gap that replay
   * fills, one at or before it means the engine restarted meanwhile. Only before the first frame.
   */
  resume(lastSeq: number | null): void {
    if (this.stats.batches === 0 && this.stats.lastSeq === null) this.stats.lastSeq = lastSeq;
  }

  /** Forgets the rank's position, as after an engine restart the caller learnt of elsewhere. */
  reset(reason: ResetReason, detail: string): void {
    this.#reportReset(reason, detail);
    this.stats.lastSeq = null;
  }

  /**
   * The SUB has just reached an engine that binds its own socket (ipc://): whatever it published
   * before is in its replay buffer only. Asks for it now instead of waiting for the next batch to
   * reveal the gap, which never comes when the engine goes quiet after its first request.
   */
  catchUp(): void {
    if (this.#closed.signal.aborted || this.#replaying !== undefined) return;
    this.#startReplay(this.stats.lastSeq === null ? 0 : this.stats.lastSeq + 1, [], true);
  }

  /** True while a replay is in flight or batches wait behind one. */
  get busy(): boolean {
    return this.#replaying !== undefined;
  }

  /** Resolves once no replay is in flight and no batch waits behind one. */
  whenIdle(): Promise<void> {
    if (this.#replaying === undefined) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  /** Stops replays in flight and ignores whatever arrives later. */
  close(): void {
    this.#closed.abort();
    this.#buffer = [];
  }

  #accept(f: SeqFrame): void {
    const last = this.stats.lastSeq;
    if (last === null) {
      if (f.seq === 0 || this.#acceptNext) {
        this.#acceptNext = false;
        this.#deliver(f, false);
        return;
      }
      // The first batch we see is not the engine's first: PUB drops what it sends before the
      // subscription reaches it, so whatever came earlier is only in the replay buffer.
      this.#startReplay(0, [f]);
      return;
    }
    if (f.seq === last + 1) {
      this.#deliver(f, false);
      return;
    }
    if (f.seq <= last) {
      // vLLM numbers batches from 0 in each process and sends no AllBlocksCleared when it
      // restarts: a number going back is the only sign that everything we hold is gone.
      this.#reportReset('engine-restart', `sequence went back from ${last} to ${f.seq}: the engine restarted`);
      this.stats.lastSeq = null;
      this.#accept(f);
      return;
    }
    this.stats.gaps++;
    this.#hooks.report({ type: 'stream.gapped', rank: this.rank, expected: last + 1, got: f.seq });
    this.#startReplay(last + 1, [f]);
  }

  #deliver(f: SeqFrame, replayed: boolean): void {
    this.stats.lastSeq = f.seq;
    this.stats.batches++;
    if (replayed) this.stats.replayedBatches++;
    this.#hooks.deliver(f, replayed);
  }

  #reportReset(reason: ResetReason, detail: string): void {
    this.stats.resets++;
    this.#hooks.report({ type: 'stream.reset', rank: this.rank, reason, detail });
  }

  #startReplay(from: number, pending: SeqFrame[], quietIfEmpty = false): void {
    this.#buffer = pending;
    const replay = this.#hooks.replay;
    if (replay === undefined) {
      this.#failReplay(from, 'replay-unavailable', 'no replay endpoint is configured for this engine');
      return;
    }
    this.stats.replays++;
    this.#hooks.report({ type: 'stream.replaying', rank: this.rank, from });
    this.#replaying = replay(from, this.#closed.signal)
      .catch((e: unknown): ReplayResult => ({ ok: false, reason: 'replay-unavailable', detail: String(e) }))
      .then((r) => {
        this.#replaying = undefined;
        if (this.#closed.signal.aborted) return;
        if (r.ok && quietIfEmpty && !r.frames.some((f) => f.seq >= from)) {
          // A catch-up that finds nothing new lost nothing: the live stream goes on as it was, and
          // what the rank holds is known to be all the engine published.
          this.#drain(this.#takeBuffer(), undefined);
          this.#hooks.report({ type: 'stream.resynced', rank: this.rank, from, to: from - 1, replayed: 0 });
        } else if (r.ok) this.#finishReplay(from, r.frames);
        else this.#failReplay(from, r.reason, r.detail);
        if (this.#replaying === undefined) this.#wakeIdle();
      });
  }

  // The replay could not say what happened in the gap: whatever we hold may be stale, so the rank
  // starts over from the batches we do have.
  #failReplay(from: number, reason: 'replay-timeout' | 'replay-unavailable', detail: string): void {
    const pending = this.#takeBuffer();
    this.#reportReset(reason, `could not replay from seq ${from}: ${detail}`);
    this.stats.lastSeq = null;
    const first = pending[0];
    if (first === undefined) {
      this.#acceptNext = true;
      return;
    }
    this.stats.lastSeq = first.seq - 1;
    this.#drain(pending, undefined);
  }

  #finishReplay(from: number, replayed: SeqFrame[]): void {
    const pending = this.#takeBuffer();
    const frames = replayed.filter((f) => f.seq >= from);
    const first = frames[0];
    const lastFrame = frames[frames.length - 1];
    if (first === undefined || lastFrame === undefined) {
      const reason: ResetReason = from === 0 ? 'late-join' : 'replay-gap';
      this.#reportReset(reason, `replay from seq ${from} returned nothing: the engine no longer holds those batches`);
      this.stats.lastSeq = null;
      const head = pending[0];
      if (head === undefined) this.#acceptNext = true;
      else {
        this.stats.lastSeq = head.seq - 1;
        this.#drain(pending, undefined);
      }
      return;
    }
    if (first.seq > from) {
      const reason: ResetReason = from === 0 ? 'late-join' : 'replay-gap';
      this.#reportReset(
        reason,
        `wanted seq ${from} but the replay buffer starts at ${first.seq}: batches ${from}..${first.seq - 1} are lost`,
      );
    }
    let last = first.seq - 1;
    for (const f of frames) {
      if (f.seq <= last) {
        this.stats.duplicates++;
        continue;
      }
      if (f.seq !== last + 1) this.#reportReset('replay-gap', `replay skipped from seq ${last} to ${f.seq}`);
      this.#deliver(f, true);
      last = f.seq;
    }
    this.#hooks.report({ type: 'stream.resynced', rank: this.rank, from, to: lastFrame.seq, replayed: frames.length });
    this.#drain(pending, { first: first.seq, last: lastFrame.seq });
  }

  #takeBuffer(): SeqFrame[] {
    const pending = this.#buffer;
    this.#buffer = [];
    return pending;
  }

  // Applies the batches that waited behind a replay. One the replay already delivered is a
  // duplicate; one before the replayed range means the engine restarted meanwhile.
  #drain(pending: SeqFrame[], covered: { first: number; last: number } | undefined): void {
    for (let i = 0; i < pending.length; i++) {
      const f = pending[i];
      if (f === undefined) continue;
      const last = this.stats.lastSeq;
      if (covered !== undefined && last !== null && f.seq <= last && f.seq >= covered.first && f.seq <= covered.last) {
        this.stats.duplicates++;
        continue;
      }
      this.#accept(f);
      if (this.#replaying !== undefined || this.#buffer.length > 0) {
        this.#buffer.push(...pending.slice(i + 1));
        return;
      }
    }
  }

  #wakeIdle(): void {
    const waiters = this.#idleWaiters;
    this.#idleWaiters = [];
    for (const w of waiters) w();
  }
}
