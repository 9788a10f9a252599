// LoRA adapters an engine loads on demand (runtime_lora): which replica holds which, loading one the
// first time a request needs it on a replica (once, however many requests arrive while it loads), and
// unloading the least recently used once a replica holds more than its bound. Adapters registered at
// start need none of this: every replica of their profile always holds them. What is held is learned
// from our own loads and, at the first sight of a replica (an agent that adopted running engines, a
// gateway restarted beside them), from the engine's own /v1/models.
import type { Dispatcher } from 'undici';
import { request } from 'undici';
import { LlmgwError } from '../errors/index.js';
import type { Logger } from '../log/index.js';
import { silentLogger } from '../log/index.js';

/** One JSON POST to an engine; `path` is relative to its base URL (engines/ builds it, we send it). */
export interface EngineCall {
  readonly path: string;
  readonly body: Readonly<Record<string, unknown>>;
}

/** How one adapter is reached on a replica, as its engine described it. */
export interface AdapterRoute {
  readonly name: string;
  /** Fields set on a request naming the adapter before it goes to the engine. */
  readonly requestFields: Readonly<Record<string, unknown>>;
  /** Loads it at run time; undefined when the engine registered it at start. */
  readonly load: EngineCall | undefined;
  readonly unload: EngineCall | undefined;
}

/** A replica's adapters as its engine described them (engines' AdapterAccess satisfies it). */
export interface AdapterAccess {
  readonly adapters: readonly AdapterRoute[];
  /** How many the engine holds in memory at once; undefined: gateway.adapters.max_per_replica. */
  readonly maxLoaded: number | undefined;
}

/** What residency needs to know of a replica (ReplicaView satisfies it). */
export interface AdapterReplica {
  readonly id: string;
  readonly url: URL;
  readonly apiKey: string | undefined;
  readonly generation: number;
  readonly adapterAccess?: AdapterAccess | undefined;
}

/** A directory that also names the adapters each model serves (the agent's does). */
export interface AdapterDirectory {
  adapters(): readonly { readonly name: string; readonly base: string }[];
}

/** True when the directory names its adapters, so /v1/models lists them and an unknown one is a 404. */
export const listsAdapters = (d: object): d is AdapterDirectory => 'adapters' in d;

/** A run-time load failed: the client gets an OpenAI error naming the adapter, not a 502. */
export class AdapterLoadError extends LlmgwError {
  readonly adapter: string;
  readonly replica: string;
  constructor(adapter: string, replica: string, message: string, o?: ErrorOptions) {
    super('LLMGW_ADAPTER_LOAD', message, o);
    this.adapter = adapter;
    this.replica = replica;
  }
}

/** A request's hold on an adapter: a held adapter is never chosen for unloading. */
export interface AdapterLease {
  /** Settles once the adapter is loaded on the replica; rejects with AdapterLoadError. */
  readonly ready: Promise<void>;
  /** Ends the hold; idempotent. */
  release(): void;
}

/** What residency reports, for metrics (wired by the gateway, so the logic carries no counters). */
export interface AdapterObserver {
  loaded(adapter: string, outcome: 'ok' | 'failed', seconds: number): void;
  unloaded(adapter: string, outcome: 'ok' | 'failed'): void;
}

/** How an AdapterResidency is built. */
export interface AdapterResidencyOptions {
  readonly dispatcher: Dispatcher;
  /** Adapters one replica holds when its engine states no bound of its own. */
  readonly maxPerReplica: number;
  /** Bound on one load or unload call. */
  readonly loadTimeoutMs: number;
  readonly log?: Logger | undefined;
  readonly observer?: AdapterObserver | undefined;
}

interface Held {
  loaded: boolean;
  users: number;
  /** Order of last use: the smallest is unloaded first. */
  lastUse: number;
  ready: Promise<void>;
}

interface ReplicaState {
  readonly generation: number;
  readonly replica: AdapterReplica;
  readonly held: Map<string, Held>;
  /** Unloads still running: a new load of the same adapter waits for its unload first. */
  readonly unloading: Map<string, Promise<void>>;
  synced: Promise<void>;
}

const none: AdapterLease = { ready: Promise.resolve(), release: () => undefined };
const engineMessageChars = 300;

/** The engine's description of `adapter` on replica `r`, if it serves it. */
export function adapterRoute(r: AdapterReplica, adapter: string): AdapterRoute | undefined {
  return r.adapterAccess?.adapters.find((a) => a.name === adapter);
}

/** Which replica holds which on-demand adapter; loads and unloads them. One per gateway. */
export class AdapterResidency {
  readonly #o: AdapterResidencyOptions;
  readonly #log: Logger;
  readonly #replicas = new Map<string, ReplicaState>();
  readonly #stop = new AbortController();
  #uses = 0;
  #closing: Promise<void> | undefined;

