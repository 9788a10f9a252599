// One rank's engine loop, modelled on vLLM v1's scheduler: running requests first, then waiting
// ones while the token budget, the sequence limit and free blocks allow; chunked prefill; one KV
// event batch per step; recompute preemption when a running request needs a block and none is
// free. Time is simulated from two rates so a cached prefix is measurably faster, as on a GPU; a
// step mixing prefill and decode costs the larger of the two (stepCostMs).
import { blockExtraKeys, hashBlocks, keyOfDigest } from '../kv/index.js';
import type { HashAlgo, HashOptions, KvEvent } from '../kv/index.js';
import type { Block } from './block-pool.js';
import { BlockPool } from './block-pool.js';

/** What the scheduler is told about its model and speed. */
export interface SchedulerOptions {
  readonly rank: number;
  readonly blockSizeTokens: number;
  readonly numBlocks: number;
  readonly maxNumSeqs: number;
  readonly maxNumBatchedTokens: number;
  /** vLLM's --scheduling-policy priority: waiting requests by priority (lower first), then arrival. */
  readonly byPriority?: boolean | undefined;
  readonly prefillTokensPerS: number;
  readonly decodeTokensPerS: number;
  readonly enablePrefixCaching: boolean;
  readonly hashSeed: string;
  readonly hashAlgo: HashAlgo;
  readonly emitEvents: boolean;
  readonly intBlockHashes: boolean;
  /** The token generated at output position i (deterministic text). */
  readonly outputToken: (i: number) => number;
  /** Gets each step's events; the rank's publisher sends them as one batch. */
  readonly onEvents: (events: KvEvent[]) => void;
}

/** Why a request ended, in OpenAI's words. */
export type FinishReason = 'stop' | 'length' | 'abort';

/** The sim's own accounting of one request, readable through /sim/requests and the metrics. */
export interface RequestAccount {
  readonly id: string;
  readonly rank: number;
  readonly promptTokens: number;
  cachedTokens: number;
  prefillComputedTokens: number;
  prefillMs: number;
  completionTokens: number;
  preemptions: number;
  queuedMs: number;
  ttftMs: number | undefined;
  e2eMs: number | undefined;
  finishReason: FinishReason | undefined;
}

/** A generation request handed to a rank. */
export interface SimRequest {
  readonly id: string;
  readonly promptTokenIds: readonly number[];
  readonly maxTokens: number;
  readonly loraId: number | null;
  readonly loraName: string | null;
  readonly cacheSalt: string | null;
  /** Output position of the first token (0 unless the request continues the sim's own text). */
  readonly outputOffset?: number;
  /** This request's own text when it differs from the rank's (a thinking answer); absent: the rank's. */
  readonly outputToken?: ((i: number) => number) | undefined;
  /** vLLM's priority: lower first under the priority policy; absent: 0. */
  readonly priority?: number | undefined;
  /** Prompt tokens whose KV arrived from a remote prefill (NIXL): held as if computed, never the last. */
  readonly remoteComputedTokens?: number | undefined;
  /** Gets the request's block ids as it ends, before they are freed (a prefill offers them to its decode). */
  readonly onBlocks?: ((blockIds: readonly number[]) => void) | undefined;
  /** Gets each generated token; returning 'stop' ends the request (a stop string matched). */
  readonly onToken: (tokenId: number) => 'continue' | 'stop';
  readonly onFinish: (reason: FinishReason, account: RequestAccount) => void;
}

interface Running {
  readonly req: SimRequest;
  readonly hash: HashOptions;
  readonly account: RequestAccount;
  readonly arrivedAt: number;
  tokens: number[];
  outputs: number;
  digests: Uint8Array[];
  blocks: Block[];
  numComputed: number;
  numCachedBlocks: number;
  firstScheduledAt: number | undefined;
  aborted: boolean;
  scheduledNew: number;
  inPrefill: boolean;
  cachedCounted: boolean;
}

