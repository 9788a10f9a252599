// Receives vLLM's KV events: binds one SUB socket per data-parallel rank (vLLM connects to a
// tcp://host:port endpoint, so the side that stays up must bind), checks every batch's sequence
// number, and repairs what PUB/SUB silently loses by asking the engine's replay socket. Whatever
// cannot be repaired is a reset, reported with its reason: a mirror that quietly misses a
// BlockRemoved keeps routing requests to a replica for a prefix it dropped long ago.
import { Dealer, Subscriber } from 'zeromq';
import { LlmgwError } from '../errors/index.js';
import { silentLogger, type Logger } from '../log/index.js';
import { decodeEventBatch } from './codec.js';
import type { EventBatch } from './events.js';

/** Why a rank's mirrored state was thrown away; the words operators see in logs and status. */
export type ResetReason =
  | 'engine-restart'
  | 'late-join'
  | 'replay-gap'
  | 'replay-timeout'
  | 'replay-unavailable'
  | 'all-blocks-cleared'
  | 'over-capacity'
  | 'requested';

/** What the subscriber tells its owner, in the order it happened, per rank. */
export type SubscriberEvent =
  | { type: 'stream.batch'; rank: number; seq: number; batch: EventBatch; replayed: boolean; skippedEvents: number }
  | { type: 'stream.gap'; rank: number; expected: number; got: number }
  | { type: 'stream.resynced'; rank: number; from: number; to: number; replayed: number }
  | { type: 'stream.reset'; rank: number; reason: ResetReason; detail: string }
  | { type: 'stream.malformed'; rank: number; seq: number | null; reason: string; count: number };

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