  constructor(o: AdapterResidencyOptions) {
    this.#o = o;
    this.#log = o.log ?? silentLogger;
  }

  /**
   * The replicas among `rs` that hold `adapter` or are loading it (those that registered it at start
   * always hold it); undefined when none of them loads it on demand, so residency is no question.
   */
  holders(adapter: string, rs: readonly AdapterReplica[]): ReadonlySet<string> | undefined {
    let onDemand = false;
    const out = new Set<string>();
    for (const r of rs) {
      const route = adapterRoute(r, adapter);
      if (route === undefined) continue;
      if (route.load === undefined) out.add(r.id);
      else {
        onDemand = true;
        if (this.#stateOf(r).held.has(adapter)) out.add(r.id);
      }
    }
    return onDemand ? out : undefined;
  }

  /**
   * Holds `adapter` on `r` for one request, starting its load unless it is held or loading. Synchronous
   * up to the load's start, so requests routed in the same turn see it as loading and join that load.
   */
  acquire(r: AdapterReplica, adapter: string): AdapterLease {
    const route = adapterRoute(r, adapter);
    const load = route?.load;
    if (route === undefined || load === undefined) return none;
    const s = this.#stateOf(r);
    let h = s.held.get(adapter);
    if (h === undefined) {
      const fresh: Held = { loaded: false, users: 0, lastUse: 0, ready: Promise.resolve() };
      fresh.ready = this.#load(s, route, load, fresh);
      // Every waiter awaits `ready` and sees the failure; #load has logged and counted it. This only
      // keeps a load whose waiters all left from being an unhandled rejection.
      fresh.ready.catch(() => undefined);
      s.held.set(adapter, fresh);
      h = fresh;
    }
    const held = h;
    held.users++;
    held.lastUse = ++this.#uses;
    let released = false;
    return {
      ready: held.ready,
      release: () => {
        if (released) return;
        released = true;
        held.users--;
        held.lastUse = ++this.#uses;
        this.#trim(s);
      },
    };
  }

  /** Adapters held (loaded or loading) per replica id. */
  resident(): ReadonlyMap<string, readonly string[]> {
    return new Map([...this.#replicas].map(([id, s]) => [id, [...s.held.keys()]]));
  }

  /** Cuts running loads and unloads short and waits for them; idempotent. */
  close(): Promise<void> {
    return (this.#closing ??= (async () => {
      this.#stop.abort();
      const pending = [...this.#replicas.values()].flatMap((s) => [...s.unloading.values(), ...[...s.held.values()].map((h) => h.ready)]);
      await Promise.allSettled(pending);
    })());
  }

  #stateOf(r: AdapterReplica): ReplicaState {
    const had = this.#replicas.get(r.id);
    // A restarted engine lost whatever it had loaded.
    if (had !== undefined && had.generation === r.generation) return had;
    const s: ReplicaState = { generation: r.generation, replica: r, held: new Map(), unloading: new Map(), synced: Promise.resolve() };
    s.synced = this.#sync(s);
    this.#replicas.set(r.id, s);
    return s;
  }

  // What the engine already holds, from its /v1/models (vLLM lists every loaded adapter there, with
  // its base as parent): an engine adopted with adapters loaded is not asked to load them again.
  async #sync(s: ReplicaState): Promise<void> {
    try {
      const listed = await this.#listed(s.replica);
      for (const name of listed) {
        const route = adapterRoute(s.replica, name);
        if (route?.load === undefined) continue;
        const h = s.held.get(name);
        if (h !== undefined) h.loaded = true;
        else s.held.set(name, { loaded: true, users: 0, lastUse: 0, ready: Promise.resolve() });
      }
      if (listed.size > 0) this.#trim(s);
    } catch (e) {
      // Only a shortcut: without it the first request for an adapter it holds asks it to load again.
      this.#log.warn({ replica: s.replica.id, err: e }, 'gateway.adapters.sync_failed');
    }
  }

