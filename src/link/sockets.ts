// The link's ZeroMQ edge. The gateway binds a ROUTER as CURVE server; each agent connects a DEALER
// with its own keypair and reconnects by itself (ZeroMQ retries every 100 ms). A ZAP handler on the
// gateway's own context admits only the public keys listed in the config: an unlisted node is
// refused in the handshake, before it can send one message. Every refusal, in the handshake or of a
// message, is counted by reason and logged (a sample, with counts: see refusals.ts). No message or
// frame may be over the link's maximum size, the handshake's included: a peer announcing a huge
// frame before authenticating was held while it sent it (four such grew the gateway by 1.5 GB).
import { randomBytes } from 'node:crypto';
import { Context, Dealer, Router } from 'zeromq';
import { silentLogger, type Logger } from '../log/index.js';
import { z85Encode, type KeyPair } from './keys.js';
import { decodeAgentMessage, decodeGatewayMessage, encodeAgentMessage, encodeGatewayMessage, LinkDecodeError, type AgentMessage, type GatewayMessage } from './messages.js';
import type { RefusalReason } from './refusals.js';

const zapEndpoint = 'inproc://zeromq.zap.01';
const zapDomain = 'llmgw';

/** Sends frames one at a time (a ZeroMQ socket refuses a send while another is under way), in order, bounded. */
class SendQueue {
  readonly #frames: (Uint8Array | string)[][] = [];
  readonly #send: (frames: (Uint8Array | string)[]) => Promise<void>;
  readonly #max: number;
  readonly #onFailure: (e: unknown) => void;
  #pumping = false;
  #closed = false;

  constructor(send: (frames: (Uint8Array | string)[]) => Promise<void>, max: number, onFailure: (e: unknown) => void) {
    this.#send = send;
    this.#max = max;
    this.#onFailure = onFailure;
  }

  /** Queues frames; false when the queue is full (nothing queued). */
  push(frames: (Uint8Array | string)[]): boolean {
    if (this.#closed) return true;
    if (this.#frames.length >= this.#max) return false;
    this.#frames.push(frames);
    // Sends are serialised by this one pump; its failures go to onFailure, so it never floats.
    if (!this.#pumping) void this.#pump();
    return true;
  }

  clear(): void {
    this.#frames.length = 0;
  }

  close(): void {
    this.#closed = true;
    this.#frames.length = 0;
  }

  async #pump(): Promise<void> {
    this.#pumping = true;
    try {
      for (let f = this.#frames.shift(); f !== undefined && !this.#closed; f = this.#frames.shift()) {
        try {
          await this.#send(f);
        } catch (e) {
          if (!this.#closed) this.#onFailure(e);
        }
      }
    } finally {
      this.#pumping = false;
    }
  }
}

/** How the gateway's end of the link is built. */
export interface LinkServerOptions {
  /** Where to bind, e.g. tcp://0.0.0.0:5555 (tcp://127.0.0.1:* picks a free port). */
  readonly endpoint: string;
  readonly keys: KeyPair;
  /** Listed public keys (Z85) and the node each belongs to; read at each handshake. */
  readonly allowed: () => ReadonlyMap<string, string>;
  readonly onMessage: (peer: string, seq: number, msg: AgentMessage) => void;
  /** A peer was refused in the handshake, or sent what does not decode. */
  readonly onRefused: (reason: RefusalReason, fields: Record<string, unknown>) => void;
  /** The largest message (and handshake frame) a peer may send. */
  readonly maxMessageBytes: number;
  readonly log?: Logger | undefined;
}

/** The gateway's ROUTER with its ZAP handler. */
export class LinkServer {
  readonly #o: LinkServerOptions;
  readonly #log: Logger;
  // A context of its own: the ZAP handler is per context, and the KV-event sockets of the same
  // process must not be asked for credentials.
  readonly #context = new Context();
  readonly #zap: Router;
  readonly #router: Router;
  readonly #queue: SendQueue;
  #loops: Promise<void>[] = [];
  // Connections accepted whose handshake has not ended (see #eventLoop).
  #handshaking = 0;
  #closing: Promise<void> | undefined;

  constructor(o: LinkServerOptions) {
    this.#o = o;
    this.#log = o.log ?? silentLogger;
    this.#zap = new Router({ context: this.#context, linger: 0 });
    this.#router = new Router({
      context: this.#context,
      linger: 0,
      curveServer: true,
      curveSecretKey: o.keys.secretKey,
      zapDomain,
      handover: true,
      sendHighWaterMark: 100_000,
      maxMessageSize: o.maxMessageBytes,
    });
    this.#queue = new SendQueue((f) => this.#router.send(f), 100_000, (e) => this.#log.warn({ error: e }, 'link.send_failed'));
  }

  /** Binds the handler and the link; resolves with the bound endpoint. */
  async start(): Promise<string> {
    await this.#zap.bind(zapEndpoint);
    await this.#router.bind(this.#o.endpoint);
    this.#loops = [this.#zapLoop(), this.#readLoop(), this.#eventLoop()];
    return this.#router.lastEndpoint ?? this.#o.endpoint;
  }

  /** Sends one message to the agent behind `peer`; a peer that left is dropped by ZeroMQ. */
  send(peer: string, msg: GatewayMessage): void {
    if (!this.#queue.push([Buffer.from(peer, 'hex'), encodeGatewayMessage(msg)])) this.#log.warn({ peer }, 'link.send_queue_full');
  }

  async #zapLoop(): Promise<void> {
    for await (const frames of this.#zap) {
      // RFC 27: routing id, empty, version, request id, domain, address, identity, mechanism, key.
      const [id, empty, version, requestId, , address, , mechanism, key] = frames;
      if (id === undefined || empty === undefined || version === undefined || requestId === undefined) continue;
      const z85 = key !== undefined && key.length === 32 ? z85Encode(key) : '';
      const node = mechanism?.toString() === 'CURVE' ? this.#o.allowed().get(z85) : undefined;
      if (node === undefined) {
        const m = mechanism?.toString() ?? '';
        this.#o.onRefused(m === 'CURVE' ? 'unlisted-key' : 'wrong-mechanism', { address: address?.toString() ?? '', key: z85, mechanism: m });
      }
      await this.#zap.send([id, empty, version, requestId, node === undefined ? '400' : '200', node === undefined ? 'key not listed in cluster.nodes' : 'OK', node ?? '', '']);
    }
  }

  async #readLoop(): Promise<void> {
    for await (const [id, body] of this.#router) {
      if (id === undefined || body === undefined) continue;
      let decoded: ReturnType<typeof decodeAgentMessage>;
      try {
        decoded = decodeAgentMessage(body);
      } catch (e) {
        if (!(e instanceof LinkDecodeError)) throw e;
        this.#o.onRefused('decode', { peer: id.toString('hex'), error: e.message });
        continue;
      }
      this.#o.onMessage(id.toString('hex'), decoded.seq, decoded.msg);
    }
  }

