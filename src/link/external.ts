// Replicas llmgw did not start: an engine someone else runs, named in `replicas:` by its URL. The
// gateway health-checks it, routes to it while it answers, and where its bound KV-event publisher is
// given, connects a SUB to it and indexes its blocks like those of its own engines.
import type { ExternalEndpoint } from '../catalog/index.js';
import { EngineEventStream, type EngineEventStreamOptions } from '../kv/index.js';
import { silentLogger, type Logger } from '../log/index.js';
import type { DeltaWriter, RoutedReplica } from './control-plane.js';

/** One external replica: its endpoint and the model it serves. */
export type ExternalReplica = ExternalEndpoint & { readonly model: string };

/** A GET whose answer's status is all a health check reads; it rejects when there is no answer. */
export type HealthGet = (url: URL, o: { signal: AbortSignal; headers: Record<string, string> }) => Promise<number>;

const fetchStatus: HealthGet = async (url, o) => {
  const res = await fetch(url, o);
  await res.body?.cancel();
  return res.status;
};

/** The owner name external replicas' blocks are written under: never a node's (node names have no parentheses in practice, and none is listed so). */
export const externalOwner = '(external)';

interface Tracked {
  readonly r: ExternalReplica;
  readonly stream: EngineEventStream | undefined;
  healthy: boolean;
  // Why the last check failed ('' while healthy): logged when it changes, so an operator reads why
  // a replica never became healthy (an untrusted certificate said nothing before).
  reason: string;
  everHealthy: boolean;
  generation: number;
}

// Why a health check failed, in the words of the error that ended it: the TLS code of a certificate
// not trusted, ECONNREFUSED, a timeout.
function failureReason(e: unknown): string {
  const parts: string[] = [];
  for (let c: unknown = e; c instanceof Error && parts.length < 3; c = c.cause) {
    const code = 'code' in c && typeof c.code === 'string' ? c.code : undefined;
    parts.push(code === undefined ? c.message : `${code}: ${c.message}`);
  }
  return parts.join('; ') || String(e);
}

function hostPort(endpoint: string): { host: string; port: number } {
  const m = /^tcp:\/\/([^:/]+):(\d+)$/.exec(endpoint);
  return { host: m?.[1] ?? '127.0.0.1', port: Number(m?.[2] ?? 0) };
}

/** Health checks and KV subscriptions of the external replicas. */
export class ExternalReplicas {
  readonly #log: Logger;
  readonly #writer: DeltaWriter | undefined;
  readonly #intervalMs: number;
  readonly #timeoutMs: number;
  readonly #tracked: Tracked[];
  readonly #stop = new AbortController();
  readonly #listeners = new Set<() => void>();
  readonly #get: HealthGet;
  #loop: Promise<void> | undefined;
  #closing: Promise<void> | undefined;

