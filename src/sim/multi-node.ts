// vLLM's multi-node launch as the sim plays it (`--nnodes N --node-rank R --master-addr A
// --master-port P`, workers `--headless`): the leader listens on the master port and serves nothing
// until every worker rank has joined, and a worker serves nothing at all. When a worker dies the
// leader fails, and when the leader dies the workers fail, as vLLM's collective group does; the
// supervisor then restarts them, so waiting-for-leader and failure across nodes are exercised for real.
import { once } from 'node:events';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { LlmgwError } from '../errors/index.js';

/** The distributed settings of one sim process. */
export interface NodeRole {
  readonly nnodes: number;
  readonly nodeRank: number;
  readonly masterAddr: string;
  readonly masterPort: number;
  readonly headless: boolean;
}

/** A joined group: resolves `lost` with why when a peer goes away. */
export interface Group {
  readonly lost: Promise<string>;
  close(): void;
}

/** Checks a role: ranks within nnodes, the leader is not headless and a worker is. */
export function checkRole(r: NodeRole): void {
  const problems: string[] = [];
  if (!(Number.isInteger(r.nnodes) && r.nnodes >= 1)) problems.push(`--nnodes: ${r.nnodes} is not a positive integer`);
  if (!(Number.isInteger(r.nodeRank) && r.nodeRank >= 0 && r.nodeRank < r.nnodes)) problems.push(`--node-rank: ${r.nodeRank} is not a rank below --nnodes ${r.nnodes}`);
  if (r.nnodes > 1 && (r.masterAddr === '' || !(r.masterPort > 0))) problems.push('--master-addr and --master-port are required with --nnodes above 1');
  if (r.nodeRank === 0 && r.headless) problems.push('--headless: rank 0 is the leader, which serves the API; run workers (rank 1 and up) headless');
  if (r.nodeRank > 0 && !r.headless) problems.push(`--node-rank ${r.nodeRank} without --headless: only rank 0 serves the API, as in vLLM`);
  if (problems.length > 0) throw new LlmgwError('LLMGW_SIM_ARGS', problems.join('; '));
}

/** The leader's side: listens on the master port and resolves once every worker rank has joined. */
export async function awaitWorkers(r: NodeRole, o: { signal: AbortSignal; onJoined?: (rank: number) => void }): Promise<Group> {
  o.signal.throwIfAborted();
  const server: Server = createServer();
  const workers = new Map<number, Socket>();
  let lostWhy: ((why: string) => void) | undefined;
  const lost = new Promise<string>((resolve) => (lostWhy = resolve));
  const all = new Promise<void>((resolve) => {
    server.on('connection', (sock) => {
      sock.setEncoding('utf8');
      let line = '';
      sock.on('data', (d: string) => {
        line += d;
        const m = /^rank (\d+)\n/.exec(line);
        if (m === null) return;
        const rank = Number(m[1]);
        if (rank < 1 || rank >= r.nnodes || workers.has(rank)) {
          sock.destroy();
          return;
        }
        workers.set(rank, sock);
        o.onJoined?.(rank);
        sock.write('ok\n');
        if (workers.size === r.nnodes - 1) resolve();
      });
      sock.on('close', () => {
        for (const [rank, s] of workers) if (s === sock) lostWhy?.(`worker rank ${rank} left the group`);
      });
      sock.on('error', () => undefined); // 'close' follows and says it
    });
  });
  server.listen(r.masterPort, r.masterAddr);
  await once(server, 'listening');
  const close = (): void => {
    for (const s of workers.values()) s.destroy();
    server.close();
  };
  const onAbort = (): void => close();
  o.signal.addEventListener('abort', onAbort, { once: true });
  try {
    await Promise.race([all, once(o.signal, 'abort')]);
  } finally {
    o.signal.removeEventListener('abort', onAbort);
  }
  o.signal.throwIfAborted();
  return { lost, close };
}

/** A worker's side: connects to the leader (retrying while it is not up yet) and joins with its rank. */
export async function joinLeader(r: NodeRole, o: { signal: AbortSignal; retryMs?: number }): Promise<Group> {
  for (;;) {
    o.signal.throwIfAborted();
    const sock = createConnection({ host: r.masterAddr, port: r.masterPort });
    sock.setEncoding('utf8');
    try {
      await once(sock, 'connect', { signal: o.signal });
      sock.write(`rank ${r.nodeRank}\n`);
      const [reply] = await once(sock, 'data', { signal: o.signal });
      if (reply !== 'ok\n') throw new LlmgwError('LLMGW_SIM_GROUP', `the leader at ${r.masterAddr}:${r.masterPort} refused rank ${r.nodeRank}`);
      const lost = new Promise<string>((resolve) => sock.once('close', () => resolve(`the leader at ${r.masterAddr}:${r.masterPort} left the group`)));
      sock.on('error', () => undefined); // 'close' follows and says it
      return { lost, close: () => sock.destroy() };
    } catch (e) {
      sock.destroy();
      if (o.signal.aborted || (e instanceof LlmgwError && e.code === 'LLMGW_SIM_GROUP')) throw e;
      // The leader is not listening yet (it starts at the same time on another node): try again.
      await sleep(o.retryMs ?? 200, undefined, { signal: o.signal });
    }
  }
}