/** Counters the metrics read (vLLM's prefix cache stats are in tokens). */
export interface SchedulerStats {
  prefixQueries: number;
  prefixHits: number;
  preemptions: number;
  prefillComputedTokens: number;
}

/**
 * One step's simulated time: the larger of its prefill chunks' compute and one decode step, not their
 * sum. vLLM runs a step's prefill chunks and decodes as one forward pass (chunked prefill exists to
 * put compute-bound prefill and memory-bound decode in the same batch), so a decode riding on a
 * prefill chunk is paid for by the weights the chunk reads anyway: a roofline, whichever bound is
 * higher. The decode's own token of compute and its attention read are left out (a handful of tokens
 * beside a chunk of hundreds). A step with no decode keeps its prefill time alone, below a decode
 * step's floor when the chunk is short, as before.
 */
export function stepCostMs(prefillTokens: number, decodes: number, prefillTokensPerS: number, decodeTokensPerS: number): number {
  return Math.max(prefillTokens / prefillTokensPerS, decodes > 0 ? 1 / decodeTokensPerS : 0) * 1000;
}

/** One DP rank: its block pool, queues and step loop. */
export class RankScheduler {
  readonly rank: number;
  readonly pool: BlockPool;
  readonly stats: SchedulerStats = { prefixQueries: 0, prefixHits: 0, preemptions: 0, prefillComputedTokens: 0 };
  readonly #o: SchedulerOptions;
  readonly #waiting: Running[] = [];
  readonly #running: Running[] = [];
  #timer: NodeJS.Timeout | NodeJS.Immediate | undefined;
  // When the step running now ends in simulated time (performance.now() scale).
  #stepEndsAt = 0;
  #stepping = false;
  #closed = false;

  constructor(o: SchedulerOptions) {
    this.#o = o;
    this.rank = o.rank;
    this.pool = new BlockPool({
      numBlocks: o.numBlocks,
      emitEvents: o.emitEvents && o.enablePrefixCaching,
      eventHash: o.intBlockHashes ? keyOfDigest : (d) => d,
    });
  }

  get numRunning(): number {
    return this.#running.length;
  }

  get numWaiting(): number {
    return this.#waiting.length;
  }

  /** Requests held by this rank: the load the DP balancer compares. */
  get load(): number {
    return this.#running.length + this.#waiting.length;
  }

  /** Queues a request; returns an abort function (client gone). */
  submit(req: SimRequest): () => void {
    const hash: HashOptions = {
      blockSizeTokens: this.#o.blockSizeTokens,
      seed: this.#o.hashSeed,
      algo: this.#o.hashAlgo,
      ...(req.loraName !== null ? { loraName: req.loraName } : {}),
      ...(req.cacheSalt !== null ? { cacheSalt: req.cacheSalt } : {}),
    };
    const r: Running = {
      req,
      hash,
      account: {
        id: req.id,
        rank: this.rank,
        promptTokens: req.promptTokenIds.length,
        cachedTokens: 0,
        prefillComputedTokens: 0,
        prefillMs: 0,
        completionTokens: 0,
        preemptions: 0,
        queuedMs: 0,
        ttftMs: undefined,
        e2eMs: undefined,
        finishReason: undefined,
      },
      arrivedAt: performance.now(),
      tokens: [...req.promptTokenIds],
      outputs: 0,
      digests: [],
      blocks: [],
      numComputed: 0,
      numCachedBlocks: 0,
      firstScheduledAt: undefined,
      aborted: false,
      scheduledNew: 0,
      inPrefill: true,
      cachedCounted: false,
    };
    this.#extendDigests(r);
    this.#enqueue(r);
    this.#kick();
    return () => {
      if (r.aborted || r.account.finishReason !== undefined) return;
      r.aborted = true;
      const w = this.#waiting.indexOf(r);
      if (w >= 0) {
        this.#waiting.splice(w, 1);
        this.#finish(r, 'abort');
      }
      // A running request is dropped at the end of its step: its blocks are in this step's batch.
    };
  }