  async #listed(r: AdapterReplica): Promise<ReadonlySet<string>> {
    const text = await this.#send(r, 'GET', '/v1/models', undefined);
    if (text.status !== 200) return new Set();
    const body: unknown = JSON.parse(text.body);
    const data: readonly unknown[] = typeof body === 'object' && body !== null && 'data' in body && Array.isArray(body.data) ? body.data : [];
    const names = new Set<string>();
    for (const m of data) if (typeof m === 'object' && m !== null && 'id' in m && typeof m.id === 'string') names.add(m.id);
    return names;
  }

  async #load(s: ReplicaState, route: AdapterRoute, call: EngineCall, h: Held): Promise<void> {
    const r = s.replica;
    const t0 = performance.now();
    let outcome: 'ok' | 'failed' | undefined = 'failed';
    try {
      await s.synced;
      if (h.loaded) {
        // The engine's own list says it holds it already: nothing was loaded, nothing to count.
        outcome = undefined;
        return;
      }
      await s.unloading.get(route.name);
      const res = await this.#send(r, 'POST', call.path, call.body);
      // An engine that says no may still hold it (loaded by someone else since we looked): believe its list.
      if (res.status !== 200 && !(await this.#listed(r).catch(() => new Set<string>())).has(route.name)) {
        throw new AdapterLoadError(
          route.name,
          r.id,
          `adapter "${route.name}" could not be loaded on replica ${r.id}: the engine answered ${res.status} ${res.body.slice(0, engineMessageChars)}; check the adapter's path in the model's profile`,
        );
      }
      h.loaded = true;
      outcome = 'ok';
      this.#log.info({ replica: r.id, adapter: route.name, tookMs: Math.round(performance.now() - t0) }, 'gateway.adapter.loaded');
      this.#trim(s);
    } catch (e) {
      // Forgotten, so the next request tries again (the operator may have fixed the files meanwhile).
      if (s.held.get(route.name) === h) s.held.delete(route.name);
      this.#log.warn({ replica: r.id, adapter: route.name, err: e }, 'gateway.adapter.load_failed');
      if (e instanceof AdapterLoadError) throw e;
      const why = e instanceof Error ? e.message : String(e);
      throw new AdapterLoadError(route.name, r.id, `adapter "${route.name}" could not be loaded on replica ${r.id} (${why}); see the engine's log`, { cause: e });
    } finally {
      if (outcome !== undefined) this.#o.observer?.loaded(route.name, outcome, (performance.now() - t0) / 1000);
    }
  }

  // Unloads the least recently used adapters no request holds until the replica is within its bound.
  // Loads still running count toward the bound but are never chosen; a replica whose every adapter is
  // in use stays over its bound until one is released.
  #trim(s: ReplicaState): void {
    if (this.#replicas.get(s.replica.id) !== s) return;
    const bound = s.replica.adapterAccess?.maxLoaded ?? this.#o.maxPerReplica;
    while (s.held.size > bound) {
      let victim: [string, Held] | undefined;
      for (const e of s.held) if (e[1].loaded && e[1].users === 0 && (victim === undefined || e[1].lastUse < victim[1].lastUse)) victim = e;
      if (victim === undefined) return;
      const [name] = victim;
      s.held.delete(name);
      const call = adapterRoute(s.replica, name)?.unload;
      if (call === undefined) continue;
      const done = this.#unload(s, name, call).finally(() => {
        if (s.unloading.get(name) === done) s.unloading.delete(name);
      });
      // Owned by the replica's state: a load of the same adapter waits for it, close() awaits it.
      s.unloading.set(name, done);
    }
  }

  async #unload(s: ReplicaState, name: string, call: EngineCall): Promise<void> {
    let outcome: 'ok' | 'failed' = 'failed';
    try {
      const res = await this.#send(s.replica, 'POST', call.path, call.body);
      if (res.status === 200) {
        outcome = 'ok';
        this.#log.info({ replica: s.replica.id, adapter: name }, 'gateway.adapter.unloaded');
      } else this.#log.warn({ replica: s.replica.id, adapter: name, status: res.status, body: res.body.slice(0, engineMessageChars) }, 'gateway.adapter.unload_failed');
    } catch (e) {
      // The engine keeps it loaded: a memory cost, never a wrong answer; the next load still works.
      this.#log.warn({ replica: s.replica.id, adapter: name, err: e }, 'gateway.adapter.unload_failed');
    } finally {
      this.#o.observer?.unloaded(name, outcome);
    }
  }

  async #send(r: AdapterReplica, method: 'GET' | 'POST', path: string, body: Readonly<Record<string, unknown>> | undefined): Promise<{ status: number; body: string }> {
    this.#stop.signal.throwIfAborted();
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(new Error(`no answer within ${this.#o.loadTimeoutMs} ms (gateway.adapters.load_timeout_ms)`)), this.#o.loadTimeoutMs);
    const onStop = (): void => ac.abort(new Error('the gateway is closing'));
    this.#stop.signal.addEventListener('abort', onStop, { once: true });
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (r.apiKey !== undefined) headers.authorization = `Bearer ${r.apiKey}`;
    try {
      const res = await request(new URL(path, r.url), {
        method,
        headers,
        dispatcher: this.#o.dispatcher,
        signal: ac.signal,
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      return { status: res.statusCode, body: await res.body.text() };
    } finally {
      clearTimeout(timer);
      this.#stop.signal.removeEventListener('abort', onStop);
    }
  }
}
