// One engine's KV event stream as an XState machine: the agent connects to the engine's ipc://
// socket in its private directory (or binds the loopback port a data-parallel engine publishes to), and the machine shows whether events flow in sequence, are being repaired after a
// gap, or were reset. Deltas go straight from the stream to the upstream sink: block keys are too
// many and too hot to travel as machine events, and context stays small plain data.
import { assign, fromCallback, sendTo, setup } from 'xstate';
import { EngineEventStream, type EngineBoundEndpoints, type EngineEventStreamOptions, type KvDelta, type KvStatus, type StreamState } from '../kv/index.js';

/** Where an engine's net block changes go: the gateway's index writer in one process, the agent link across nodes. */
export interface KvSink {
  /**
   * A net change of one replica's blocks (of one data-parallel rank when `rank` is set); with
   * `reset` the receiver first drops what it held for the replica, or for that rank only.
   */
  delta(replicaId: string, delta: KvDelta): void;
  /** The replica is gone: drop its blocks and free what held them. */
  forget(replicaId: string): void;
}

/** A sink that keeps nothing: the mirror still tracks the engine, nothing is routed by it. */
export const noKvSink: KvSink = { delta: () => undefined, forget: () => undefined };

/** What the publisher needs to bind and mirror one engine's events: plain data. */
export interface PublisherInput {
  readonly replicaId: string;
  /** Loopback port of data-parallel rank 0 (rank r uses port + r), chosen by the agent for the shard. */
  readonly port: number;
  /** The engine's replay port for rank 0; 0 when it has none. */
  readonly replayPort: number;
  /** Set when the engine binds ipc:// sockets in the agent's private directory: the stream connects there, ports unused. */
  readonly engineBound?: EngineBoundEndpoints | undefined;
  /** The ZeroMQ topic the engine publishes under; a batch under another topic is counted as malformed. */
  readonly topic: string;
  readonly dataParallelSize: number;
  readonly blockSizeTokens: number;
  /** PYTHONHASHSEED the engine was started with. */
  readonly seed: string;
  /** Blocks one data-parallel rank of the engine can hold; bounds that rank's mirror. */
  readonly capacityBlocks: number;
  /** Wait before binding again after the port could not be bound. */
  readonly rebindMs: number;
}

/** The publisher's context: the input and what the stream reported. */
export interface PublisherContext extends PublisherInput {
  readonly resets: number;
  readonly lastReset: string | undefined;
  readonly verification: 'pending' | 'verified' | 'mismatch';
  readonly reason: string | undefined;
}

/** Facts from the stream, and the one command from the replica. */
export type PublisherEvent =
  | { readonly type: 'stream.bound' }
  | { readonly type: 'stream.failed'; readonly reason: string }
  | { readonly type: 'stream.flowing' }
  | { readonly type: 'stream.gapped'; readonly rank: number; readonly expected: number; readonly got: number }
  | { readonly type: 'stream.resynced'; readonly rank: number }
  | { readonly type: 'stream.reset'; readonly rank: number | null; readonly reason: string; readonly detail: string }
  | { readonly type: 'hashes.verified' }
  | { readonly type: 'hashes.mismatched'; readonly reason: string }
  | { readonly type: 'engine.restarted'; readonly detail: string };

/** What the machine tells the stream actor. */
export type StreamCommand = { readonly type: 'engine.restarted'; readonly detail: string };

/** Builds an engine's event stream: plainly, or wrapped by the composition root (KvMetrics.open). */
export type OpenKvStream = (o: EngineEventStreamOptions) => EngineEventStream;

const plainStream: OpenKvStream = (o) => new EngineEventStream(o);

/** Where a replica's KV stream is kept across agent restarts (the agent's state directory). */
export interface KvStateStore {
  readKv(replicaId: string): StreamState | undefined;
  /** Must not throw: a failed save costs the next restart its warm start, never the stream. */
  writeKv(replicaId: string, state: StreamState): void;
}

// How often a changed stream is saved: what a crashed agent's successor can take back is this old
// at most, and replay fills the rest from the engine's buffer.
const SAVE_KV_MS = 5_000;

/**
 * The stream actor, sending deltas to `sink`: a new stream first sends a full copy (a reset and
 * every key held). With a store, it starts from what the last agent saved for the replica (its
 * engine was adopted) and saves what changed every few seconds and when it stops.
 */