  constructor(o: {
    replicas: readonly ExternalReplica[];
    writer: DeltaWriter | undefined;
    healthIntervalMs: number;
    healthTimeoutMs: number;
    /** How a stream is built (serve adds the pool's hasher and kv metrics); a plain one by default. */
    openStream?: ((o: EngineEventStreamOptions) => EngineEventStream) | undefined;
    /** How a health check asks (serve's trusts each https replica's ca_file); fetch by default. */
    get?: HealthGet | undefined;
    log?: Logger | undefined;
  }) {
    this.#get = o.get ?? fetchStatus;
    const open = o.openStream ?? ((so: EngineEventStreamOptions) => new EngineEventStream(so));
    this.#log = o.log ?? silentLogger;
    this.#writer = o.writer;
    this.#intervalMs = o.healthIntervalMs;
    this.#timeoutMs = o.healthTimeoutMs;
    this.#tracked = o.replicas.map((r) => {
      let stream: EngineEventStream | undefined;
      if (r.kvEvents !== '') {
        const at = hostPort(r.kvEvents);
        stream = open({
          engineId: r.name,
          host: at.host,
          port: at.port,
          // vLLM binds its publisher for us to connect to; each handshake asks replay for what we missed.
          engineBound: { endpoint: r.kvEvents, replayEndpoint: r.replay === '' ? undefined : r.replay },
          topic: r.topic,
          blockSizeTokens: r.blockSizeTokens,
          seed: r.hashSeed,
          capacityBlocks: r.capacityBlocks,
          log: this.#log,
          onDelta: (d) => this.#writer?.apply(externalOwner, r.name, d),
        });
      }
      return { r, stream, healthy: false, reason: '', everHealthy: false, generation: 0 };
    });
  }

  /** Connects the KV subscriptions and starts health checks. */
  async start(): Promise<void> {
    for (const t of this.#tracked) {
      await t.stream?.start();
      // The gateway knows nothing of this engine's blocks yet: start from empty; the connection's
      // handshake asks its replay buffer for what it already holds (it will not announce it again).
      this.#writer?.reset(t.r.name, 'requested');
    }
    this.#loop = this.#checkLoop();
  }

  async #checkLoop(): Promise<void> {
    const signal = this.#stop.signal;
    while (!signal.aborted) {
      await Promise.all(this.#tracked.map((t) => this.#check(t)));
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, this.#intervalMs);
        function done(): void {
          clearTimeout(timer);
          signal.removeEventListener('abort', done);
          resolve();
        }
        signal.addEventListener('abort', done, { once: true });
      });
    }
  }

  async #check(t: Tracked): Promise<void> {
    const ctl = new AbortController();
    const onStop = (): void => ctl.abort();
    this.#stop.signal.addEventListener('abort', onStop, { once: true });
    const timer = setTimeout(() => ctl.abort(), this.#timeoutMs);
    let ok = false;
    let reason = '';
    try {
      const status = await this.#get(new URL('health', t.r.url), { signal: ctl.signal, headers: t.r.apiKey === '' ? {} : { authorization: `Bearer ${t.r.apiKey}` } });
      ok = status === 200;
      if (!ok) reason = `GET /health answered ${status}`;
    } catch (e) {
      // Refused, reset, timed out or not trusted: the replica is down, which is what the check is for.
      ok = false;
      reason = ctl.signal.aborted && !this.#stop.signal.aborted ? `no answer to GET /health within ${this.#timeoutMs} ms` : failureReason(e);
    } finally {
      clearTimeout(timer);
      this.#stop.signal.removeEventListener('abort', onStop);
    }
    if (this.#stop.signal.aborted) return;
    if (!ok && reason !== t.reason) this.#log.warn({ replica: t.r.name, url: t.r.url, reason }, 'external.unhealthy');
    t.reason = reason;
    if (ok === t.healthy) return;
    t.healthy = ok;
    if (ok) {
      t.generation++;
      // Back after being down: the engine may have restarted with an empty cache and a new sequence.
      if (t.everHealthy) t.stream?.reset('engine-restart', 'health came back');
      t.everHealthy = true;
    }
    this.#log.info({ replica: t.r.name, healthy: ok }, 'external.health');
    for (const l of this.#listeners) l();
  }

  /** Healthy external replicas serving `model`. */
  ready(model: string): RoutedReplica[] {
    return this.#tracked
      .filter((t) => t.healthy && t.r.model === model)
      .map((t) => ({
        id: t.r.name,
        node: externalOwner,
        model: t.r.model,
        adapters: [],
        url: new URL(t.r.url),
        apiKey: t.r.apiKey === '' ? undefined : t.r.apiKey,
        generation: t.generation,
        kvEvents: t.stream !== undefined,
        blockSizeTokens: t.r.blockSizeTokens,
        hashSeed: t.r.hashSeed,
        dataParallelSize: 1,
      }));
  }

  /** The owner of an external replica's blocks, or undefined for any other id. */
  ownerOf(replicaId: string): string | undefined {
    return this.#tracked.some((t) => t.r.name === replicaId) ? externalOwner : undefined;
  }

  /** Every external replica and whether it answers, for status views. */
  status(): { name: string; model: string; url: string; healthy: boolean; kvEvents: boolean }[] {
    return this.#tracked.map((t) => ({ name: t.r.name, model: t.r.model, url: t.r.url, healthy: t.healthy, kvEvents: t.stream !== undefined }));
  }

  /** Calls `listener` when a replica's health changes; returns the unsubscribe. */
  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Stops checks and closes the subscriptions; idempotent. */
  close(): Promise<void> {
    return (this.#closing ??= this.#shutdown());
  }

  async #shutdown(): Promise<void> {
    this.#stop.abort();
    await this.#loop;
    await Promise.all(this.#tracked.map((t) => t.stream?.close()));
  }
}
