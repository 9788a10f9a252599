// A ZeroMQ KV-event publisher that behaves on the wire exactly like vLLM's ZmqEventPublisher
// (vllm/distributed/kv_events.py): the sim engine publishes through it, and tests use it as a
// stand-in vLLM. Every rule below was checked against real captures (shared/vectors/).
import { Publisher, Router } from 'zeromq';
import { LlmgwError } from '../errors/index.js';
import { silentLogger, type Logger } from '../log/index.js';
import { bindReleased } from './bind.js';
import { encodeEventBatch } from './encoder.js';
import type { EventFormat, KvEvent } from './events.js';

/** Replay reply shape: 'topic' = vLLM v0.26+ (`["", topic, seq, payload]`), 'legacy' = up to v0.25.1. */
export type ReplayFraming = 'topic' | 'legacy';

/** vLLM's KVEventsConfig fields that shape the wire, plus injected time and logging. */
export interface KvEventPublisherOptions {
  readonly endpoint: string;
  readonly replayEndpoint?: string;
  /** First frame of every live message; SUB filtering is a prefix match on it. Default "". */
  readonly topic?: string;
  /** Batches kept for replay (vLLM's buffer_steps, default 10000). */
  readonly bufferSteps?: number;
  /** PUB high-water mark (vLLM's hwm, default 100000): past it PUB drops, as vLLM's does. */
  readonly hwm?: number;
  readonly eventFormat?: EventFormat;
  readonly replayFraming?: ReplayFraming;
  readonly dataParallelRank?: number;
  /** Seconds since the epoch for a batch's ts; tests pin it so payloads are reproducible. */
  readonly now?: () => number;
  readonly log?: Logger;
}

/** The seq frame of replay's end marker: -1 as 8 signed big-endian bytes. */
export const END_SEQ = Buffer.alloc(8, 0xff);

/**
 * vLLM's bind-or-connect rule: PUB binds when the endpoint has `*` or `::` or is ipc:// or inproc://,
 * and connects otherwise. So `tcp://127.0.0.1:5557` makes vLLM connect to a SUB the gateway bound.
 */
export function publisherBinds(endpoint: string): boolean {
  return endpoint.includes('*') || endpoint.includes('::') || endpoint.startsWith('ipc://') || endpoint.startsWith('inproc://');
}

/**
 * vLLM's offset_endpoint_port: data-parallel rank r publishes on port + r (tcp) or name + `_dp{r}`
 * (inproc); rank 0 is unchanged; any other transport fails for r > 0, as vLLM's does (ipc:// too).
 */
export function offsetEndpointPort(endpoint: string, rank: number): string {
  if (rank === 0) return endpoint;
  if (endpoint.includes('inproc')) return `${endpoint}_dp${rank}`;
  if (endpoint.includes('tcp')) {
    const colon = endpoint.lastIndexOf(':');
    const port = Number(endpoint.slice(colon + 1));
    if (colon < 0 || !Number.isSafeInteger(port)) {
      throw new LlmgwError(
        'LLMGW_KV_ENDPOINT',
        `KV events endpoint ${JSON.stringify(endpoint)} has no numeric port to offset for data-parallel rank ${rank}; give a fixed port such as tcp://*:5557`,
      );
    }
    return `${endpoint.slice(0, colon)}:${port + rank}`;
  }
  throw new LlmgwError(
    'LLMGW_KV_ENDPOINT',
    `KV events endpoint ${JSON.stringify(endpoint)} cannot be offset for data-parallel rank ${rank}: vLLM accepts only tcp:// or inproc:// then ("Invalid endpoint: must contain 'inproc' or 'tcp'")`,
  );
}

function seqBytes(seq: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(BigInt(seq));
  return b;
}

function positiveInt(v: number, name: string): number {
  if (!Number.isSafeInteger(v) || v < 1) {
    throw new LlmgwError('LLMGW_KV_PUBLISHER', `kv_events_config.${name}: ${String(v)} is not a positive integer`);
  }
  return v;
}

async function bindOrExplain(sock: Publisher | Router, endpoint: string, field: string): Promise<void> {
  try {
    await bindReleased(sock, endpoint);
  } catch (e) {
    throw bindError(e, endpoint, field);
  }
}

function bindError(e: unknown, endpoint: string, field: string): LlmgwError {
  return new LlmgwError(
    'LLMGW_KV_BIND',
    `kv_events_config.${field} ${JSON.stringify(endpoint)} cannot be bound (${e instanceof Error ? e.message : String(e)}); choose a free port or another address`,
    { cause: e },
  );
}

interface Buffered {
  readonly seq: number;
  readonly payload: Uint8Array;
}

/** vLLM's publisher: PUB [topic, seq8, payload] per batch, a bounded replay buffer, a ROUTER for replay. */
export class KvEventPublisher {
  /** The endpoint after the data-parallel offset (the one actually bound or connected). */
  readonly endpoint: string;
  readonly replayEndpoint: string | null;
  readonly dataParallelRank: number;
  readonly #pub: Publisher;
  readonly #router: Router | null;
  readonly #topic: Buffer;
  readonly #bufferSteps: number;
  readonly #format: EventFormat;
  readonly #framing: ReplayFraming;
  readonly #now: () => number;
  readonly #log: Logger;
  readonly #ring: Buffered[] = [];
  #head = 0;
  #seq = 0;
  readonly #ready: Promise<void>;
  #chain: Promise<void> = Promise.resolve();
  #replayLoop: Promise<void> = Promise.resolve();
  #closing: Promise<void> | undefined;

