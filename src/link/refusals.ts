// Refusals on the link, counted by reason and logged at most once per reason per interval. A peer
// can be refused as fast as ZeroMQ reconnects (every 100 ms per socket, from as many sockets as it
// likes): one line each was 7,465 lines in 9 s. The counts are whole; the log line says how many
// refusals of its reason it stood for since the last one.
import type { Logger } from '../log/index.js';

/** Why the link refused a peer or a message. */
export type RefusalReason =
  // In the handshake, before any message: garbage or an oversized frame (the connection dropped
  // before the handshake ended), the NULL or PLAIN mechanism, a peer that does not hold the key
  // for our public key, a key cluster.nodes does not list, another ZMTP error.
  | 'malformed'
  | 'wrong-mechanism'
  | 'wrong-server-key'
  | 'unlisted-key'
  | 'handshake'
  // After it: a message that does not decode, and the admission of a node.
  | 'decode'
  | 'unknown-node'
  | 'bad-proof'
  | 'bad-inventory'
  | 'not-placed';

interface Pending {
  lastLogAt: number;
  suppressed: number;
}

/** Counts every refusal and logs a sample of them. */
export class RefusalLog {
  /** Refusals so far, by reason (the link's metrics read this). */
  readonly counts = new Map<string, number>();
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #intervalMs: number;
  readonly #pending = new Map<string, Pending>();

  constructor(o: { log: Logger; now: () => number; intervalMs: number }) {
    this.#log = o.log;
    this.#now = o.now;
    this.#intervalMs = o.intervalMs;
  }

  /** Counts one refusal; logs it unless a line for its reason went out within the interval. */
  note(reason: RefusalReason, fields: Record<string, unknown>): void {
    this.counts.set(reason, (this.counts.get(reason) ?? 0) + 1);
    const now = this.#now();
    const p = this.#pending.get(reason);
    if (p !== undefined && now - p.lastLogAt < this.#intervalMs) {
      p.suppressed++;
      return;
    }
    const suppressed = p?.suppressed ?? 0;
    this.#pending.set(reason, { lastLogAt: now, suppressed: 0 });
    this.#log.warn({ ...fields, reason, ...(suppressed > 0 ? { suppressed, sinceMs: now - (p?.lastLogAt ?? now) } : {}) }, 'link.node.refused');
  }
}
