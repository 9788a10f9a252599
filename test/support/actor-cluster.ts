// A cluster of nodes x replicas as the gateway's actor board knows it, for the debug page's browser
// test and its screenshot: the board is the real one, fed what each node would report over the link,
// so the page gets the same records and charts as from `llmgw serve` with remote agents, without
// starting 64 engines on a two-core box. A few replicas are in trouble, as in a real cluster.
import { Registry } from 'prom-client';
import { ActorBoard, type ReportedActor } from '../../src/actors/index.js';
import { gatewayDefaults, startGateway, type Gateway } from '../../src/gateway/index.js';

/** The node names, in order: none is a substring of another or of a replica id, so a filter on one names it alone. */
export const nodeNames = ['gpu-a', 'gpu-b', 'gpu-c', 'gpu-d', 'gpu-e', 'gpu-f', 'gpu-g', 'gpu-h'] as const;

interface Trouble {
  readonly replica: string;
  readonly shard: string;
  readonly publisher: string;
  readonly reason?: string;
  readonly shardReason?: string;
}

// Replica k of the whole cluster (k from 0) is in the state named here, or ready.
const troubles: Readonly<Record<number, Trouble>> = {
  13: { replica: 'failed', shard: 'failed', publisher: 'failed', reason: 'shard failed', shardReason: 'vllm exited with code 1: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' },
  20: { replica: 'loading', shard: 'loading', publisher: 'waiting' },
  30: { replica: 'starting', shard: 'starting', publisher: 'binding', shardReason: 'restart 2 of 5 after vllm was killed by SIGKILL' },
  41: { replica: 'cpu-fallback', shard: 'cpu-fallback', publisher: 'streaming', shardReason: 'llama.cpp found no GPU device: serving from the CPU' },
  47: { replica: 'draining', shard: 'draining', publisher: 'streaming', reason: 'drain asked by ctl' },
};

/**
 * A board showing `nodes` nodes (at most 8) of `replicasPerNode` replicas each, every replica with one
 * shard and its KV event publisher; with `silentLast`, the last node has stopped reporting, so its
 * actors show as the gateway shows them then (unknown, and why).
 */
export function actorCluster(o: { nodes: number; replicasPerNode: number; silentLast?: boolean; now?: number }): ActorBoard {
  const now = o.now ?? Date.now();
  const board = new ActorBoard({ tail: () => ['INFO loading weights', 'INFO model loaded in 41.2 s'] });
  nodeNames.slice(0, o.nodes).forEach((name, n) => {
    const reported: ReportedActor[] = [{ id: `node:${name}`, parent: undefined, phase: 'up', since: now - 3_600_000, reason: undefined }];
    for (let r = 0; r < o.replicasPerNode; r++) {
      const k = n * o.replicasPerNode + r;
      const t = troubles[k];
      const replica = `${k % 2 === 0 ? 'qwen3-8b' : 'llama3-8b'}-${k}`;
      const since = now - (t === undefined ? 1_800_000 + k * 1000 : 5_000 + k * 100);
      reported.push(
        { id: `replica:${replica}`, parent: `node:${name}`, phase: t?.replica ?? 'ready', since, reason: t?.reason },
        { id: `shard:${replica}-r0`, parent: `replica:${replica}`, phase: t?.shard ?? 'ready', since, reason: t?.shardReason },
        { id: `publisher:${replica}`, parent: `replica:${replica}`, phase: t?.publisher ?? 'streaming', since, reason: undefined },
      );
    }
    board.report(name, reported, now);
  });
  const last = nodeNames[o.nodes - 1];
  if (o.silentLast === true && last !== undefined) {
    board.report(last, [{ id: `node:${last}`, parent: undefined, phase: 'silent', since: now - 12_000, reason: 'no word within cluster.silent_after_ms: its replicas are out of routing' }], now - 12_000);
  }
  return board;
}

/** A gateway on 127.0.0.1 (a free port) whose debug routes show `board`; no keys, no models. */
export function debugGateway(board: ActorBoard): Promise<Gateway> {
  return startGateway({
    config: { ...gatewayDefaults, host: '127.0.0.1', port: 0, apiKeys: [], router: { ...gatewayDefaults.router, loadPollIntervalMs: 0 } },
    directory: { ready: () => [], models: () => [] },
    registry: new Registry(),
    actors: board,
  });
}
