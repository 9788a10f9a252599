// The hash verifier: whether an engine's block hashes are ours. It re-derives the digests of the
// engine's first stored blocks from their token ids and compares: an engine started with another
// PYTHONHASHSEED or hash algorithm announces hashes no prompt of ours will ever produce, and routing
// would silently never match. After a mismatch it keeps hashing every stored block, because our
// digest is then the only key that routes. The hashing itself goes through a BlockHasher: the worker
// pool in production (a mismatched engine's whole traffic is SHA-256 work the event loop must not
// do), or digestRun on this thread where no pool exists (tests, tools).
import { hash as oneShotHash } from 'node:crypto';
import type { KvStatus, Verification } from './delta.js';
import type { BlockStored, EventBatch, WireBlockHash } from './events.js';
import { asExtraKeys, type ExtraKey } from './extra-key.js';
import { keyOfDigest, type BlockKey, type EngineBlockHash, type HashAlgo } from './block-key.js';
import { blockMessage, noneHash } from './hashing.js';

/** One stored run to hash as vLLM chains it: plain data, so it can cross to a worker thread. */
export interface DigestTask {
  /** The digest the run chains from; null: the run starts a chain (vLLM's NONE_HASH of the seed). */
  readonly parent: Uint8Array | null;
  readonly seed: string;
  readonly algo: HashAlgo;
  /** Token ids of `blocks` engine blocks of `blockSizeTokens` each. */
  readonly tokens: readonly number[];
  readonly blocks: number;
  readonly blockSizeTokens: number;
  /** The router's block size: an engine block of k x this is hashed as k chained blocks. */
  readonly unitTokens: number;
  /** Each engine block's extra keys. */
  readonly extraKeys: readonly (readonly ExtraKey[] | null)[];
}

/** Our 32-byte digest of each engine block of a run, in order. */
export function digestRun(t: DigestTask): Uint8Array[] {
  let d = t.parent ?? noneHash(t.seed, t.algo);
  const sub = t.blockSizeTokens / t.unitTokens;
  const out: Uint8Array[] = [];
  for (let i = 0; i < t.blocks; i++) {
    const extra = t.extraKeys[i] ?? null;
    for (let j = 0; j < sub; j++) {
      const at = i * t.blockSizeTokens + j * t.unitTokens;
      d = new Uint8Array(oneShotHash('sha256', blockMessage(d, t.tokens.slice(at, at + t.unitTokens), extra, t.algo), 'buffer'));
    }
    out.push(d);
  }
  return out;
}

/** What hashes runs for the verifier: the worker pool satisfies it; synchronous answers are taken as they come. */
export interface BlockHasher {
  digests(t: DigestTask): Uint8Array[] | Promise<Uint8Array[]>;
}

/** digestRun on the calling thread: for tests and for processes without a worker pool. */
export const inThreadHasher: BlockHasher = { digests: digestRun };

const MASK64 = 0xffff_ffff_ffff_ffffn;

/** An engine hash as the 64-bit number the mirror keys on (a 32-byte digest by its last 8 bytes). */
export function engineHashOf(h: WireBlockHash | undefined): bigint {
  // The codec already hands out unsigned 64-bit values; masking those would allocate per block.
  if (typeof h === 'bigint') return h >= 0n && h <= MASK64 ? h : BigInt.asUintN(64, h);
  if (h === undefined) return 0n;
  return keyOfDigest(h);
}

function hex64(v: bigint): string {
  return '0x' + v.toString(16).padStart(16, '0');
}

/** Options of a HashVerifier. */
export interface HashVerifierOptions {
  readonly seed: string;
  readonly algo?: HashAlgo;
  /** The block size the router hashes prompts at. */
  readonly blockSizeTokens?: number;
  /** How many stored blocks must match our hash before the engine counts as verified. */
  readonly verifyBlocks?: number;
  readonly hasher?: BlockHasher;
  readonly onStatus?: (s: Extract<KvStatus, { type: 'mirror.verified' | 'mirror.hash-mismatch' }>) => void;
}

