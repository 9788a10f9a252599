// The oracle: the cached tokens an omniscient router would get on a trace, with the fleet's cache
// capacity. The trace is replayed in arrival order against one LRU block cache per replica that
// follows the sim's BlockPool (and vLLM's): a request reuses its leading cached blocks (never its
// last token, which is always computed), takes the rest from the head of the free queue (evicting
// what it held), and on finishing returns every block tail first, so a prompt's last blocks are
// evicted before the first ones that other prompts share. The router sees every cache exactly and
// sends each request where its hit is largest (ties: the replica given the fewest tokens so far).
// Requests run one at a time here, so no block is pinned by a request still running: a bound the
// real fleet can only approach.
import { createHash } from 'node:crypto';

/** What the oracle replays: each request's prompt tokens and how many it generates. */
export interface OracleRequest {
  readonly tokens: readonly number[];
  readonly outputTokens: number;
}

/** The fleet's cache geometry. */
export interface OracleFleet {
  readonly replicas: number;
  readonly capacityBlocks: number;
  readonly blockSizeTokens: number;
}

/** The oracle's result: cached tokens per request (in trace order), where each went, and totals. */
export interface OracleResult {
  readonly cachedTokens: readonly number[];
  readonly replicaOf: readonly number[];
  readonly totalCachedTokens: number;
  readonly totalPromptTokens: number;
}

// Chained block keys: a block is findable only after the same blocks before it, as vLLM's hashes are.
function blockKeys(tokens: readonly number[], blockSizeTokens: number): string[] {
  const keys: string[] = [];
  let parent = '';
  for (let b = 0; (b + 1) * blockSizeTokens <= tokens.length; b++) {
    const block = Uint32Array.from(tokens.slice(b * blockSizeTokens, (b + 1) * blockSizeTokens));
    parent = createHash('sha1').update(parent).update(new Uint8Array(block.buffer)).digest('base64');
    keys.push(parent);
  }
  return keys;
}

/** Distinct full prompt blocks over all requests: the trace's working set, in blocks. */
export function distinctBlocks(prompts: readonly (readonly number[])[], blockSizeTokens: number): number {
  const seen = new Set<string>();
  for (const t of prompts) for (const k of blockKeys(t, blockSizeTokens)) seen.add(k);
  return seen.size;
}

/** One replica's LRU block cache: insertion order is eviction order. */
class LruBlocks {
  readonly #free = new Map<string, true>();
  readonly #capacity: number;
  assignedTokens = 0;

  constructor(capacity: number) {
    this.#capacity = capacity;
  }

  leadingHits(keys: readonly string[], maxBlocks: number): number {
    let n = 0;
    while (n < maxBlocks && n < keys.length && this.#free.has(keys[n] ?? '')) n++;
    return n;
  }

  // Runs one request to its end: hits leave the free queue, new blocks evict from its head, and all
  // come back tail first.
  run(blocks: readonly string[], hits: number): void {
    for (let i = 0; i < hits; i++) this.#free.delete(blocks[i] ?? '');
    // A request longer than the cache keeps only what fits, as a real one could not run at all.
    const kept = blocks.slice(0, this.#capacity);
    for (const k of kept.slice(hits)) this.#free.delete(k);
    let over = this.#free.size + kept.length - this.#capacity;
    for (const k of this.#free.keys()) {
      if (over <= 0) break;
      this.#free.delete(k);
      over--;
    }
    for (let i = kept.length - 1; i >= 0; i--) this.#free.set(kept[i] ?? '', true);
  }
}

/** Replays `requests` in order on `fleet` and counts the cached tokens an omniscient router gets. */
export function oracle(requests: readonly OracleRequest[], fleet: OracleFleet): OracleResult {
  const B = fleet.blockSizeTokens;
  const caches = Array.from({ length: Math.max(1, fleet.replicas) }, () => new LruBlocks(fleet.capacityBlocks));
  const cachedTokens: number[] = [];
  const replicaOf: number[] = [];
  let totalCachedTokens = 0;
  let totalPromptTokens = 0;
  requests.forEach((r, id) => {
    const keys = blockKeys(r.tokens, B);
    // vLLM computes the last prompt token whatever is cached.
    const maxHit = Math.floor(Math.max(0, r.tokens.length - 1) / B);
    let best = 0;
    let bestHits = -1;
    caches.forEach((c, i) => {
      const h = c.leadingHits(keys, maxHit);
      const cur = caches[best];
      if (h > bestHits || (h === bestHits && cur !== undefined && c.assignedTokens < cur.assignedTokens)) {
        best = i;
        bestHits = h;
      }
    });
    const chosen = caches[best];
    if (chosen === undefined) return;
    // Every block the request occupies: full prompt blocks by key, then its answer's and the
    // partial ones, which no other request can hit but which take room all the same.
    const total = Math.ceil((r.tokens.length + r.outputTokens) / B);
    const blocks = [...keys];
    for (let k = keys.length; k < total; k++) blocks.push(`request ${id} block ${k}`);
    chosen.run(blocks, bestHits);
    chosen.assignedTokens += r.tokens.length - bestHits * B;
    cachedTokens.push(bestHits * B);
    replicaOf.push(best);
    totalCachedTokens += bestHits * B;
    totalPromptTokens += r.tokens.length;
  });
  return { cachedTokens, replicaOf, totalCachedTokens, totalPromptTokens };
}
