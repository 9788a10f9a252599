// Bounded waits for tests: every wait names the condition it waits for and gives up with a message.
import { createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

/** Polls `pred` until it returns a truthy value or `timeoutMs` passes; throws naming `what`. */
export async function waitFor<T>(
  pred: () => T | Promise<T>,
  o: { timeoutMs?: number; intervalMs?: number; what?: string } = {},
): Promise<NonNullable<T>> {
  const deadline = Date.now() + (o.timeoutMs ?? 10_000);
  let last: unknown;
  for (;;) {
    try {
      const v = await pred();
      if (v) return v as NonNullable<T>;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${o.timeoutMs ?? 10_000} ms waiting for ${o.what ?? 'condition'}`, { cause: last });
    }
    await sleep(o.intervalMs ?? 20);
  }
}

/**
 * A TCP port on 127.0.0.1 that was free a moment ago, below the ephemeral range. One the kernel
 * picked (bind 0) can be handed to an outgoing connection of another test before ours binds it:
 * CI saw a sim's replay port taken that way.
 */
export function freePort(): Promise<number> {
  return freePortRange(1);
}

// Below Linux's ephemeral range (32768-60999 by default): a port the kernel hands to some outgoing
// connection of the suite can never land inside a range taken from here.
const RANGE_LOW = 20_000;
const RANGE_HIGH = 32_000;

/**
 * The first of `count` consecutive ports that were all free a moment ago, below the ephemeral range:
 * for configs that place engines at base, base + 1, ... (node.ports). One free ephemeral port as a
 * base left base + 1 to chance, and an outgoing connection elsewhere in the suite could hold it.
 */
export async function freePortRange(count: number): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const base = RANGE_LOW + Math.floor(Math.random() * (RANGE_HIGH - RANGE_LOW - count));
    const held: ReturnType<typeof createServer>[] = [];
    try {
      for (let i = 0; i < count; i++) {
        const srv = createServer();
        await new Promise<void>((resolve, reject) => {
          srv.once('error', reject);
          srv.listen(base + i, '127.0.0.1', resolve);
        });
        held.push(srv);
      }
      return base;
    } catch {
      // one of them is taken: try another base
    } finally {
      await Promise.all(held.map((srv) => new Promise<void>((resolve) => srv.close(() => resolve()))));
    }
  }
  throw new Error(`no ${count} consecutive free ports between ${RANGE_LOW} and ${RANGE_HIGH} after 50 tries`);
}