  // Refusals before the ZAP handler is asked: ZeroMQ drops these connections itself and says so only
  // on the socket's monitor. Its events name the endpoint, not the peer; a connection that drops
  // before its handshake ended (garbage, a frame over the maximum size) shows as a disconnect with
  // no handshake event, counted here while any handshake is open. An agent leaving at the instant
  // another connection is mid-handshake is counted as malformed: the monitor cannot tell them apart.
  async #eventLoop(): Promise<void> {
    for await (const e of this.#router.events) {
      switch (e.type) {
        case 'accept':
          this.#handshaking++;
          break;
        case 'handshake':
        case 'handshake:error:auth':
          // The ZAP handler decided, and counted what it refused.
          this.#handshaking = Math.max(0, this.#handshaking - 1);
          break;
        case 'handshake:error:protocol': {
          this.#handshaking = Math.max(0, this.#handshaking - 1);
          const code = e.error.code;
          const reason = code === 'ERR_ZMTP_MECHANISM_MISMATCH' ? 'wrong-mechanism' : code === 'ERR_ZMTP_CRYPTOGRAPHIC' ? 'wrong-server-key' : 'handshake';
          this.#o.onRefused(reason, { address: e.address, error: code });
          break;
        }
        case 'handshake:error:other':
          this.#handshaking = Math.max(0, this.#handshaking - 1);
          this.#o.onRefused('handshake', { address: e.address, error: e.error.code });
          break;
        case 'disconnect':
          if (this.#handshaking > 0) {
            this.#handshaking--;
            this.#o.onRefused('malformed', { address: e.address, maxMessageBytes: this.#o.maxMessageBytes });
          }
          break;
        case 'accept:error':
        case 'bind':
        case 'bind:error':
        case 'close':
        case 'close:error':
        case 'connect':
        case 'connect:delay':
        case 'connect:retry':
        case 'end':
        case 'unknown':
          break;
      }
    }
  }

  /** Unbinds and stops the loops; idempotent. */
  close(): Promise<void> {
    return (this.#closing ??= this.#shutdown());
  }

  async #shutdown(): Promise<void> {
    this.#queue.close();
    this.#router.events.close();
    this.#router.close();
    this.#zap.close();
    await Promise.allSettled(this.#loops);
  }
}

