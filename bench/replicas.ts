// The replica every bench routes to: a local engine with KV events at block size 16 and hash seed
// "0", as the sims and fake engines of the benches run.
import type { ReplicaView } from '../src/routing/index.js';

/** A ready replica `id` of `model` at `url`; `over` changes what one bench needs changed. */
export function benchReplica(id: string, model: string, url: URL, over: Partial<ReplicaView> = {}): ReplicaView {
  return {
    id,
    node: 'local',
    model,
    adapters: [],
    url,
    apiKey: undefined,
    generation: 1,
    kvEvents: true,
    blockSizeTokens: 16,
    hashSeed: '0',
    dataParallelSize: 1,
    ...over,
  };
}
