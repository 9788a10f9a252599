// One engine's KV events end to end, in the order a batch travels:
//   transport (SUB socket per rank) -> sequencer (order, gaps) -> replay client (fills gaps)
//   -> decoder (untrusted bytes to events) -> mirror (net change of our keys) -> onDelta (the index).
// A data-parallel engine has one KV cache per rank, and the router must know which rank holds a
// prefix, so each rank has its own sequencer and mirror. Resets, gaps, hash mismatches and
// malformed input come out as KvStatus facts so the owner can log, count and show them.
import { silentLogger, type Logger } from '../log/index.js';
import type { KvDelta, KvStatus, ResetReason, Verification } from './delta.js';
import { decodeEventBatch } from './decoder.js';
import type { HashAlgo, BlockKey } from './block-key.js';
import { EngineMirror, type MirrorState, type MirrorStats, type PartitionState } from './mirror.js';
import { requestReplay } from './replay.js';
import { RankSequencer, type RankStats, type ReplayFn, type SeqFrame } from './sequencer.js';
import { LlmgwError } from '../errors/index.js';
import { SubTransport, type EngineBoundEndpoints } from './transport.js';
import type { BlockHasher } from './verifier.js';

/** One batch the mirror applied: what metrics need to count events and measure the engine's lag. */
export interface AppliedBatch {
  readonly rank: number;
  readonly seq: number;
  /** The engine's time.time() when it published the batch, in seconds. */
  readonly ts: number;
  readonly events: number;
  readonly replayed: boolean;
}

/** Options of an EngineEventStream; ports are rank 0's (rank r uses port + r). */
export interface EngineEventStreamOptions {
  readonly engineId: string;
  readonly port: number;
  readonly replayPort?: number | undefined;
  /** The engine binds ipc:// sockets here and the stream connects (one data-parallel rank only). */
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
  /** Where hash verification runs (the worker pool); default: this thread. */
  readonly hasher?: BlockHasher;
  /** Longest wait for the first replay reply and between replies (vLLM may take ~100 ms to start). */
  readonly replayTimeoutMs?: number;
  readonly maxBufferedBatches?: number;
  /** Malformed input is logged at most once per this interval per rank; the rest is counted. */
  readonly logIntervalMs?: number;
  readonly now?: () => number;
  readonly log?: Logger;
  /** A net change of one rank's keys; `rank` is set when the engine has more than one. */
  readonly onDelta: (delta: KvDelta) => void;
  readonly onStatus?: (status: KvStatus) => void;
  /** Each batch once the mirror has applied it. */
  readonly onBatch?: (batch: AppliedBatch) => void;
  /**
   * What a previous stream of the same, still running engine held (state()): its blocks are held
   * again at once, and the next batch replays from the last sequence number seen.
   */
  readonly restore?: StreamState | undefined;
}

/** A stream's position and blocks per rank, as plain data: what an agent keeps across its restarts. */
export interface StreamState {
  readonly ranks: readonly { readonly lastSeq: number | null; readonly mirror: MirrorState }[];
}

const isInt = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v);
const asKey = (v: unknown): bigint | undefined => (typeof v === 'bigint' && v >= 0n ? v : isInt(v) && v >= 0 ? BigInt(v) : undefined);
// The file is the agent's own: the keys it saved were the mirror's.
const asBlockKey = (v: unknown): BlockKey | undefined => asKey(v) as BlockKey | undefined;

function partitionOf(v: unknown): PartitionState | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const p = v as Record<string, unknown>;
  const { rank, medium, group, hashes, refs, keys } = p;
  if (!isInt(rank) || typeof medium !== 'string' || !isInt(group) || !Array.isArray(hashes) || !Array.isArray(refs) || !Array.isArray(keys)) return undefined;
  if (refs.length !== hashes.length || keys.length !== hashes.length) return undefined;
  const h = hashes.map(asKey);
  const k = keys.map((x: unknown) => (x === null ? null : asBlockKey(x)));
  if (h.some((x) => x === undefined) || k.some((x) => x === undefined) || !refs.every((r: unknown) => isInt(r) && r > 0)) return undefined;
  return { rank, medium, group, hashes: h.filter((x) => x !== undefined), refs: refs.filter(isInt), keys: k.filter((x) => x !== undefined) };
}

