// The credential a batch's line is sent with: this process's random secret and the sha256 of the key
// that created the batch. It never leaves the process (the runner sends it to its own gateway over
// loopback) and dies with it, so it is no key anyone can steal or reuse; the secret is compared in
// constant time so a guesser learns nothing from how fast a wrong one is refused.
import { randomBytes, timingSafeEqual } from 'node:crypto';

const prefix = 'llmgw-batch.';

/** This process's batch credential: what the runner sends, and how the gateway reads it back. */
export class InnerKeys {
  readonly #secret = randomBytes(32).toString('hex');

  /** The Authorization header of a line run as the key with this sha256. */
  authorization(sha256: string): string {
    return `Bearer ${prefix}${this.#secret}.${sha256}`;
  }

  /** The sha256 a header made by authorization() names, or undefined for any other header. */
  sha256Of(authorization: string | undefined): string | undefined {
    const m = /^Bearer llmgw-batch\.([0-9a-f]{64})\.([0-9a-f]{64}|)$/.exec(authorization ?? '');
    if (m?.[1] === undefined || m[2] === undefined) return undefined;
    return timingSafeEqual(Buffer.from(m[1]), Buffer.from(this.#secret)) ? m[2] : undefined;
  }
}