/**
 * One engine rank's verification and, until verified or for good after a mismatch, our digest of
 * each engine hash it holds. `prepare` hashes a batch's stored blocks before the mirror applies it;
 * `keyOf` is then the key the mirror holds each block under.
 */
export class HashVerifier {
  readonly #o: HashVerifierOptions;
  readonly #algo: HashAlgo;
  readonly #verifyBlocks: number;
  readonly #hasher: BlockHasher;
  // Engine hash -> our digest of the same block; dropped once verified (the two are then equal).
  #digests: Map<bigint, Uint8Array> | undefined = new Map();
  // Blocks held per engine hash, so a digest lives exactly as long as a block uses it.
  readonly #users = new Map<bigint, number>();
  #verification: Verification = 'pending';
  #matched = 0;

  constructor(o: HashVerifierOptions) {
    this.#o = o;
    this.#algo = o.algo ?? 'sha256_cbor';
    this.#verifyBlocks = o.verifyBlocks ?? 4;
    this.#hasher = o.hasher ?? inThreadHasher;
  }

  /** Whether the engine's hashes are known to equal ours. */
  get verification(): Verification {
    return this.#verification;
  }

  /** Takes back a verdict kept across an agent restart; the digests behind it are not kept. */
  restore(v: Verification): void {
    this.#verification = v;
    if (v === 'verified') {
      this.#digests = undefined;
      this.#users.clear();
    }
  }

  /**
   * Hashes the batch's stored blocks that need it; undefined when done (nothing to hash, or a
   * synchronous hasher), else a promise the mirror's apply waits for. Never rejects: a block the
   * hasher could not hash is one we cannot verify or key, as one without tokens.
   */
  prepare(batch: EventBatch, rank: number): Promise<void> | undefined {
    if (this.#digests === undefined) return undefined;
    return this.#from(batch.events.filter((e): e is BlockStored => e.type === 'BlockStored'), 0, rank);
  }

  #from(events: readonly BlockStored[], first: number, rank: number): Promise<void> | undefined {
    for (let i = first; i < events.length && this.#digests !== undefined; i++) {
      const ev = events[i];
      if (ev === undefined) continue;
      const task = this.#taskOf(ev);
      if (task === undefined) continue;
      const r = this.#hasher.digests(task);
      if (!(r instanceof Promise)) {
        this.#record(ev, r, rank);
        continue;
      }
      return r.then(
        (d) => {
          this.#record(ev, d, rank);
          return this.#from(events, i + 1, rank);
        },
        // The pool is full or closed: these blocks stay unverified (and unkeyed after a mismatch).
        () => this.#from(events, i + 1, rank),
      );
    }
    return undefined;
  }