export function streamEventsTo(sink: KvSink, open: OpenKvStream = plainStream, store?: KvStateStore) {
  return fromCallback<StreamCommand, PublisherContext, PublisherEvent>(({ input, sendBack, receive }) => {
    let closed = false;
    let flowing = false;
    let changed = false;
    const tell = (e: PublisherEvent): void => {
      if (!closed) sendBack(e);
    };
    const restore = store?.readKv(input.replicaId);
    // Holding the last agent's copy, and no reset since.
    let restored = restore !== undefined;
    const onStatus = (s: KvStatus): void => {
      switch (s.type) {
        case 'stream.gapped':
          tell({ type: 'stream.gapped', rank: s.rank, expected: s.expected, got: s.got });
          return;
        case 'stream.resynced':
          // A stream restored from the last agent's copy, that the engine's replay buffer found
          // nothing to add to, is current: an adopted engine that stays quiet announces nothing
          // else for as long, and its blocks are all there.
          if (restored && !flowing) {
            flowing = true;
            tell({ type: 'stream.flowing' });
          }
          tell({ type: 'stream.resynced', rank: s.rank });
          return;
        case 'stream.reset':
        case 'mirror.reset':
          flowing = false;
          restored = false;
          tell({ type: 'stream.reset', rank: s.rank, reason: s.reason, detail: s.detail });
          return;
        case 'mirror.verified':
          tell({ type: 'hashes.verified' });
          return;
        case 'mirror.hash-mismatch':
          tell({ type: 'hashes.mismatched', reason: s.reason });
          return;
        case 'stream.replaying':
        case 'stream.malformed':
          return; // counted, and malformed input logged by the stream at most once per interval
      }
    };
    const stream = open({
      engineId: input.replicaId,
      port: input.port,
      replayPort: input.replayPort > 0 ? input.replayPort : undefined,
      engineBound: input.engineBound,
      topic: input.topic,
      dataParallelSize: input.dataParallelSize,
      blockSizeTokens: input.blockSizeTokens,
      seed: input.seed,
      capacityBlocks: input.capacityBlocks,
      restore,
      onDelta: (d) => {
        changed = true;
        if (closed) return;
        sink.delta(input.replicaId, d);
        if (d.reset === undefined && !flowing) {
          flowing = true;
          tell({ type: 'stream.flowing' });
        }
      },
      onStatus,
    });
    receive((e) => {
      // The new engine's sequence starts over; without this its first batches look like a replay gap.
      if (e.type === 'engine.restarted') stream.reset('engine-restart', e.detail);
    });
    stream.start().then(
      () => {
        if (closed) return;
        // Whatever upstream held for this replica (from a previous agent, or before a rebind) is
        // replaced, rank by rank: each delta carries its rank untouched to the index.
        for (const d of stream.snapshot('requested')) sink.delta(input.replicaId, d);
        tell({ type: 'stream.bound' });
      },
      (e: unknown) =>
        tell({
          type: 'stream.failed',
          reason: `${input.engineBound === undefined ? `binding 127.0.0.1:${input.port}` : `connecting to ${input.engineBound.endpoint}`}: ${e instanceof Error ? e.message : String(e)}`,
        }),
    );
    const save = (): void => {
      if (!changed || store === undefined) return;
      changed = false;
      store.writeKv(input.replicaId, stream.state());
    };
    const saving = store === undefined ? undefined : setInterval(save, SAVE_KV_MS);
    // Saving must never keep the agent alive on its own.
    saving?.unref();
    return () => {
      clearInterval(saving);
      save();
      closed = true;
      // Cleanup cannot wait; close() is idempotent and only unbinds sockets, so its end is not awaited.
      stream.close().catch(() => undefined);
    };
  });
}

/** The publisher machine: binding, then waiting for the first batch, streaming, resyncing after a gap. */
export const publisherMachine = setup({
  types: {
    context: {} as PublisherContext,
    events: {} as PublisherEvent,
    input: {} as PublisherInput,
    tags: {} as 'streaming',
  },
  actors: { streamEvents: streamEventsTo(noKvSink) },
  actions: {
    recordReset: assign({
      resets: ({ context }) => context.resets + 1,
      lastReset: ({ event }) => (event.type === 'stream.reset' ? `${event.reason}: ${event.detail}` : event.type === 'engine.restarted' ? `engine-restart: ${event.detail}` : undefined),
    }),
    recordFailure: assign({ reason: ({ event }) => (event.type === 'stream.failed' ? event.reason : undefined) }),
    recordVerified: assign({ verification: () => 'verified' as const }),
    recordMismatch: assign({
      verification: () => 'mismatch' as const,
      reason: ({ event }) => (event.type === 'hashes.mismatched' ? event.reason : undefined),
    }),
    resetStream: sendTo('stream', ({ event }) => ({ type: 'engine.restarted' as const, detail: event.type === 'engine.restarted' ? event.detail : '' })),
  },
  delays: { rebind: ({ context }) => context.rebindMs },
}).createMachine({
  id: 'publisher',
  initial: 'open',
  context: ({ input }) => ({ ...input, resets: 0, lastReset: undefined, verification: 'pending', reason: undefined }),
  on: {
    'hashes.verified': { actions: 'recordVerified' },
    'hashes.mismatched': { actions: 'recordMismatch' },
  },
  states: {
    open: {
      initial: 'binding',
      invoke: { id: 'stream', src: 'streamEvents', input: ({ context }) => context },
      on: {
        'stream.failed': { target: 'failed', actions: 'recordFailure' },
        'stream.reset': { target: '.waiting', actions: 'recordReset' },
        'engine.restarted': { target: '.waiting', actions: ['resetStream', 'recordReset'] },
      },
      states: {
        binding: { on: { 'stream.bound': { target: 'waiting' } } },
        waiting: { on: { 'stream.flowing': { target: 'streaming' } } },
        streaming: {
          tags: ['streaming'],
          on: { 'stream.gapped': { target: 'resyncing' } },
        },
        // Replay asked for the missing batches; if it cannot fill the gap the stream resets.
        resyncing: { on: { 'stream.resynced': { target: 'streaming' }, 'stream.flowing': {} } },
      },
    },
    failed: { after: { rebind: { target: 'open' } } },
  },
});
