// The approximate tier's memory: which replica was recently sent which prompt prefix. It is for
// engines that publish no KV events and for requests whose tokens are unknown (tokenize failed), so
// it works on characters, not tokens: the prompt text is cut into fixed chunks and each chunk is
// named by a hash chained over everything before it, so equal names mean equal prefixes.
import { createHash } from 'node:crypto';

/** A replica as the tree needs it: the generation changes whenever the replica (re)starts. */
export interface TreeReplica {
  readonly id: string;
  readonly generation: number;
}

interface Holder {
  readonly id: string;
  readonly generation: number;
}

// A holder list longer than this means every replica holds the chunk; the oldest is dropped.
const maxHoldersPerChunk = 16;

/** Bounded prefix memory: at most `maxChunks` chunk names, least recently routed forgotten first. */
export class PrefixTree {
  readonly #chunkChars: number;
  readonly #maxChunks: number;
  // Map iteration order is insertion order: re-inserting on use makes the first entry the oldest.
  readonly #chunks = new Map<string, Holder[]>();

  constructor(o: { chunkChars: number; maxChunks: number }) {
    this.#chunkChars = o.chunkChars;
    this.#maxChunks = o.maxChunks;
  }

  /** Number of chunk names remembered. */
  get size(): number {
    return this.#chunks.size;
  }

  /** The chained names of the full chunks of `text`. */
  chunkNames(text: string): string[] {
    const names: string[] = [];
    // Most chats are shorter than one chunk: they cost no hasher (2 us a request under load).
    if (text.length < this.#chunkChars) return names;
    const h = createHash('sha1');
    for (let at = 0; at + this.#chunkChars <= text.length; at += this.#chunkChars) {
      h.update(text.slice(at, at + this.#chunkChars));
      names.push(h.copy().digest('base64'));
    }
    return names;
  }

  /** Per replica, how many LEADING chunks of `names` it was sent in its current generation. */
  leading(names: readonly string[], replicas: readonly TreeReplica[]): Map<string, number> {
    const out = new Map(replicas.map((r) => [r.id, 0]));
    let alive = new Set(replicas.map((r) => `${r.id}\0${r.generation}`));
    for (let i = 0; i < names.length && alive.size > 0; i++) {
      const holders = this.#chunks.get(names[i] ?? '');
      if (holders === undefined) break;
      const next = new Set<string>();
      for (const h of holders) {
        const tag = `${h.id}\0${h.generation}`;
        if (alive.has(tag)) {
          next.add(tag);
          out.set(h.id, i + 1);
        }
      }
      alive = next;
    }
    return out;
  }

  /** Records that the prefix `names` was routed to `r`. */
  insert(names: readonly string[], r: TreeReplica): void {
    for (const name of names) {
      const holders = (this.#chunks.get(name) ?? []).filter((h) => h.id !== r.id);
      holders.push({ id: r.id, generation: r.generation });
      if (holders.length > maxHoldersPerChunk) holders.shift();
      this.#chunks.delete(name);
      this.#chunks.set(name, holders);
    }
    for (const oldest of this.#chunks.keys()) {
      if (this.#chunks.size <= this.#maxChunks) break;
      this.#chunks.delete(oldest);
    }
  }

  /** Drops everything routed to replica `id` (it restarted or left): O(size), rare. */
  forget(id: string): void {
    for (const [name, holders] of this.#chunks) {
      const kept = holders.filter((h) => h.id !== id);
      if (kept.length === 0) this.#chunks.delete(name);
      else if (kept.length !== holders.length) this.#chunks.set(name, kept);
    }
  }
}
