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

/** A TCP port on 127.0.0.1 that was free a moment ago (bind 0, read, close). */
export async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', resolve);
  });
  const addr = srv.address();
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  if (addr === null || typeof addr === 'string') throw new Error('no TCP address');
  return addr.port;
}