  /**
   * Our key for an engine hash: the hash itself, unless the engine hashes otherwise; undefined when
   * unknown. The mirror's keys are made here and nowhere else: an engine that hashes as we do (or
   * is not yet found not to) names each block by the same 64 bits we would.
   */
  keyOf(hash: bigint): BlockKey | undefined {
    if (this.#verification !== 'mismatch') return hash as BlockKey;
    const d = this.#digests?.get(hash);
    return d === undefined ? undefined : (keyOfDigest(d) as BlockKey);
  }

  /** The mirror holds one more block under this engine hash. */
  retain(hash: bigint): void {
    if (this.#digests !== undefined) this.#users.set(hash, (this.#users.get(hash) ?? 0) + 1);
  }

  /** The mirror dropped a block under this engine hash. */
  release(hash: bigint): void {
    if (this.#digests === undefined) return;
    const users = (this.#users.get(hash) ?? 1) - 1;
    if (users > 0) this.#users.set(hash, users);
    else {
      this.#users.delete(hash);
      this.#digests.delete(hash);
    }
  }

  // The run's task, or undefined where we cannot know: a placeholder (no tokens), an unknown
  // parent, a block size the router's does not divide, or extra keys we cannot encode. A run is
  // hashed up to its first block with unusable extra keys: every later one chains from it.
  #taskOf(ev: BlockStored): DigestTask | undefined {
    const digests = this.#digests;
    const bs = ev.blockSize;
    if (digests === undefined || bs <= 0 || ev.tokenIds.length !== ev.blockHashes.length * bs) return undefined;
    // Hybrid models announce a block of k x B tokens by the last of its k chained B-token hashes
    // (vLLM >= 0.24), so hashing at the router's B reproduces what the router will look up.
    const unit = this.#o.blockSizeTokens ?? bs;
    if (bs % unit !== 0) return undefined;
    let parent: Uint8Array | null = null;
    if (ev.parentBlockHash !== null) {
      const known = digests.get(engineHashOf(ev.parentBlockHash));
      if (known === undefined) return undefined;
      parent = known;
    }
    const extraKeys: (readonly ExtraKey[] | null)[] = [];
    for (let i = 0; i < ev.blockHashes.length; i++) {
      const extra = this.#extraKeysOf(ev, i);
      if (extra === undefined) break;
      extraKeys.push(extra);
    }
    if (extraKeys.length === 0) return undefined;
    return {
      parent,
      seed: this.#o.seed,
      algo: this.#algo,
      tokens: ev.tokenIds,
      blocks: extraKeys.length,
      blockSizeTokens: bs,
      unitTokens: unit,
      extraKeys,
    };
  }

  // vLLM sends each block's extra keys since v0.17; before that only the LoRA name can be known.
  #extraKeysOf(ev: BlockStored, i: number): readonly ExtraKey[] | null | undefined {
    if (ev.extraKeys !== null) return asExtraKeys(ev.extraKeys[i] ?? null);
    return ev.loraName === null ? null : [ev.loraName];
  }

  #record(ev: BlockStored, ours: readonly Uint8Array[], rank: number): void {
    for (let i = 0; i < ours.length; i++) {
      const d = ours[i];
      const digests = this.#digests;
      if (d === undefined || digests === undefined) return;
      const raw = ev.blockHashes[i];
      const hash = engineHashOf(raw);
      digests.set(hash, d);
      if (this.#verification === 'pending') this.#check(raw, hash, d, ev, rank);
    }
  }

  #check(raw: WireBlockHash | undefined, hash: bigint, ours: Uint8Array, ev: BlockStored, rank: number): void {
    const same = raw instanceof Uint8Array ? raw.length === ours.length && raw.every((b, j) => b === ours[j]) : keyOfDigest(ours) === hash;
    if (same) {
      if (++this.#matched >= this.#verifyBlocks) {
        this.#verification = 'verified';
        this.#digests = undefined;
        this.#users.clear();
        this.#o.onStatus?.({ type: 'mirror.verified', blocks: this.#matched });
      }
      return;
    }
    this.#verification = 'mismatch';
    const ourKey = keyOfDigest(ours);
    this.#o.onStatus?.({
      type: 'mirror.hash-mismatch',
      rank,
      engineHash: hash as EngineBlockHash,
      ourKey: ourKey as BlockKey,
      reason:
        `engine block hash ${hex64(hash)} differs from our ${this.#algo} hash ${hex64(ourKey)} of the same ` +
        `${ev.blockSize} tokens (hashed in blocks of ${this.#o.blockSizeTokens ?? ev.blockSize}) with PYTHONHASHSEED ` +
        `${JSON.stringify(this.#o.seed)}: the engine runs another seed, --prefix-caching-hash-algo or block size; ` +
        `start it with PYTHONHASHSEED=${this.#o.seed} and --prefix-caching-hash-algo ${this.#algo}. ` +
        `Until then its blocks are keyed by our hash of their tokens`,
    });
  }
}
