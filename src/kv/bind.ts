// Binding a ZeroMQ socket to a port this process may have just closed. ZeroMQ releases a closed
// socket's port in its I/O thread, after close() has returned, so a socket reopened on the same port
// (the sim's publisher restarted, an agent's subscriber rebound for an adopted engine) failed now
// and then with EADDRINUSE. A port still held after this long belongs to someone else.
import { setTimeout as sleep } from 'node:timers/promises';

const BIND_RETRY_MS = 2_000;
const BIND_RETRY_STEP_MS = 25;

/** Something with ZeroMQ's bind (every socket type of zeromq.js). */
export interface Bindable {
  bind(endpoint: string): Promise<void>;
}

/** Binds `sock` to `endpoint`, retrying EADDRINUSE for up to 2 s; any other failure, or a port still held, throws as bind did. */
export async function bindReleased(sock: Bindable, endpoint: string): Promise<void> {
  const deadline = Date.now() + BIND_RETRY_MS;
  for (;;) {
    try {
      await sock.bind(endpoint);
      return;
    } catch (e) {
      const inUse = e instanceof Error && 'code' in e && e.code === 'EADDRINUSE';
      if (!inUse || Date.now() >= deadline) throw e;
      await sleep(BIND_RETRY_STEP_MS);
    }
  }
}