interface SequencerHooks {
  readonly replay: ReplayFn | undefined;
  readonly deliver: (frame: SeqFrame, replayed: boolean) => void;
  readonly report: (e: SubscriberEvent) => void;
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
    this.#hooks.report({ type: 'stream.gap', rank: this.rank, expected: last + 1, got: f.seq });
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
    this.#replaying = replay(from, this.#closed.signal)
      .catch((e: unknown): ReplayResult => ({ ok: false, reason: 'replay-unavailable', detail: String(e) }))
      .then((r) => {
        this.#replaying = undefined;
        if (this.#closed.signal.aborted) return;
        if (r.ok && quietIfEmpty && !r.frames.some((f) => f.seq >= from)) {
          // A catch-up that finds nothing new lost nothing: the live stream goes on as it was.
          this.#drain(this.#takeBuffer(), undefined);
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

/** Options of a KvEventSubscriber; ports are rank 0's, rank r uses port + r as vLLM does. */
/** An engine that binds its own sockets (vLLM on ipc://): the SUB and the replay DEALER connect to these. */
export interface EngineBoundEndpoints {
  readonly endpoint: string;
  readonly replayEndpoint: string | undefined;
}

export interface KvEventSubscriberOptions {
  readonly port: number;
  /** Set: connect to the engine's ipc:// sockets instead of binding tcp://host:port (one data-parallel rank only). */
  readonly engineBound?: EngineBoundEndpoints | undefined;
  readonly replayPort?: number | undefined;
  readonly dataParallelSize?: number;
  readonly host?: string;
  readonly topic?: string;
  /** Longest wait for the first replay reply and between replies (vLLM may take ~100 ms to start). */
  readonly replayTimeoutMs?: number;
  readonly maxBufferedBatches?: number;
  /** Malformed input is logged at most once per this interval per rank; the rest is counted. */
  readonly logIntervalMs?: number;
  readonly log?: Logger;
  readonly now?: () => number;
  readonly onEvent: (e: SubscriberEvent) => void;
}

const END_MARKER = 0xffff_ffff_ffff_ffffn;
const MAX_REPLAY_MESSAGES = 1_000_000;

/** The 8-byte big-endian unsigned sequence frame, or undefined when it is not one we can use. */
export function readSeq(frame: Uint8Array): number | 'end' | undefined {
  if (frame.byteLength !== 8) return undefined;
  const v = new DataView(frame.buffer, frame.byteOffset, 8).getBigUint64(0, false);
  if (v === END_MARKER) return 'end';
  if (v > BigInt(Number.MAX_SAFE_INTEGER)) return undefined;
  return Number(v);
}

/** The 8-byte big-endian form of a sequence number, as vLLM's replay request wants it. */
export function seqFrame(seq: number): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, BigInt(seq), false);
  return out;
}

/**
 * Reads one replay reply as a DEALER receives it: `["", seq, payload]` up to v0.25 and
 * `["", topic, seq, payload]` from v0.26 on, each ending with a marker whose seq is all ones.
 */
export function parseReplayReply(frames: readonly Uint8Array[]): SeqFrame | 'end' | { malformed: string } {
  if (frames.length !== 3 && frames.length !== 4) return { malformed: `${frames.length} frames, wanted 3 or 4` };
  const delimiter = frames[0];
  if (delimiter === undefined || delimiter.byteLength !== 0) return { malformed: 'first frame is not the empty delimiter' };
  const seqAt = frames.length === 3 ? 1 : 2;
  const seqBytes = frames[seqAt];
  const payload = frames[seqAt + 1];
  if (seqBytes === undefined || payload === undefined) return { malformed: 'missing frames' };
  const seq = readSeq(seqBytes);
  if (seq === undefined) return { malformed: `sequence frame of ${seqBytes.byteLength} bytes is not a usable uint64` };
  if (seq === 'end') return 'end';
  return { seq, payload };
}

/**
 * Asks a vLLM replay ROUTER for every batch from `from` on through a fresh DEALER (a REQ socket
 * would get only the first reply). A fresh socket per request means a late answer to an earlier,
 * abandoned request can never be mistaken for this one's.
 */
export async function requestReplay(
  endpoint: string,
  from: number,
  o: { timeoutMs: number; signal: AbortSignal },
): Promise<ReplayResult> {
  const dealer = new Dealer({ linger: 0, receiveTimeout: o.timeoutMs });
  const onAbort = (): void => dealer.close();
  o.signal.addEventListener('abort', onAbort, { once: true });
  try {
    dealer.connect(endpoint);
    await dealer.send([new Uint8Array(0), seqFrame(from)]);
    const frames: SeqFrame[] = [];
    for (let n = 0; n < MAX_REPLAY_MESSAGES; n++) {
      let reply: Buffer[];
      try {
        reply = await dealer.receive();
      } catch (e) {
        if (o.signal.aborted) return { ok: false, reason: 'replay-unavailable', detail: 'subscriber closed' };
        if ((e as { code?: unknown }).code === 'EAGAIN') {
          return {
            ok: false,
            reason: 'replay-timeout',
            detail: `${endpoint} sent ${frames.length === 0 ? 'no answer' : `${frames.length} batches and no end marker`} within ${o.timeoutMs} ms`,
          };
        }
        throw e;
      }
      const parsed = parseReplayReply(reply);
      if (parsed === 'end') return { ok: true, frames };
      if ('malformed' in parsed) return { ok: false, reason: 'replay-unavailable', detail: `malformed reply: ${parsed.malformed}` };
      frames.push(parsed);
    }
    return { ok: false, reason: 'replay-unavailable', detail: `more than ${MAX_REPLAY_MESSAGES} replies and no end marker` };
  } finally {
    o.signal.removeEventListener('abort', onAbort);
    if (!dealer.closed) dealer.close();
  }
}

/**
 * vLLM's KV-event subscriber for one engine: a bound SUB socket per data-parallel rank, sequence
 * tracking, replay on gaps, resets on restarts and lost history. Decoding failures are counted and
 * skipped, never thrown: one bad batch must not take the stream down.
 */
export class KvEventSubscriber {
  readonly #o: KvEventSubscriberOptions;
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #sockets: Subscriber[] = [];
  readonly #ranks: RankSequencer[] = [];
  readonly #loops: Promise<void>[] = [];
  readonly #lastLogAt = new Map<number, number>();
  readonly #suppressed = new Map<number, number>();
  readonly #topic: Buffer;
  #started: Promise<void> | undefined;
  #closing: Promise<void> | undefined;

  constructor(o: KvEventSubscriberOptions) {
    this.#o = o;
    this.#log = o.log ?? silentLogger;
    this.#now = o.now ?? Date.now;
    this.#topic = Buffer.from(o.topic ?? '', 'utf8');
    const size = o.dataParallelSize ?? 1;
    if (o.engineBound !== undefined && size > 1) {
      throw new LlmgwError('LLMGW_KV_ENDPOINT', `${o.engineBound.endpoint}: an engine with ${size} data-parallel ranks cannot publish on ipc:// (vLLM offsets only tcp:// and inproc://); give it tcp ports`);
    }
    for (let rank = 0; rank < size; rank++) {
      const replayAt = o.engineBound !== undefined ? o.engineBound.replayEndpoint : o.replayPort === undefined ? undefined : `tcp://${this.#host}:${o.replayPort + rank}`;
      const timeoutMs = o.replayTimeoutMs ?? 2000;
      const replay: ReplayFn | undefined = replayAt === undefined ? undefined : (from, signal) => requestReplay(replayAt, from, { timeoutMs, signal });
      this.#ranks.push(
        new RankSequencer(rank, {
          replay,
          maxBuffered: o.maxBufferedBatches ?? 100_000,
          report: (e) => this.#emit(e),
          deliver: (f, replayed) => this.#decode(rank, f, replayed),
        }),
      );
    }
  }

  get #host(): string {
    return this.#o.host ?? '127.0.0.1';
  }

  /** The endpoints the SUB sockets bind (or, engine-bound, connect to), one per rank, for the engine's --kv-events-config. */
  get endpoints(): string[] {
    const bound = this.#o.engineBound;
    return this.#ranks.map((r) => bound?.endpoint ?? `tcp://${this.#host}:${this.#o.port + r.rank}`);
  }

  /** Binds every rank's SUB socket and starts reading; resolves once all are bound. */
  start(): Promise<void> {
    return (this.#started ??= this.#bindAll());
  }

  async #bindAll(): Promise<void> {
    for (const r of this.#ranks) {
      // libzmq's default receive bound is 1000 messages: a burst past it would be dropped before
      // we read it. vLLM's own bound on the sending side is 100 000.
      const sock = new Subscriber({ linger: 0, receiveHighWaterMark: 100_000 });
      this.#sockets.push(sock);
      sock.subscribe(this.#topic);
      // An engine on ipc:// binds (vLLM binds ipc endpoints); connecting before it exists is fine,
      // ZeroMQ retries until the socket file appears.
      const bound = this.#o.engineBound;
      if (bound !== undefined) {
        // Each (re)connection may have missed batches published before the subscription arrived.
        sock.events.on('handshake', () => r.catchUp());
        sock.connect(bound.endpoint);
      } else await sock.bind(`tcp://${this.#host}:${this.#o.port + r.rank}`);
      // Runs until close() closes the socket, which ends the iterator; a failure here is a bug
      // in the socket layer, logged so the stream's silence has a reason.
      this.#loops.push(
        this.#read(sock, r).catch((e: unknown) => this.#log.error({ rank: r.rank, err: e }, 'kv.subscriber.read_failed')),
      );
    }
  }

  async #read(sock: Subscriber, r: RankSequencer): Promise<void> {
    for await (const frames of sock) {
      const [topic, seqBytes, payload] = frames;
      if (frames.length !== 3 || topic === undefined || seqBytes === undefined || payload === undefined) {
        this.#malformed(r, null, `message of ${frames.length} frames, wanted [topic, seq, payload]`);
        continue;
      }
      // SUB filters by prefix: "kv" would also admit "kv-events" from a neighbour on a wrong port.
      if (!topic.equals(this.#topic)) {
        this.#malformed(r, null, `topic ${JSON.stringify(topic.toString('utf8'))} is not the configured one`);
        continue;
      }
      const seq = readSeq(seqBytes);
      if (seq === undefined || seq === 'end') {
        this.#malformed(r, null, `sequence frame of ${seqBytes.byteLength} bytes is not a usable uint64`);
        continue;
      }
      r.push({ seq, payload });
    }
  }

  #decode(rank: number, f: SeqFrame, replayed: boolean): void {
    const r = this.#ranks[rank];
    if (r === undefined) return;
    const d = decodeEventBatch(f.payload);
    if (!d.ok) {
      this.#malformed(r, f.seq, d.reason);
      return;
    }
    this.#emit({ type: 'stream.batch', rank, seq: f.seq, batch: d.batch, replayed, skippedEvents: d.skipped });
  }