/** Reads back a StreamState from untrusted data (a file the agent wrote, maybe by another version); undefined when it is not one. */
export function parseStreamState(v: unknown): StreamState | undefined {
  if (typeof v !== 'object' || v === null || !('ranks' in v) || !Array.isArray(v.ranks)) return undefined;
  const ranks: StreamState['ranks'][number][] = [];
  for (const r of v.ranks as unknown[]) {
    if (typeof r !== 'object' || r === null) return undefined;
    const { lastSeq, mirror } = r as Record<string, unknown>;
    if (lastSeq !== null && !isInt(lastSeq)) return undefined;
    if (typeof mirror !== 'object' || mirror === null) return undefined;
    const { verification, parts } = mirror as Record<string, unknown>;
    if (verification !== 'pending' && verification !== 'verified' && verification !== 'mismatch') return undefined;
    if (!Array.isArray(parts)) return undefined;
    const ps = parts.map(partitionOf);
    if (ps.some((p) => p === undefined)) return undefined;
    ranks.push({ lastSeq, mirror: { verification, parts: ps.filter((p) => p !== undefined) } });
  }
  return { ranks };
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

/** One engine's transport, sequencers, decoder and mirrors: vLLM's events in, net changes of our keys out. */
export class EngineEventStream {
  readonly engineId: string;
  readonly #o: EngineEventStreamOptions;
  readonly #log: Logger;
  readonly #now: () => number;
  // Index = data-parallel rank, in all three.
  readonly #mirrors: EngineMirror[];
  readonly #ranks: RankSequencer[];
  readonly #endpoints: string[];
  readonly #transport: SubTransport;
  readonly #lastLogAt = new Map<number, number>();
  readonly #suppressed = new Map<number, number>();
  #verifiedReported = false;
  #closing: Promise<void> | undefined;
  // Batches waiting for the worker pool to hash them, and everything after them, in order.
  #queue: Promise<void> | undefined;

  constructor(o: EngineEventStreamOptions) {
    this.engineId = o.engineId;
    this.#o = o;
    this.#log = (o.log ?? silentLogger).child({ engine: o.engineId });
    this.#now = o.now ?? Date.now;
    const host = o.host ?? '127.0.0.1';
    const size = Math.max(1, o.dataParallelSize ?? 1);
    const bound = o.engineBound;
    if (bound !== undefined && size > 1) {
      throw new LlmgwError('LLMGW_KV_ENDPOINT', `${bound.endpoint}: an engine with ${size} data-parallel ranks cannot publish on ipc:// (vLLM offsets only tcp:// and inproc://); give it tcp ports`);
    }
    this.#mirrors = [];
    this.#ranks = [];
    this.#endpoints = [];
    for (let rank = 0; rank < size; rank++) {
      this.#endpoints.push(bound?.endpoint ?? `tcp://${host}:${o.port + rank}`);
      this.#mirrors.push(
        new EngineMirror({
          seed: o.seed,
          algo: o.algo,
          blockSizeTokens: o.blockSizeTokens,
          capacityBlocks: o.capacityBlocks,
          marginFactor: o.marginFactor,
          verifyBlocks: o.verifyBlocks,
          hasher: o.hasher,
          onStatus: (s) => this.#mirrorStatus(s),
        }),
      );
      const replayAt = bound !== undefined ? bound.replayEndpoint : o.replayPort === undefined ? undefined : `tcp://${host}:${o.replayPort + rank}`;
      const timeoutMs = o.replayTimeoutMs ?? 2000;
      const replay: ReplayFn | undefined = replayAt === undefined ? undefined : (from, signal) => requestReplay(replayAt, from, { timeoutMs, signal });
      this.#ranks.push(
        new RankSequencer(rank, {
          replay,
          maxBuffered: o.maxBufferedBatches ?? 100_000,
          report: (e) => this.#sequencerStatus(e),
          deliver: (f, replayed) => this.#decode(rank, f, replayed),
        }),
      );
    }
    for (const [rank, r] of (o.restore?.ranks ?? []).entries()) {
      const m = this.#mirrors[rank];
      const seq = this.#ranks[rank];
      if (m === undefined || seq === undefined) continue;
      m.restore(r.mirror);
      seq.resume(r.lastSeq);
    }
    this.#transport = new SubTransport({
      endpoints: this.#endpoints,
      topic: o.topic ?? '',
      connect: bound !== undefined,
      // Each (re)connection may have missed batches published before the subscription arrived.
      onConnected: (rank) => this.#ranks[rank]?.catchUp(),
      onFrame: (rank, f) => this.#ranks[rank]?.push(f),
      onMalformed: (rank, reason) => this.#malformed(rank, null, reason),
      // A failure here is a bug in the socket layer, logged so the stream's silence has a reason.
      onFailure: (rank, err) => this.#log.error({ rank, err }, 'kv.subscriber.read_failed'),
    });
  }

  /** The endpoints the SUB sockets bind (or, engine-bound, connect to), one per data-parallel rank. */
  get endpoints(): string[] {
    return [...this.#endpoints];
  }

  /** Binds the sockets; events flow from here on. */
  start(): Promise<void> {
    return this.#transport.start();
  }

  /**
   * A full copy for a new upstream stream: one delta per rank, each a reset followed by every key
   * the rank holds (with the tiers of those not on the GPU), so the receiver replaces what it held.
   */
  snapshot(reason: ResetReason): KvDelta[] {
    return this.#mirrors.map((m, rank) => {
      const d: KvDelta = { added: m.snapshot(), removed: [], reset: reason };
      const tiers = m.tiersSnapshot();
      if (tiers.length > 0) d.tiers = tiers;
      return this.#ranked(d, rank);
    });
  }

  /** Each rank's position and blocks, for a later stream's `restore`. */
  state(): StreamState {
    return { ranks: this.#mirrors.map((m, rank) => ({ lastSeq: this.#ranks[rank]?.stats.lastSeq ?? null, mirror: m.state() })) };
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

  /** Counters of the sequencers and the mirrors. */
  stats(): EngineStreamStats {
    return {
      ranks: this.#ranks.map((r) => ({ ...r.stats })),
      mirror: sumStats(this.#mirrors.map((m) => m.stats())),
      verification: this.verification,
    };
  }

  /** Starts every rank over, for when the supervisor knows the engine restarted. */
  reset(reason: ResetReason, detail: string): void {
    for (const r of this.#ranks) r.reset(reason, detail);
  }

  /** Resolves once no rank has a replay in flight or batches waiting behind one, and every batch is applied. */
  async whenIdle(): Promise<void> {
    while (this.#ranks.some((r) => r.busy) || this.#queue !== undefined) {
      await Promise.all(this.#ranks.map((r) => r.whenIdle()));
      await this.#queue;
    }
  }

  /** True once close() was called. */
  get closed(): boolean {
    return this.#closing !== undefined;
  }

  /** Stops replays and closes the sockets; safe to call twice. */
  close(): Promise<void> {
    return (this.#closing ??= this.#shutdown());
  }

  async #shutdown(): Promise<void> {
    for (const r of this.#ranks) r.close();
    await this.#transport.close();
  }

  #decode(rank: number, f: SeqFrame, replayed: boolean): void {
    const d = decodeEventBatch(f.payload);
    if (!d.ok) {
      this.#malformed(rank, f.seq, d.reason);
      return;
    }
    const m = this.#mirrors[rank];
    if (m === undefined) return; // the transport binds only ranks 0..N-1
    const batch = d.batch;
    this.#inOrder(
      () => m.prepare(batch, rank),
      () =>
        this.#guarded(rank, 'stream.batch', () => {
          const delta = m.apply(batch, rank);
          if (delta.reset !== undefined || delta.added.length > 0 || delta.removed.length > 0 || delta.tiers !== undefined) {
            this.#o.onDelta(this.#ranked(delta, rank));
          }
          this.#o.onBatch?.({ rank, seq: f.seq, ts: batch.ts, events: batch.events.length, replayed });
        }),
    );
  }

  // A sequencer's fact is told in order with the batches it came after: a replayed batch waiting
  // for the pool to hash it was overtaken by the replay's "caught up", a restored stream turned
  // streaming on it, and the gateway routed a chat away from the replica whose blocks were still
  // on their way (the cluster test, under the whole suite).
  #sequencerStatus(s: KvStatus): void {
    const m = s.type === 'stream.reset' ? this.#mirrors[s.rank] : undefined;
    this.#inOrder(
      () => undefined,
      () => {
        this.#status(s);
        if (m !== undefined && s.type === 'stream.reset') this.#guarded(s.rank, s.type, () => this.#o.onDelta(this.#ranked(m.resetRank(s.rank, s.reason), s.rank)));
      },
    );
  }

  // Applies in arrival order. The usual batch (a verified engine, nothing queued) is applied right
  // here; one whose hashes the worker pool computes waits for them, and every later batch or reset
  // waits behind it, so the mirror never sees them out of order.
  #inOrder(prepare: () => Promise<void> | undefined, apply: () => void): void {
    if (this.#queue === undefined) {
      const hashing = prepare();
      if (hashing === undefined) {
        apply();
        return;
      }
      this.#enqueue(() => hashing.then(apply));
      return;
    }
    this.#enqueue(async () => {
      await prepare();
      apply();
    });
  }

  #enqueue(work: () => Promise<void>): void {
    // prepare() never rejects and apply() is guarded: the catch is for our own bugs.
    const next: Promise<void> = (this.#queue ?? Promise.resolve())
      .then(work)
      .catch((err: unknown) => this.#log.error({ err }, 'kv.stream.apply_failed'))
      .finally(() => {
        if (this.#queue === next) this.#queue = undefined;
      });
    this.#queue = next;
  }

  // The owner's bug must not stop the socket loop: every later batch would be lost.
  #guarded(rank: number, event: string, fn: () => void): void {
    try {
      fn();
    } catch (err) {
      this.#log.error({ rank, event, err }, 'kv.subscriber.handler_failed');
    }
  }

  #malformed(rank: number, seq: number | null, reason: string): void {
    const r = this.#ranks[rank];
    if (r === undefined) return;
    r.stats.malformed++;
    this.#status({ type: 'stream.malformed', rank, seq, reason, count: r.stats.malformed });
    const now = this.#now();
    const last = this.#lastLogAt.get(rank);
    if (last !== undefined && now - last < (this.#o.logIntervalMs ?? 10_000)) {
      this.#suppressed.set(rank, (this.#suppressed.get(rank) ?? 0) + 1);
      return;
    }
    this.#lastLogAt.set(rank, now);
    const suppressed = this.#suppressed.get(rank) ?? 0;
    this.#suppressed.set(rank, 0);
    this.#log.warn({ rank, seq, reason, total: r.stats.malformed, suppressed }, 'kv.subscriber.malformed_batch');
  }

  // A single-rank engine's deltas stay unranked (the index's merged slot, scored whole); a
  // data-parallel engine's name their rank, so the router scores each rank's cache as its own.
  #ranked(d: KvDelta, rank: number): KvDelta {
    if (this.#mirrors.length > 1) d.rank = rank;
    return d;
  }

  // Every rank's mirror verifies itself; the engine counts as verified once, at the first.
  #mirrorStatus(s: KvStatus): void {
    if (s.type === 'mirror.verified') {
      if (this.#verifiedReported) return;
      this.#verifiedReported = true;
    }
    this.#status(s);
  }

  #status(s: KvStatus): void {
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
      case 'stream.gapped':
        this.#log.info({ rank: s.rank, expected: s.expected, got: s.got }, 'kv.stream.gap');
        break;
      case 'stream.resynced':
        this.#log.info({ rank: s.rank, from: s.from, to: s.to, replayed: s.replayed }, 'kv.stream.resynced');
        break;
      case 'stream.replaying':
      case 'stream.malformed':
        // Counted; malformed input is logged above at most once per interval.
        break;
    }
    if (this.#o.onStatus === undefined) return;
    try {
      this.#o.onStatus(s);
    } catch (err) {
      this.#log.error({ rank: 'rank' in s ? s.rank : null, event: s.type, err }, 'kv.subscriber.handler_failed');
    }
  }
}
