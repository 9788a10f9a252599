// A replica view and a routing candidate for tests of the pure tiers: defaults for everything, the
// test says what matters.
import type { Candidate, ReplicaView } from '../../src/gateway/index.js';

/** A ready sim-like replica `id` on a dead URL (tiers never call it). */
export function replicaView(id: string, over: Partial<ReplicaView> = {}): ReplicaView {
  return {
    id,
    node: 'local',
    model: 'm',
    adapters: [],
    url: new URL('http://127.0.0.1:1/'),
    apiKey: undefined,
    generation: 1,
    kvEvents: true,
    blockSizeTokens: 16,
    hashSeed: '0',
    dataParallelSize: 1,
    ...over,
  };
}

/** An idle candidate `id` at `prefillTokensPerS`, with `over` for its load. */
export const candidate = (id: string, over: Partial<Omit<Candidate, 'view'>> = {}): Candidate => ({
  view: replicaView(id),
  inFlight: 0,
  queuedPrefillTokens: 0,
  engineWaiting: 0,
  prefillTokensPerS: 1000,
  ...over,
});