  #malformed(r: RankSequencer, seq: number | null, reason: string): void {
    r.stats.malformed++;
    this.#emit({ type: 'stream.malformed', rank: r.rank, seq, reason, count: r.stats.malformed });
    const now = this.#now();
    const last = this.#lastLogAt.get(r.rank);
    if (last !== undefined && now - last < (this.#o.logIntervalMs ?? 10_000)) {
      this.#suppressed.set(r.rank, (this.#suppressed.get(r.rank) ?? 0) + 1);
      return;
    }
    this.#lastLogAt.set(r.rank, now);
    const suppressed = this.#suppressed.get(r.rank) ?? 0;
    this.#suppressed.set(r.rank, 0);
    this.#log.warn({ rank: r.rank, seq, reason, total: r.stats.malformed, suppressed }, 'kv.subscriber.malformed_batch');
  }

  #emit(e: SubscriberEvent): void {
    try {
      this.#o.onEvent(e);
    } catch (err) {
      // The owner's bug must not stop the socket loop: every later batch would be lost.
      this.#log.error({ rank: e.rank, event: e.type, err }, 'kv.subscriber.handler_failed');
    }
  }

  /** Forgets one rank's position (its engine restarted, as the supervisor knows). */
  reset(rank: number, reason: ResetReason, detail: string): void {
    this.#ranks[rank]?.reset(reason, detail);
  }

  /** Per-rank counters. */
  stats(): RankStats[] {
    return this.#ranks.map((r) => ({ ...r.stats }));
  }

  /** Resolves once no rank has a replay in flight or batches waiting behind one. */
  async whenIdle(): Promise<void> {
    while (this.#ranks.some((r) => r.busy)) await Promise.all(this.#ranks.map((r) => r.whenIdle()));
  }

  /** Closes every socket (linger 0), which ends the read loops; safe to call twice. */
  close(): Promise<void> {
    return (this.#closing ??= this.#shutdown());
  }

  async #shutdown(): Promise<void> {
    await this.#started?.catch(() => undefined);
    for (const r of this.#ranks) r.close();
    for (const s of this.#sockets) if (!s.closed) s.close();
    await Promise.all(this.#loops);
  }
}
