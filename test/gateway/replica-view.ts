// A replica view and a routing candidate for tests of the pure tiers: defaults for everything, the
// test says what matters.
import type { Candidate, ReplicaView, RouteFacts } from '../../src/routing/index.js';

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

/** An idle candidate `id` at 1000 prefill tokens/s, with `over` for its load (or its view). */
export const candidate = (id: string, over: Partial<Candidate> = {}): Candidate => ({
  view: replicaView(id),
  inFlight: 0,
  queuedPrefillTokens: 0,
  engineWaiting: 0,
  prefillTokensPerS: 1000,
  ...over,
});

/** Route facts of a 1000-token prompt with nothing known of caches, a 2 s TTFT budget; `o` says what matters. */
export const routeFacts = (o: Partial<RouteFacts>): RouteFacts => ({
  promptTokens: 1000,
  precise: undefined,
  approximate: undefined,
  ttftBudgetMs: 2000,
  boundedLoadFactor: 1.5,
  turn: 0,
  ...o,
});