  constructor(o: KvEventPublisherOptions) {
    this.dataParallelRank = o.dataParallelRank ?? 0;
    if (!Number.isSafeInteger(this.dataParallelRank) || this.dataParallelRank < 0) {
      throw new LlmgwError('LLMGW_KV_PUBLISHER', `data-parallel rank ${String(o.dataParallelRank)} is not a non-negative integer`);
    }
    this.endpoint = offsetEndpointPort(o.endpoint, this.dataParallelRank);
    this.replayEndpoint = o.replayEndpoint === undefined ? null : offsetEndpointPort(o.replayEndpoint, this.dataParallelRank);
    this.#topic = Buffer.from(o.topic ?? '', 'utf8');
    this.#bufferSteps = positiveInt(o.bufferSteps ?? 10_000, 'buffer_steps');
    this.#format = o.eventFormat ?? 'map';
    this.#framing = o.replayFraming ?? 'topic';
    this.#now = o.now ?? (() => Date.now() / 1000);
    this.#log = o.log ?? silentLogger;
    // linger 0: closing never waits for a subscriber that went away, as vLLM closes its sockets.
    this.#pub = new Publisher({ linger: 0, sendHighWaterMark: positiveInt(o.hwm ?? 100_000, 'hwm') });
    this.#router = this.replayEndpoint === null ? null : new Router({ linger: 0 });
    this.#ready = this.#open();
    // A failed bind is reported to every publish() and to ready(); this only keeps it from being
    // reported a second time as an unhandled rejection.
    this.#ready.catch(() => undefined);
  }

  async #open(): Promise<void> {
    if (publisherBinds(this.endpoint)) await bindOrExplain(this.#pub, this.endpoint, 'endpoint');
    else this.#pub.connect(this.endpoint);
    const router = this.#router;
    if (router !== null && this.replayEndpoint !== null) {
      // vLLM always binds the replay socket.
      await bindOrExplain(router, this.replayEndpoint, 'replay_endpoint');
      this.#replayLoop = this.#serveReplay(router).catch((e: unknown) => {
        // A send cut short by close() is the normal end; anything else stops replay for good.
        if (!router.closed) this.#log.error({ err: e, endpoint: this.replayEndpoint }, 'kv.publisher.replay_failed');
      });
    }
  }

  /** Resolves once the sockets are bound or connected, with the endpoints actually in use (ports resolved). */
  async ready(): Promise<{ endpoint: string; replayEndpoint: string | null }> {
    await this.#ready;
    return {
      endpoint: publisherBinds(this.endpoint) ? (this.#pub.lastEndpoint ?? this.endpoint) : this.endpoint,
      replayEndpoint: this.#router === null ? null : (this.#router.lastEndpoint ?? this.replayEndpoint),
    };
  }

  /** The sequence number the next batch will carry (vLLM starts every publisher at 0). */
  get seq(): number {
    return this.#seq;
  }

  /** Publishes one batch (one engine step) with the next sequence number; batches go out in call order. */
  publish(events: KvEvent[]): Promise<void> {
    if (this.#closing !== undefined) {
      return Promise.reject(new LlmgwError('LLMGW_KV_PUBLISHER_CLOSED', `KV event publisher on ${this.endpoint} is closed; publish before close()`));
    }
    const sent = this.#chain.then(() => this.#send(events));
    this.#chain = sent.catch(() => undefined);
    return sent;
  }

  async #send(events: KvEvent[]): Promise<void> {
    await this.#ready;
    const seq = this.#seq;
    const payload = encodeEventBatch({ ts: this.#now(), events, dataParallelRank: this.dataParallelRank }, { eventFormat: this.#format });
    await this.#pub.send([this.#topic, seqBytes(seq), payload]);
    this.#seq = seq + 1;
    if (this.#ring.length < this.#bufferSteps) this.#ring.push({ seq, payload });
    else {
      this.#ring[this.#head] = { seq, payload };
      this.#head = (this.#head + 1) % this.#bufferSteps;
    }
  }

  #buffered(): Buffered[] {
    return [...this.#ring.slice(this.#head), ...this.#ring.slice(0, this.#head)];
  }

  async #serveReplay(router: Router): Promise<void> {
    for await (const frames of router) {
      // vLLM wants exactly [identity, delimiter, start_seq]; anything else gets no reply at all.
      const [id, , start] = frames;
      if (frames.length !== 3 || id === undefined || start === undefined) {
        this.#log.warn({ frames: frames.length }, 'kv.publisher.invalid_replay_request');
        continue;
      }
      let from = 0n;
      for (const b of start) from = (from << 8n) | BigInt(b);
      // Replay starts at the oldest batch still buffered when the request is older: the client
      // must compare the first seq it gets with the one it asked for.
      for (const b of this.#buffered()) {
        if (BigInt(b.seq) < from) continue;
        if (this.#framing === 'topic') await router.send([id, '', this.#topic, seqBytes(b.seq), b.payload]);
        else await router.send([id, '', seqBytes(b.seq), b.payload]);
      }
      // The end marker's topic frame is empty, not the configured topic (vLLM v0.26+).
      if (this.#framing === 'topic') await router.send([id, '', '', END_SEQ, '']);
      else await router.send([id, '', END_SEQ, '']);
    }
  }

  /** Lets queued batches go out, then closes both sockets (linger 0). Idempotent. */
  close(): Promise<void> {
    return (this.#closing ??= this.#shutdown());
  }

  async #shutdown(): Promise<void> {
    await this.#chain;
    this.#pub.close();
    this.#router?.close();
    await this.#replayLoop;
  }
}