/** How an agent's end of the link is built. */
export interface LinkClientOptions {
  /** The gateway's link, e.g. tcp://10.0.0.1:5555. */
  readonly endpoint: string;
  /** The gateway's public key (Z85), so the agent talks to that gateway only. */
  readonly serverKey: string;
  readonly keys: KeyPair;
  readonly onMessage: (msg: GatewayMessage) => void;
  /** The socket (re)connected: a gateway that restarted needs to hear from us to challenge us. */
  readonly onConnect: () => void;
  /** Messages were dropped because the link was down too long: the session must start over. */
  readonly onOverflow: () => void;
  /** The largest message (and handshake frame) the gateway may send. */
  readonly maxMessageBytes: number;
  /** Local address to connect from (a node on 127.0.0.2 says so here), or undefined. */
  readonly sourceAddr?: string | undefined;
  readonly log?: Logger | undefined;
}

/** The agent's DEALER: connects, reconnects, sends in order and bounded. */
export class LinkClient {
  readonly #o: LinkClientOptions;
  readonly #log: Logger;
  readonly #dealer: Dealer;
  readonly #queue: SendQueue;
  #loops: Promise<void>[] = [];
  #closing: Promise<void> | undefined;

  constructor(o: LinkClientOptions) {
    this.#o = o;
    this.#log = o.log ?? silentLogger;
    this.#dealer = new Dealer({
      linger: 0,
      // A new id per run: the gateway tells a restarted agent from its predecessor.
      routingId: randomBytes(12).toString('hex'),
      curveServerKey: o.serverKey,
      curvePublicKey: o.keys.publicKey,
      curveSecretKey: o.keys.secretKey,
      sendHighWaterMark: 100_000,
      heartbeatInterval: 1_000,
      heartbeatTimeout: 3_000,
      maxMessageSize: o.maxMessageBytes,
    });
    this.#queue = new SendQueue((f) => this.#dealer.send(f), 50_000, (e) => this.#log.warn({ error: e }, 'link.send_failed'));
  }

  /** Connects (ZeroMQ keeps reconnecting) and starts reading. */
  start(): void {
    const at = this.#o.sourceAddr === undefined ? this.#o.endpoint : this.#o.endpoint.replace('tcp://', `tcp://${this.#o.sourceAddr}:0;`);
    this.#dealer.connect(at);
    this.#loops = [this.#readLoop(), this.#eventLoop()];
  }

  /** Queues one message; on overflow the queue is emptied and the owner starts the session over. */
  send(seq: number, msg: AgentMessage): void {
    if (this.#queue.push([encodeAgentMessage(seq, msg)])) return;
    this.#queue.clear();
    this.#log.warn({}, 'link.send_queue_full');
    this.#o.onOverflow();
  }

  async #readLoop(): Promise<void> {
    for await (const [body] of this.#dealer) {
      if (body === undefined) continue;
      try {
        this.#o.onMessage(decodeGatewayMessage(body));
      } catch (e) {
        if (!(e instanceof LinkDecodeError)) throw e;
        this.#log.error({ error: e.message }, 'link.message.malformed');
      }
    }
  }

  async #eventLoop(): Promise<void> {
    for await (const e of this.#dealer.events) {
      if (e.type === 'handshake') {
        this.#log.info({ endpoint: this.#o.endpoint }, 'link.connected');
        this.#o.onConnect();
      } else if (e.type === 'disconnect') this.#log.warn({ endpoint: this.#o.endpoint }, 'link.disconnected');
      else if (e.type === 'handshake:error:auth') this.#log.error({ endpoint: this.#o.endpoint, error: e.error.message }, 'link.auth_failed');
      else if (e.type === 'handshake:error:protocol') this.#log.error({ endpoint: this.#o.endpoint, error: e.error.message }, 'link.handshake_failed');
    }
  }

  /** Disconnects and stops the loops; idempotent. */
  close(): Promise<void> {
    return (this.#closing ??= this.#shutdown());
  }

  async #shutdown(): Promise<void> {
    this.#queue.close();
    this.#dealer.close();
    await Promise.allSettled(this.#loops);
  }
}
