// Stored Responses: what `previous_response_id` reads and GET/DELETE /v1/responses/{id} serve. The
// interface is the Responses API's, declared here where it is used; the keys-and-usage store
// implements it over its database, and MemoryResponseStore serves a gateway without one.

/** One stored response: whose it is, when it goes, and its JSON (the response and its conversation). */
export interface StoredResponse {
  readonly id: string;
  /** The name of the key that made it (Caller.name): no other key may read or delete it. */
  readonly owner: string;
  readonly createdAt: number;
  readonly expiresAt: number;
  readonly body: string;
}

/** Where stored responses live. */
export interface ResponseStore {
  put(r: StoredResponse): Promise<void>;
  /** Undefined when there is none, it expired, or it is another owner's. */
  get(owner: string, id: string): Promise<StoredResponse | undefined>;
  /** True when there was one of this owner's to delete. */
  delete(owner: string, id: string): Promise<boolean>;
}

/** Bounds of the in-memory store. */
export interface MemoryStoreOptions {
  /** Most responses kept; the oldest go first. */
  readonly maxEntries: number;
  /** Most bytes of bodies kept; the oldest go first. */
  readonly maxBytes: number;
  readonly now?: () => number;
}

/**
 * Stored responses in this process's memory, bounded by count and bytes: a gateway without a
 * database. A restart forgets them, and several gateways do not share them; both need the database.
 */
export class MemoryResponseStore implements ResponseStore {
  readonly #entries = new Map<string, StoredResponse>();
  readonly #o: MemoryStoreOptions;
  readonly #now: () => number;
  #bytes = 0;

  constructor(o: MemoryStoreOptions) {
    this.#o = o;
    this.#now = o.now ?? Date.now;
  }

  put(r: StoredResponse): Promise<void> {
    this.#remove(r.id);
    this.#entries.set(r.id, r);
    this.#bytes += r.body.length;
    // Map order is insertion order: the first entries are the oldest.
    for (const [id] of this.#entries) {
      if (this.#entries.size <= this.#o.maxEntries && this.#bytes <= this.#o.maxBytes) break;
      this.#remove(id);
    }
    return Promise.resolve();
  }

  get(owner: string, id: string): Promise<StoredResponse | undefined> {
    return Promise.resolve(this.#live(owner, id));
  }

  delete(owner: string, id: string): Promise<boolean> {
    const r = this.#live(owner, id);
    if (r !== undefined) this.#remove(id);
    return Promise.resolve(r !== undefined);
  }

  /** How many responses are held (expired ones included until they are next looked up or pushed out). */
  get size(): number {
    return this.#entries.size;
  }

  #live(owner: string, id: string): StoredResponse | undefined {
    const r = this.#entries.get(id);
    if (r === undefined) return undefined;
    if (r.expiresAt <= this.#now()) {
      this.#remove(id);
      return undefined;
    }
    return r.owner === owner ? r : undefined;
  }

  #remove(id: string): void {
    const r = this.#entries.get(id);
    if (r === undefined) return;
    this.#entries.delete(id);
    this.#bytes -= r.body.length;
  }
}
