// One rank's KV event stream: kv's vLLM-exact publisher plus the two stream faults the sim can
// inject. Batches are published strictly in step order; a publish never blocks the step loop,
// as vLLM's scheduler hands batches to a queue its publisher thread drains.
//
// Dropping a batch must look like loss on the wire: the seq is used and the batch stays in the
// replay buffer, only the live copy never arrives. The publisher has no such switch, so with the
// drop fault on it publishes to an in-process socket and a relay forwards its frames untouched to
// the real endpoint, leaving out the chosen sequence numbers. Replay is served by the publisher
// itself, so a subscriber can recover the gap exactly as from a real one.
import { randomUUID } from 'node:crypto';
import { Publisher, Subscriber } from 'zeromq';
import { KvEventPublisher, offsetEndpointPort, publisherBinds } from '../kv/index.js';
import type { KvEvent } from '../kv/index.js';
import type { Logger } from '../log/index.js';
import type { KvEventsConfig } from './options.js';

/** What one rank's sink is built from. */
export interface RankEventsOptions {
  readonly rank: number;
  readonly config: KvEventsConfig;
  readonly eventFormat: 'map' | 'array';
  readonly replayFraming: 'topic' | 'legacy';
  /** Sequence numbers published (kept for replay) but never sent live. */
  readonly dropSeqs: ReadonlySet<number>;
  /** After this many batches the publisher is replaced by a new one starting at seq 0. */
  readonly restartAfterBatches: number | undefined;
  /** Called when the restart fault fires, before the new publisher's first batch. */
  readonly onRestart: () => void;
  readonly log: Logger;
}

interface Relay {
  readonly done: Promise<void>;
  close(): void;
}

/** A rank's publisher with the drop and restart faults around it. */
export class RankEvents {
  readonly #o: RankEventsOptions;
  #pub: KvEventPublisher;
  #relay: Relay | undefined;
  #chain: Promise<void> = Promise.resolve();
  #batches = 0;
  #restarted = false;
  #closing: Promise<void> | undefined;

  constructor(o: RankEventsOptions) {
    this.#o = o;
    this.#pub = this.#create();
  }

  #create(): KvEventPublisher {
    const c = this.#o.config;
    const lossy = this.#o.dropSeqs.size > 0;
    const pub = new KvEventPublisher({
      endpoint: lossy ? `inproc://llmgw-sim-${randomUUID()}` : c.endpoint,
      ...(c.replayEndpoint !== null ? { replayEndpoint: c.replayEndpoint } : {}),
      topic: c.topic,
      bufferSteps: c.bufferSteps,
      hwm: c.hwm,
      eventFormat: this.#o.eventFormat,
      replayFraming: this.#o.replayFraming,
      dataParallelRank: this.#o.rank,
      log: this.#o.log,
    });
    if (lossy) this.#relay = this.#startRelay(pub);
    return pub;
  }

  #startRelay(pub: KvEventPublisher): Relay {
    const outer = offsetEndpointPort(this.#o.config.endpoint, this.#o.rank);
    const sub = new Subscriber({ linger: 0 });
    const out = new Publisher({ linger: 0, sendHighWaterMark: this.#o.config.hwm });
    const run = async (): Promise<void> => {
      await pub.ready();
      sub.connect(pub.endpoint);
      sub.subscribe();
      if (publisherBinds(outer)) await out.bind(outer);
      else out.connect(outer);
      for await (const frames of sub) {
        const seqFrame = frames[1];
        const seq = seqFrame !== undefined && seqFrame.length === 8 ? Number(seqFrame.readBigUInt64BE(0)) : -1;
        if (this.#o.dropSeqs.has(seq)) {
          this.#o.log.info({ rank: this.#o.rank, seq }, 'sim.fault.event_batch_dropped');
          continue;
        }
        await out.send(frames);
      }
    };
    const done = run().catch((e: unknown) => {
      if (!sub.closed) this.#o.log.error({ rank: this.#o.rank, err: e }, 'sim.events.relay_failed');
    });
    return {
      done,
      close: () => {
        sub.close();
        out.close();
      },
    };
  }

  /** Resolves once the sockets are bound or connected; rejects when a bind failed (a port in use). */
  async ready(): Promise<void> {
    await this.#pub.ready();
  }

  /** The sequence number the next batch gets. */
  get seq(): number {
    return this.#pub.seq;
  }

  /** Queues one step's events as one batch. */
  publish(events: KvEvent[]): void {
    if (this.#closing !== undefined) return;
    this.#chain = this.#chain
      .then(() => this.#send(events))
      .catch((e: unknown) => this.#o.log.error({ rank: this.#o.rank, err: e }, 'sim.events.publish_failed'));
  }

  async #send(events: KvEvent[]): Promise<void> {
    if (this.#closing !== undefined) return;
    await this.#pub.publish(events);
    this.#batches++;
    const after = this.#o.restartAfterBatches;
    if (after !== undefined && !this.#restarted && this.#batches >= after) {
      // Once only: a restart loop would make every test of it a race against the next restart.
      this.#restarted = true;
      await this.#closeCurrent();
      this.#o.onRestart();
      this.#pub = this.#create();
      this.#o.log.info({ rank: this.#o.rank, afterBatches: this.#batches }, 'sim.fault.events_restarted');
    }
  }

  async #closeCurrent(): Promise<void> {
    await this.#pub.close();
    const relay = this.#relay;
    this.#relay = undefined;
    if (relay !== undefined) {
      relay.close();
      await relay.done;
    }
  }

  /** Every queued batch handed to the socket. */
  whenIdle(): Promise<void> {
    return this.#chain;
  }

  /** Sends what is queued, then closes the sockets (linger 0 inside the publisher). */
  close(): Promise<void> {
    return (this.#closing ??= this.#chain.then(() => this.#closeCurrent()));
  }
}
