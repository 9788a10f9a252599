// The transport: one SUB socket per data-parallel rank, reduced to [seq, payload] frames. It binds
// where vLLM connects (a tcp://host:port endpoint: the side that stays up must bind), and connects
// where the engine binds its own socket (ipc:// in the agent's private directory). It checks only
// the framing (three frames, our exact topic, a usable 8-byte sequence number); ordering is the
// sequencer's job and the payload the decoder's.
import { Subscriber } from 'zeromq';
import { bindReleased } from './bind.js';
import { readSeq } from './replay.js';
import type { SeqFrame } from './sequencer.js';

/** An engine that binds its own sockets (vLLM on ipc://): the SUB and the replay DEALER connect to these. */
export interface EngineBoundEndpoints {
  readonly endpoint: string;
  readonly replayEndpoint: string | undefined;
}

/** Where a transport binds or connects and what it hands on. */
export interface SubTransportOptions {
  /** One endpoint per rank, rank r at index r. */
  readonly endpoints: readonly string[];
  /** Connect instead of bind: the engine binds (ipc://). */
  readonly connect?: boolean;
  /** Each (re)connection to an engine-bound socket, which may have missed what was published before it. */
  readonly onConnected?: (rank: number) => void;
  readonly topic: string;
  readonly onFrame: (rank: number, frame: SeqFrame) => void;
  /** A message that is not [topic, seq, payload] under our topic: counted by the owner, never thrown. */
  readonly onMalformed: (rank: number, reason: string) => void;
  /** The read loop of a rank failed (a bug in the socket layer); the rank's silence has this reason. */
  readonly onFailure: (rank: number, e: unknown) => void;
}

/** The SUB sockets of one engine; `close()` ends every read loop. */
export class SubTransport {
  readonly #o: SubTransportOptions;
  readonly #topic: Buffer;
  readonly #sockets: Subscriber[] = [];
  readonly #loops: Promise<void>[] = [];
  #started: Promise<void> | undefined;
  #closing: Promise<void> | undefined;

  constructor(o: SubTransportOptions) {
    this.#o = o;
    this.#topic = Buffer.from(o.topic, 'utf8');
  }

  /** Binds every rank's socket and starts reading; resolves once all are bound. A failed start may be tried again. */
  start(): Promise<void> {
    return (this.#started ??= this.#bindAll().catch((e: unknown) => {
      this.#started = undefined;
      throw e;
    }));
  }

  async #bindAll(): Promise<void> {
    const opened: Subscriber[] = [];
    try {
      for (const [rank, endpoint] of this.#o.endpoints.entries()) {
        if (this.#closing !== undefined) return;
        // libzmq's default receive bound is 1000 messages: a burst past it would be dropped before
        // we read it. vLLM's own bound on the sending side is 100 000.
        const sock = new Subscriber({ linger: 0, receiveHighWaterMark: 100_000 });
        opened.push(sock);
        this.#sockets.push(sock);
        sock.subscribe(this.#topic);
        if (this.#o.connect === true) {
          const onConnected = this.#o.onConnected;
          if (onConnected !== undefined) sock.events.on('handshake', () => onConnected(rank));
          // ZeroMQ retries until the engine's socket file appears: connecting first is fine.
          sock.connect(endpoint);
        } else await bindReleased(sock, endpoint);
        // Runs until close() closes the socket, which ends the iterator.
        this.#loops.push(this.#read(sock, rank).catch((e: unknown) => this.#o.onFailure(rank, e)));
      }
    } catch (e) {
      // Ranks bound before the failure would hold their ports against the next try.
      for (const s of opened) if (!s.closed) s.close();
      throw e;
    }
  }

  async #read(sock: Subscriber, rank: number): Promise<void> {
    for await (const frames of sock) {
      const [topic, seqBytes, payload] = frames;
      if (frames.length !== 3 || topic === undefined || seqBytes === undefined || payload === undefined) {
        this.#o.onMalformed(rank, `message of ${frames.length} frames, wanted [topic, seq, payload]`);
        continue;
      }
      // SUB filters by prefix: "kv" would also admit "kv-events" from a neighbour on a wrong port.
      if (!topic.equals(this.#topic)) {
        this.#o.onMalformed(rank, `topic ${JSON.stringify(topic.toString('utf8'))} is not the configured one`);
        continue;
      }
      const seq = readSeq(seqBytes);
      if (seq === undefined || seq === 'end') {
        this.#o.onMalformed(rank, `sequence frame of ${seqBytes.byteLength} bytes is not a usable uint64`);
        continue;
      }
      this.#o.onFrame(rank, { seq, payload });
    }
  }

  /** Closes every socket (linger 0), which ends the read loops; safe to call twice. */
  close(): Promise<void> {
    return (this.#closing ??= this.#shutdown());
  }

  async #shutdown(): Promise<void> {
    await this.#started?.catch(() => undefined);
    for (const s of this.#sockets) if (!s.closed) s.close();
    await Promise.all(this.#loops);
  }
}
