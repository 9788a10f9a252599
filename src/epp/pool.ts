// The pool's endpoints as routing sees them: each discovered endpoint is an external replica of the
// pool's model (health-checked at /health, its KV events subscribed over ZMQ and indexed), added and
// removed as discovery changes. Every EPP replica subscribes to every endpoint's events, so the
// precise tier holds on each of several active-active EPPs.
import type { EngineEventStream, EngineEventStreamOptions } from '../kv/index.js';
import { ExternalReplicas, externalOwner, type RoutedReplica } from '../link/index.js';
import type { DeltaWriter } from '../link/index.js';
import { silentLogger, type Logger } from '../log/index.js';
import type { ReplicaDirectory, ReplicaView } from '../routing/index.js';
import { filledTemplate, type PoolConfig } from './config.js';
import type { PoolEndpoint } from './endpoints.js';

interface Member {
  readonly endpoint: PoolEndpoint;
  readonly key: string;
  readonly replicas: ExternalReplicas;
}

/** An endpoint's address as Envoy's ORIGINAL_DST cluster takes it: ip:port, IPv6 in brackets. */
export function hostPortOf(e: { readonly address: string; readonly port: number }): string {
  return e.address.includes(':') ? `[${e.address}]:${e.port}` : `${e.address}:${e.port}`;
}

// Everything that makes an endpoint the same one: a changed address, port or label is a new endpoint
// (its blocks and health start over).
const keyOf = (e: PoolEndpoint): string => JSON.stringify([e.name, e.address, e.port, Object.entries(e.labels).sort()]);

/** The pool's endpoints as a ReplicaDirectory; apply() takes each new list from discovery. */
export class EppPool implements ReplicaDirectory {
  readonly #o: {
    readonly pool: PoolConfig;
    readonly writer: () => DeltaWriter | undefined;
    readonly openStream?: ((o: EngineEventStreamOptions) => EngineEventStream) | undefined;
    readonly log: Logger;
  };
  readonly #members = new Map<string, Member>();
  readonly #listeners = new Set<() => void>();
  #applying: Promise<void> = Promise.resolve();
  #closing: Promise<void> | undefined;

  constructor(o: { pool: PoolConfig; writer: () => DeltaWriter | undefined; openStream?: (o: EngineEventStreamOptions) => EngineEventStream; log?: Logger }) {
    this.#o = { ...o, log: o.log ?? silentLogger };
  }

  /** Takes discovery's whole list: new endpoints are subscribed and checked, gone ones closed and forgotten. Serialised, so lists apply in order. */
  apply(endpoints: readonly PoolEndpoint[]): Promise<void> {
    this.#applying = this.#applying.then(() => this.#apply(endpoints));
    return this.#applying;
  }

  async #apply(endpoints: readonly PoolEndpoint[]): Promise<void> {
    if (this.#closing !== undefined) return;
    const wanted = new Map(endpoints.map((e) => [e.name, e]));
    for (const [name, m] of [...this.#members]) {
      const e = wanted.get(name);
      if (e !== undefined && keyOf(e) === m.key) continue;
      this.#members.delete(name);
      await m.replicas.close();
      // Its blocks are no longer anyone's: a new pod under the name starts empty.
      this.#o.writer()?.forget(name);
      this.#o.log.info({ endpoint: name }, 'epp.endpoint_removed');
    }
    for (const e of endpoints) {
      if (this.#members.has(e.name)) continue;
      const p = this.#o.pool;
      const replicas = new ExternalReplicas({
        replicas: [
          {
            name: e.name,
            url: `http://${hostPortOf(e)}/`,
            apiKey: '',
            kvEvents: p.kvEvents === '' ? '' : filledTemplate(p.kvEvents, e),
            replay: p.replay === '' ? '' : filledTemplate(p.replay, e),
            topic: p.topic,
            hashSeed: p.hashSeed,
            blockSizeTokens: p.blockSizeTokens,
            capacityBlocks: p.capacityBlocks,
            caFile: '',
            model: p.models[0] ?? '',
          },
        ],
        writer: this.#o.writer(),
        healthIntervalMs: p.healthIntervalMs,
        healthTimeoutMs: Math.max(1_000, p.healthIntervalMs),
        openStream: this.#o.openStream,
        log: this.#o.log.child({ endpoint: e.name }),
      });
      replicas.onChange(() => this.#changed());
      this.#members.set(e.name, { endpoint: e, key: keyOf(e), replicas });
      await replicas.start();
      this.#o.log.info({ endpoint: e.name, address: hostPortOf(e) }, 'epp.endpoint_added');
    }
    this.#changed();
  }

  #changed(): void {
    for (const l of this.#listeners) l();
  }

  /** Healthy endpoints, as replicas of `model` (every endpoint serves each of the pool's models). */
  ready(model: string): readonly (ReplicaView & { readonly endpoint: PoolEndpoint })[] {
    if (!this.#o.pool.models.includes(model)) return [];
    const tokenizer = this.#o.pool.tokenizer === '' ? undefined : this.#o.pool.tokenizer;
    return [...this.#members.values()].flatMap((m) =>
      m.replicas.ready(m.replicas.status()[0]?.model ?? '').map((r: RoutedReplica) => ({ ...r, model, tokenizer, endpoint: m.endpoint })),
    );
  }

  /** Every healthy endpoint, for a request that names no model (a GET). */
  anyReady(): readonly (ReplicaView & { readonly endpoint: PoolEndpoint })[] {
    const m = this.#o.pool.models[0];
    return m === undefined ? [] : this.ready(m);
  }

  models(): readonly string[] {
    return this.#o.pool.models;
  }

  /** The owner of an endpoint's blocks in the index, for the writer's check. */
  ownerOf(id: string): string | undefined {
    return this.#members.has(id) ? externalOwner : undefined;
  }

  /** How many endpoints discovery lists, healthy or not. */
  size(): number {
    return this.#members.size;
  }

  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Closes every endpoint's checks and subscription; idempotent. */
  close(): Promise<void> {
    return (this.#closing ??= this.#applying.then(async () => {
      await Promise.all([...this.#members.values()].map((m) => m.replicas.close()));
      this.#members.clear();
    }));
  }
}