  /** Leading prompt tokens this rank's cache holds in whole blocks: what a remote prefill's transfer need not move. */
  cachedPrefixTokens(tokens: readonly number[], loraName: string | null, cacheSalt: string | null): number {
    if (!this.#o.enablePrefixCaching) return 0;
    const B = this.#o.blockSizeTokens;
    const hash: HashOptions = { blockSizeTokens: B, seed: this.#o.hashSeed, algo: this.#o.hashAlgo, ...(loraName !== null ? { loraName } : {}), ...(cacheSalt !== null ? { cacheSalt } : {}) };
    const { digests } = hashBlocks(tokens.slice(0, Math.floor((tokens.length - 1) / B) * B), hash);
    let held = 0;
    while (held < digests.length && this.pool.cachedBlock(digests[held] ?? new Uint8Array()) !== undefined) held++;
    return held * B;
  }

  // Under the priority policy a request goes behind those of its priority or better that came first,
  // as vLLM's priority queue orders them; otherwise at the end.
  #enqueue(r: Running): void {
    const p = r.req.priority ?? 0;
    let at = this.#waiting.length;
    if (this.#o.byPriority === true) while (at > 0 && ((this.#waiting[at - 1]?.req.priority ?? 0) > p)) at--;
    this.#waiting.splice(at, 0, r);
  }

  /** vLLM's reset_prefix_cache for this rank: false while requests hold blocks. */
  resetPrefixCache(): boolean {
    const ok = this.pool.reset();
    this.#flushEvents();
    return ok;
  }

  /** Stops the loop; waiting and running requests end as aborted. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#timer !== undefined) {
      clearTimeout(this.#timer as NodeJS.Timeout);
      clearImmediate(this.#timer as NodeJS.Immediate);
    }
    for (const r of [...this.#running, ...this.#waiting]) this.#finish(r, 'abort');
    this.#running.length = 0;
    this.#waiting.length = 0;
  }

  #extendDigests(r: Running): void {
    const B = this.#o.blockSizeTokens;
    const have = r.digests.length;
    if (Math.floor(r.tokens.length / B) <= have) return;
    const parent = r.digests[have - 1];
    // hashBlocks takes the tokens from the first block it hashes on; the chain starts at NONE_HASH.
    const { digests } = hashBlocks(r.tokens.slice(have * B), r.hash, parent === undefined ? undefined : { parent, blockIndex: have });
    r.digests.push(...digests);
  }

  #kick(): void {
    if (this.#stepping || this.#closed) return;
    if (this.#running.length === 0 && this.#waiting.length === 0) return;
    this.#stepping = true;
    setImmediate(() => this.#step());
  }

  #step(): void {
    if (this.#closed) return;
    const scheduled = this.#schedule();
    this.#flushEvents();
    let prefillTokens = 0;
    let decodes = 0;
    for (const r of scheduled) {
      if (r.inPrefill) prefillTokens += r.scheduledNew;
      else decodes++;
    }
    const stepMs = stepCostMs(prefillTokens, decodes, this.#o.prefillTokensPerS, this.#o.decodeTokensPerS);
    for (const r of scheduled) {
      if (r.inPrefill) {
        r.account.prefillComputedTokens += r.scheduledNew;
        r.account.prefillMs += (r.scheduledNew / this.#o.prefillTokensPerS) * 1000;
        this.stats.prefillComputedTokens += r.scheduledNew;
      }
    }
    const finishStep = (): void => {
      this.#timer = undefined;
      this.#update(scheduled);
      this.#stepping = false;
      this.#kick();
    };
    if (scheduled.length === 0) {
      // Only waiting requests that do not fit yet: they need blocks that only a running request
      // could free, and there is none, so stop until the next submit rather than spin.
      this.#stepping = false;
      return;
    }
    // Timers cannot wait under 1 ms, so short steps run back to back and their time is carried:
    // the simulated clock keeps the configured rates on average instead of capping them at 1000 steps/s.
    const now = performance.now();
    this.#stepEndsAt = Math.max(this.#stepEndsAt, now) + stepMs;
    const wait = this.#stepEndsAt - now;
    this.#timer = wait >= 1 ? setTimeout(finishStep, wait) : setImmediate(finishStep);
  }

  #blocksNeeded(r: Running, upTo: number): number {
    return Math.ceil(upTo / this.#o.blockSizeTokens) - r.blocks.length;
  }

  #cacheFilled(r: Running, upTo: number): void {
    if (!this.#o.enablePrefixCaching) return;
    const B = this.#o.blockSizeTokens;
    const full = Math.floor(Math.min(upTo, r.tokens.length) / B);
    if (full <= r.numCachedBlocks) return;
    const from = r.numCachedBlocks;
    const extraKeys = [];
    for (let i = from; i < full; i++) extraKeys.push(blockExtraKeys(r.hash, i));
    this.pool.cacheFull({
      blocks: r.blocks.slice(from, full),
      digests: r.digests.slice(from, full),
      tokenIds: r.tokens.slice(from * B, full * B),
      parent: from === 0 ? null : (r.digests[from - 1] ?? null),
      loraId: r.req.loraId,
      loraName: r.req.loraName,
      extraKeys,
    });
    r.numCachedBlocks = full;
  }

  #preemptLast(): Running | undefined {
    const victim = this.#running.pop();
    if (victim === undefined) return undefined;
    this.#release(victim);
    this.#waiting.unshift(victim);
    return victim;
  }

  // Recompute preemption: the victim gives its blocks back and starts again from its prompt.
  #release(victim: Running): void {
    this.pool.release([...victim.blocks].reverse());
    victim.blocks = [];
    victim.numComputed = 0;
    victim.numCachedBlocks = 0;
    victim.inPrefill = true;
    victim.account.preemptions++;
    this.stats.preemptions++;
  }

  // vLLM's priority policy: a waiting request of better priority than a running one, with every
  // sequence slot taken, preempts the worst running request (the latest of the worst priority), so
  // an interactive request does not wait for a batch request to finish its answer.
  #preemptForPriority(): void {
    if (this.#o.byPriority !== true) return;
    while (this.#running.length >= this.#o.maxNumSeqs) {
      const head = this.#waiting[0];
      if (head === undefined) return;
      let worst = -1;
      for (const [i, r] of this.#running.entries()) {
        if (worst < 0 || (r.req.priority ?? 0) >= (this.#running[worst]?.req.priority ?? 0)) worst = i;
      }
      const victim = this.#running[worst];
      if (victim === undefined || (victim.req.priority ?? 0) <= (head.req.priority ?? 0)) return;
      this.#running.splice(worst, 1);
      this.#release(victim);
      this.#enqueue(victim);
    }
  }

  #schedule(): Running[] {
    this.#preemptForPriority();
    let budget = this.#o.maxNumBatchedTokens;
    const scheduled: Running[] = [];
    for (let i = 0; i < this.#running.length && budget > 0; i++) {
      const r = this.#running[i];
      if (r === undefined) break;
      const numNew = Math.min(r.tokens.length - r.numComputed, budget);
      if (numNew <= 0) continue;
      let fits = false;
      for (;;) {
        const need = this.#blocksNeeded(r, r.numComputed + numNew);
        if (need <= 0) {
          fits = true;
          break;
        }
        const got = this.pool.allocate(need);
        if (got !== undefined) {
          r.blocks.push(...got);
          fits = true;
          break;
        }
        const victim = this.#preemptLast();
        if (victim === undefined || victim === r) break;
      }
      if (!fits) continue;
      r.scheduledNew = numNew;
      this.#cacheFilled(r, r.numComputed + numNew);
      scheduled.push(r);
      budget -= numNew;
    }
    while (this.#waiting.length > 0 && budget > 0 && this.#running.length < this.#o.maxNumSeqs) {
      const r = this.#waiting[0];
      if (r === undefined) break;
      const B = this.#o.blockSizeTokens;
      const hits: Block[] = [];
      if (this.#o.enablePrefixCaching) {
        // The last token is always recomputed (its logits are needed), so a fully cached prompt
        // still computes its final block: vLLM caps the hit at num_tokens - 1.
        const maxHitBlocks = Math.floor((r.tokens.length - 1) / B);
        for (let i = 0; i < maxHitBlocks; i++) {
          const d = r.digests[i];
          const b = d === undefined ? undefined : this.pool.cachedBlock(d);
          if (b === undefined) break;
          hits.push(b);
        }
      }
      // Blocks read from a remote prefill count as computed, as vLLM's connector reports them, but the
      // last prompt token is computed here for its logits.
      const remote = Math.min(r.req.remoteComputedTokens ?? 0, r.tokens.length - 1);
      const computed = Math.max(hits.length * B, remote);
      const numNew = Math.min(r.tokens.length - computed, budget);
      const freeHits = hits.filter((b) => b.refCount === 0).length;
      const need = Math.ceil((computed + numNew) / B) - hits.length;
      if (need > this.pool.numFree - freeHits) break;
      this.#waiting.shift();
      this.pool.touch(hits);
      const got = need > 0 ? this.pool.allocate(need) : [];
      r.blocks = [...hits, ...(got ?? [])];
      r.numComputed = computed;
      r.numCachedBlocks = hits.length;
      if (this.#o.enablePrefixCaching) {
        this.stats.prefixQueries += r.tokens.length;
        this.stats.prefixHits += computed;
      }
      if (!r.cachedCounted) {
        r.cachedCounted = true;
        r.account.cachedTokens = computed;
        r.firstScheduledAt = performance.now();
        r.account.queuedMs = r.firstScheduledAt - r.arrivedAt;
      }
      r.scheduledNew = numNew;
      r.inPrefill = true;
      this.#cacheFilled(r, computed + numNew);
      this.#running.push(r);
      scheduled.push(r);
      budget -= numNew;
    }
    return scheduled;
  }

  #update(scheduled: readonly Running[]): void {
    const now = performance.now();
    for (const r of scheduled) {
      if (!this.#running.includes(r)) continue;
      r.numComputed += r.scheduledNew;
      r.scheduledNew = 0;
      if (r.aborted) {
        this.#retire(r, 'abort');
        continue;
      }
      if (r.numComputed < r.tokens.length) continue;
      r.inPrefill = false;
      const token = (r.req.outputToken ?? this.#o.outputToken)(r.outputs + (r.req.outputOffset ?? 0));
      r.tokens.push(token);
      r.outputs++;
      r.account.completionTokens = r.outputs;
      r.account.ttftMs ??= now - r.arrivedAt;
      this.#extendDigests(r);
      const verdict = r.req.onToken(token);
      if (verdict === 'stop') this.#retire(r, 'stop');
      else if (r.outputs >= r.req.maxTokens) this.#retire(r, 'length');
    }
  }

  #retire(r: Running, reason: FinishReason): void {
    const i = this.#running.indexOf(r);
    if (i >= 0) this.#running.splice(i, 1);
    r.req.onBlocks?.(r.blocks.map((b) => b.id));
    this.pool.release([...r.blocks].reverse());
    r.blocks = [];
    this.#finish(r, reason);
  }

  #finish(r: Running, reason: FinishReason): void {
    if (r.account.finishReason !== undefined) return;
    r.account.finishReason = reason;
    r.account.e2eMs = performance.now() - r.arrivedAt;
    r.req.onFinish(reason, r.account);
  }

  #flushEvents(): void {
    const events = this.pool.takeEvents();
    if (events.length > 0) this.#o.onEvents(events);
  }

  /** A restarted engine: every hash forgotten, no event said (the restart fault). */
  forgetCacheSilently(): void {
    this.pool.forgetSilently();
  }
}
