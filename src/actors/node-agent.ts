// The node agent: turns placement's shard specs into replica machines under one root actor, takes
// back engines a previous agent left running, records running shards for the next one, and shows
// the gateway which replicas are ready. It learns what the machines do only from the inspector.
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { createActor, waitFor, type Actor } from 'xstate';
import { canFallBackToCpu, disaggOf, embeds, kvEventsEndpoints, kvEventsTopic, servesAdapters, type AdapterAccess, type Disagg, type Engine, type Host, type ShardSpec } from '../engines/index.js';
import { LlmgwError } from '../errors/index.js';
import { silentLogger, type Logger } from '../log/index.js';
import { agentMachine } from './agent-machine.js';
import { ActorBoard } from './board.js';
import type { AgentConfig } from './config.js';
import { createInspector, publicRecord, type InspectRecord, type SnapshotRecord } from './inspect.js';
import { isAlive, readTail, rotateLog } from './processes.js';
import { noKvSink, publisherMachine, streamEventsTo, type KvSink, type KvStateStore, type OpenKvStream, type PublisherInput } from './publisher-machine.js';
import { replicaMachine, type ReplicaContext, type ReplicaInput } from './replica-machine.js';
import { countInFlightWith, listDevicesWith, shardMachine, shardPhaseOf, type ShardContext, type ShardInput, type ShardPhase } from './shard-machine.js';
import { ensurePrivateDir, shardFingerprint, StateDir, type ShardRecord } from './state-dir.js';

/** One replica placed on this node: its shards here, and the KV facts the router hashes with. */
export interface ReplicaPlan {
  readonly replicaId: string;
  /** The served model name. */
  readonly model: string;
  readonly adapters: readonly string[];
  /** This node's shards of the replica (a multi-node replica has others elsewhere). */
  readonly shards: readonly ShardSpec[];
  readonly blockSizeTokens: number;
  readonly hashSeed: string;
  readonly dataParallelSize: number;
  /** Blocks the engine can hold, bounding its event mirror. */
  readonly capacityBlocks: number;
  /** Its engine schedules by a request's priority (absent: it does not, as from an agent before it was sent). */
  readonly schedulesByPriority?: boolean | undefined;
}

/** Where engines come from (the engines Registry satisfies it). */
export interface EngineSource {
  get(name: string): Engine;
}

/** How a NodeAgent is built. */
export interface NodeAgentOptions {
  /** This node's name, as the gateway knows it. */
  readonly node: string;
  /** Address the gateway reaches engines on when they listen on every address. */
  readonly advertiseAddr: string;
  readonly config: AgentConfig;
  readonly engines: EngineSource;
  /** The host facts builders need; its env is what every engine inherits. */
  readonly host: Host;
  /** Where each replica's KV deltas go (the gateway's index writer); without one they are mirrored only. */
  readonly kvSink?: KvSink;
  /** How each replica's KV event stream is built (the composition root wraps it with metrics). */
  readonly openKvStream?: OpenKvStream;
  /** Requests in flight per replica (the router's count), so draining waits for them. */
  readonly inFlight?: (replicaId: string) => number;
  readonly log?: Logger;
  /** Every actor record, secrets removed: for the visualizer. */
  readonly onRecord?: (r: InspectRecord) => void;
  /** The board this node's actors are shown on (one the gateway already serves); by default its own. */
  readonly board?: ActorBoard;
}

/** A ready replica as the gateway's ReplicaView wants it. */
export interface ReadyReplica {
  readonly id: string;
  readonly node: string;
  readonly model: string;
  readonly adapters: readonly string[];
  readonly url: URL;
  readonly apiKey: string | undefined;
  readonly generation: number;
  readonly kvEvents: boolean;
  readonly blockSizeTokens: number;
  readonly hashSeed: string;
  readonly dataParallelSize: number;
  /** How its engine serves its adapters, built by engines/ from the profile. */
  readonly adapterAccess?: AdapterAccess | undefined;
  /** Its engine schedules by a request's priority, so the gateway sends it one. */
  readonly schedulesByPriority?: boolean | undefined;
  /** Its part in prefill/decode disaggregation, built by engines/ from the profile; absent: whole requests only. */
  readonly disagg?: Disagg | undefined;
  /** It serves /v1/embeddings (its profile's task: embed); absent: it generates. */
  readonly embeds?: boolean | undefined;
}

const REBIND_MS = 1_000;
// How often shard logs are measured for rotation: a few stat calls, and an engine cannot write
// more than a few MB in that time.
const LOG_ROTATE_CHECK_MS = 10_000;

const isShardContext = (v: unknown): v is ShardContext =>
  typeof v === 'object' && v !== null && 'spec' in v && 'processes' in v && 'commands' in v && Array.isArray(v.processes);
const isReplicaContext = (v: unknown): v is ReplicaContext =>
  typeof v === 'object' && v !== null && 'replicaId' in v && 'shardViews' in v && 'generation' in v;

function probeHost(bindAddr: string, advertise: string): string {
  // An engine listening on every address is reached on the node's own address.
  if (bindAddr === '' || bindAddr === '0.0.0.0' || bindAddr === '::') return advertise;
  return bindAddr.includes(':') ? `[${bindAddr}]` : bindAddr;
}

/** Supervises the replicas placed on this node. */
export class NodeAgent {
  readonly #o: NodeAgentOptions;
  readonly #log: Logger;
  readonly #state: StateDir;
  readonly #sink: KvSink;
  #root: Actor<typeof agentMachine> | undefined;
  readonly #replicaOfShard = new Map<string, ReplicaInput>();
  readonly #latest = new Map<string, SnapshotRecord>();
  /** Each shard's phase as last logged, and since when, for `tookMs` in transition lines. */
  readonly #logged = new Map<string, { readonly phase: ShardPhase; readonly at: number; readonly tail: number }>();
  /** Every actor of this node as the debug page and `ctl status` show it. */
  readonly board: ActorBoard;
  readonly #written = new Map<string, string>();
  readonly #ready = new Map<string, ReadyReplica>();
  readonly #listeners = new Set<() => void>();
  // Kept beside the machines, not in their context: plain data the gateway needs, no state of theirs.
  readonly #adapterAccess = new Map<string, AdapterAccess>();
  readonly #disagg = new Map<string, Disagg>();
  readonly #embedders = new Set<string>();
  #models: readonly string[] = [];
  #adapters: readonly { readonly name: string; readonly base: string }[] = [];
  #planned = false;
  #rotation: NodeJS.Timeout | undefined;
  #closing: Promise<void> | undefined;

  constructor(o: NodeAgentOptions) {
    this.#o = o;
    this.#log = (o.log ?? silentLogger).child({ node: o.node });
    this.#state = new StateDir(o.config.stateDir);
    this.#sink = o.kvSink ?? noKvSink;
    this.board = o.board ?? new ActorBoard({ tail: (id) => this.tail(id) });
  }

  /** Starts the root actor with `plans`, taking back what a previous agent left running. */
  start(plans: readonly ReplicaPlan[]): void {
    if (this.#root !== undefined) throw new LlmgwError('LLMGW_AGENT_STARTED', `agent ${this.#o.node} was already started; call setDesired to change its replicas`);
    const inFlight = this.#o.inFlight ?? (() => 0);
    const engines = this.#o.engines;
    const shard = shardMachine.provide({
      actors: {
        listDevices: listDevicesWith((name, out) => {
          const e = engines.get(name);
          return canFallBackToCpu(e) ? e.parseDevices(out) : [];
        }),
        countInFlight: countInFlightWith(inFlight),
      },
    });
    const publisher = publisherMachine.provide({ actors: { streamEvents: streamEventsTo(this.#sink, this.#o.openKvStream, this.#kvStore()) } });
    const replica = replicaMachine.provide({ actors: { shard, publisher } });
    const machine = agentMachine.provide({ actors: { replica } });
    this.#root = createActor(machine, {
      systemId: `node:${this.#o.node}`,
      input: { node: this.#o.node },
      inspect: createInspector((r) => this.#onRecord(r)),
    });
    this.#root.start();
    this.#rotation = setInterval(() => this.rotateLogs(), LOG_ROTATE_CHECK_MS);
    // Rotation is housekeeping: it must not keep a finished process alive.
    this.#rotation.unref();
    this.setDesired(plans);
  }

  // The state directory as the publishers' store; a save that fails is logged, and the next start is cold.
  #kvStore(): KvStateStore {
    return {
      readKv: (id) => this.#state.readKv(id),
      writeKv: (id, s) => {
        try {
          this.#state.writeKv(id, s);
        } catch (e) {
          this.#log.warn({ replica: id, err: e }, 'agent.kv_state.unwritable');
        }
      },
    };
  }

  /** Makes `plans` the replicas of this node: new ones start, missing ones drain, changed ones drain and restart. */
  setDesired(plans: readonly ReplicaPlan[]): void {
    const root = this.#root;
    if (root === undefined) throw new LlmgwError('LLMGW_AGENT_NOT_STARTED', `agent ${this.#o.node}: call start() before setDesired()`);
    // Before any engine is told to bind a socket there: a directory others can enter is fixed or refused.
    for (const dir of new Set(plans.flatMap((p) => p.shards.map((s) => s.kvIpcDir ?? '')))) if (dir !== '') ensurePrivateDir(dir);
    const records = this.#state.read((file, why) => this.#log.warn({ file, why }, 'agent.state.unreadable'));
    const byShard = new Map(records.map((r) => [r.shard.spec.shardId, r]));
    // Only a starting agent adopts: later records are this agent's own running shards, which a
    // successor replica must never take over while they are being drained.
    const adopting = !this.#planned;
    this.#planned = true;
    const replicas = plans.map((p) => this.#replicaInput(p, byShard, adopting));
    const planned = new Set(replicas.flatMap((r) => r.shards.map((s) => s.spec.shardId)));
    const adoptedNow = new Set(replicas.flatMap((r) => r.shards.filter((s) => s.adopt !== undefined).map((s) => s.spec.shardId)));
    // A saved KV stream is only true of the engine that published it: kept for adopted engines only.
    if (adopting) this.#state.keepKvOnly(new Set(replicas.filter((r) => r.shards.some((s) => s.adopt !== undefined)).map((r) => r.replicaId)));
    // Records no plan adopts: engines still running under an old spec are taken back to be drained.
    const stale = new Map<string, ShardRecord[]>();
    for (const r of records) {
      const id = r.shard.spec.shardId;
      if (adoptedNow.has(id) || this.#replicaOfShard.has(id)) continue;
      if (!r.processes.some(isAlive)) {
        this.#state.remove(id);
        continue;
      }
      const list = stale.get(r.replica.replicaId) ?? [];
      list.push(r);
      stale.set(r.replica.replicaId, list);
      this.#log.info({ shard: id, planned: planned.has(id) }, 'agent.shard.retiring');
    }
    const retiring = [...stale.values()].map((rs) => this.#retiringInput(rs));
    for (const r of [...replicas, ...retiring]) for (const s of r.shards) this.#replicaOfShard.set(s.spec.shardId, r);
    this.#models = [...new Set(plans.map((p) => p.model))].sort();
    const adapters = new Map(plans.flatMap((p) => p.adapters.map((name) => [name, { name, base: p.model }] as const)));
    this.#adapters = [...adapters.values()].sort((a, b) => a.name.localeCompare(b.name));
    root.send({ type: 'replicas.desired', replicas, retiring });
  }

  #replicaInput(p: ReplicaPlan, records: ReadonlyMap<string, ShardRecord>, adopting: boolean): ReplicaInput {
    const { config: cfg, host } = this.#o;
    const shards: ShardInput[] = p.shards.map((given) => {
      const rec = records.get(given.shardId);
      // A running engine keeps the key it was started with; a new one gets a fresh random key.
      const apiKey = given.apiKey !== '' ? given.apiKey : (rec?.shard.spec.apiKey ?? randomBytes(24).toString('base64url'));
      const spec: ShardSpec = { ...given, apiKey };
      const engine = this.#o.engines.get(spec.profile.engine);
      const commands = engine.commands(spec, host);
      const servesHttp = engine.servesHttp(spec);
      const fingerprint = shardFingerprint(spec, commands);
      const alive = adopting && rec !== undefined && rec.fingerprint === fingerprint && rec.processes.length > 0 && rec.processes.every(isAlive);
      if (alive) this.#log.info({ shard: spec.shardId, pids: rec.processes.map((x) => x.pid) }, 'agent.shard.adopting');
      return {
        spec,
        commands,
        servesHttp,
        // Never a worker rank's port: it serves nothing, and probing it would fail a healthy replica.
        healthUrl: servesHttp ? `http://${probeHost(spec.bindAddr, '127.0.0.1')}:${spec.httpPort}${engine.healthPath}` : undefined,
        deviceCheck: canFallBackToCpu(engine) && spec.gpuIndices.length > 0 ? engine.listDevicesCommand(spec, host) : undefined,
        logPath: join(cfg.logDir, `${encodeURIComponent(spec.shardId)}.log`),
        policy: cfg.restart,
        timing: cfg.timing,
        tailLines: cfg.tailLines,
        adopt: alive ? rec.processes : undefined,
        jitterSeed: randomBytes(4).readUInt32LE(0),
      };
    });
    const leader = shards.find((s) => s.spec.rank === 0);
    const leaderEngine = leader === undefined ? undefined : this.#o.engines.get(leader.spec.profile.engine);
    if (leader !== undefined && leaderEngine !== undefined && servesAdapters(leaderEngine)) {
      this.#adapterAccess.set(p.replicaId, leaderEngine.adapterAccess(leader.spec.profile));
    }
    const disagg = leader === undefined ? undefined : disaggOf(leader.spec.profile);
    if (disagg !== undefined) this.#disagg.set(p.replicaId, disagg);
    else this.#disagg.delete(p.replicaId);
    if (leader !== undefined && embeds(leader.spec.profile)) this.#embedders.add(p.replicaId);
    else this.#embedders.delete(p.replicaId);
    const kvEvents = leader !== undefined && leader.spec.profile.kvEvents && leader.spec.kvEventsPort > 0;
    const where = leader === undefined ? undefined : kvEventsEndpoints(leader.spec);
    const publisher: PublisherInput | undefined =
      leader !== undefined && kvEvents
        ? {
            replicaId: p.replicaId,
            port: leader.spec.kvEventsPort,
            replayPort: leader.spec.kvReplayPort,
            ...(where?.transport === 'ipc' ? { engineBound: { endpoint: where.endpoint, replayEndpoint: where.replayEndpoint } } : {}),
            topic: kvEventsTopic,
            dataParallelSize: p.dataParallelSize,
            blockSizeTokens: p.blockSizeTokens,
            seed: p.hashSeed,
            capacityBlocks: p.capacityBlocks,
            rebindMs: REBIND_MS,
          }
        : undefined;
    return {
      replicaId: p.replicaId,
      node: this.#o.node,
      model: p.model,
      adapters: p.adapters,
      url: leader?.servesHttp === true ? `http://${probeHost(leader.spec.bindAddr, this.#o.advertiseAddr)}:${leader.spec.httpPort}/` : undefined,
      apiKey: leader?.spec.apiKey ?? '',
      kvEvents,
      blockSizeTokens: p.blockSizeTokens,
      hashSeed: p.hashSeed,
      dataParallelSize: p.dataParallelSize,
      schedulesByPriority: p.schedulesByPriority === true,
      fingerprint: shards.map((s) => shardFingerprint(s.spec, s.commands)).join('+'),
      shards,
      publisher,
      retire: false,
    };
  }

  #retiringInput(records: readonly ShardRecord[]): ReplicaInput {
    const [first] = records;
    if (first === undefined) throw new LlmgwError('LLMGW_AGENT_INTERNAL', 'a retiring replica needs at least one shard record');
    return {
      ...first.replica,
      fingerprint: `retiring:${first.replica.fingerprint}`,
      shards: records.map((r) => ({ ...r.shard, adopt: r.processes })),
      retire: true,
    };
  }

  #onRecord(r: InspectRecord): void {
    try {
      this.#track(r);
    } catch (e) {
      // A full disk must not stop supervision: the engines keep running, only adoption after a crash suffers.
      this.#log.error({ actor: r.actor, error: e }, 'agent.bookkeeping_failed');
    }
    const shown = publicRecord(r);
    this.board.record(shown);
    this.#o.onRecord?.(shown);
  }

  #track(r: InspectRecord): void {
    if (r.kind !== 'snapshot') return;
    this.#latest.set(r.actor, r);
    if (r.machine === 'shard' && isShardContext(r.context)) this.#onShard(r, r.context);
    else if (r.machine === 'replica' && isReplicaContext(r.context)) this.#onReplica(r, r.context);
  }

  #onShard(r: SnapshotRecord, c: ShardContext): void {
    const id = c.spec.shardId;
    const phase: ShardPhase = r.status === 'done' ? 'stopped' : shardPhaseOf(r.value);
    const before = this.#logged.get(r.actor);
    if (before?.phase !== phase) {
      this.#logged.set(r.actor, { phase, at: r.at, tail: c.tail.length });
      const fields = {
        shard: id,
        replica: c.spec.replicaId,
        from: before?.phase ?? null,
        to: phase,
        tookMs: before === undefined ? null : r.at - before.at,
        reason: c.reason ?? null,
        restarts: c.restarts,
      };
      if (phase === 'failed') this.#log.warn({ ...fields, detail: c.detail ?? null, tail: c.tail }, 'shard.transition');
      else if (phase === 'cpu-fallback') this.#log.error({ ...fields, detail: c.detail ?? null, devices: c.devices ?? [] }, 'shard.transition');
      else this.#log.info(fields, 'shard.transition');
    } else if (phase === 'failed' && c.tail.length > 0 && c.tail.length !== before.tail) {
      // The log is read once the shard has failed (a timeout of ours has no exit to carry it).
      this.#logged.set(r.actor, { ...before, tail: c.tail.length });
      this.#log.warn({ shard: id, replica: c.spec.replicaId, tail: c.tail }, 'shard.output');
    }
    if (r.status === 'done' || phase === 'stopped') {
      this.#state.remove(id);
      this.#written.delete(id);
      return;
    }
    if (c.processes.length === 0) return;
    const replica = this.#replicaOfShard.get(id);
    if (replica === undefined) return;
    const fingerprint = shardFingerprint(c.spec, c.commands);
    const key = JSON.stringify([fingerprint, c.processes]);
    if (this.#written.get(id) === key) return;
    this.#written.set(id, key);
    const { shards: _shards, retire: _retire, ...rest } = replica;
    const { adopt: _adopt, ...shardRest } = c;
    const shard: ShardInput = {
      spec: shardRest.spec,
      commands: shardRest.commands,
      servesHttp: shardRest.servesHttp,
      healthUrl: shardRest.healthUrl,
      deviceCheck: shardRest.deviceCheck,
      logPath: shardRest.logPath,
      policy: shardRest.policy,
      timing: shardRest.timing,
      tailLines: shardRest.tailLines,
      adopt: undefined,
      jitterSeed: shardRest.jitterSeed,
    };
    this.#state.write({ version: 1, replica: rest, shard, fingerprint, processes: c.processes });
  }

  #onReplica(r: SnapshotRecord, c: ReplicaContext): void {
    const routable = r.status === 'active' && r.tags.includes('routable') && c.url !== undefined;
    const had = this.#ready.get(c.replicaId);
    if (r.status === 'done' && !c.retire) this.#sink.forget(c.replicaId);
    if (routable && c.url !== undefined && !c.retire) {
      if (had?.generation === c.generation) return;
      this.#ready.set(c.replicaId, {
        id: c.replicaId,
        node: c.node,
        model: c.model,
        adapters: c.adapters,
        url: new URL(c.url),
        apiKey: c.apiKey === '' ? undefined : c.apiKey,
        generation: c.generation,
        kvEvents: c.kvEvents,
        blockSizeTokens: c.blockSizeTokens,
        hashSeed: c.hashSeed,
        dataParallelSize: c.dataParallelSize,
        adapterAccess: this.#adapterAccess.get(c.replicaId),
        schedulesByPriority: c.schedulesByPriority,
        disagg: this.#disagg.get(c.replicaId),
        ...(this.#embedders.has(c.replicaId) ? { embeds: true } : {}),
      });
    } else if (had !== undefined) {
      this.#ready.delete(c.replicaId);
    } else return;
    for (const l of this.#listeners) l();
  }

  /** Ready replicas serving `model`, by served name or adapter (the gateway's ReplicaDirectory). */
  ready(model: string): readonly ReadyReplica[] {
    return [...this.#ready.values()].filter((r) => r.model === model || r.adapters.includes(model));
  }

  /** Every model this node is configured to serve, ready or not. */
  models(): readonly string[] {
    return this.#models;
  }

  /** Every adapter this node is configured to serve, with its base model. */
  adapters(): readonly { readonly name: string; readonly base: string }[] {
    return this.#adapters;
  }

  /** Calls `listener` whenever the set of ready replicas changes; returns the unsubscribe. */
  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** The phase of any actor by system id (`replica:<id>`, `shard:<id>`, `publisher:<id>`), undefined if unknown. */
  phaseOf(actor: string): string | undefined {
    return this.board.get(actor)?.phase;
  }

  /** The process ids of a shard's running processes, from its latest state. */
  pidsOf(shardId: string): number[] {
    const c = this.#latest.get(`shard:${shardId}`)?.context;
    return isShardContext(c) ? c.processes.map((p) => p.pid) : [];
  }

  /** The last lines of a shard's log file. */
  tail(shardId: string, lines = this.#o.config.tailLines): string[] {
    return readTail(join(this.#o.config.logDir, `${encodeURIComponent(shardId)}.log`), lines);
  }

  /** Rotates every known shard's log that is past agent.log_max_bytes; runs on a timer, callable for tests. */
  rotateLogs(): void {
    const { logMaxBytes: maxBytes, logKeep: keep } = this.#o.config;
    const paths = new Set([...this.#replicaOfShard.values()].flatMap((r) => r.shards.map((s) => s.logPath)));
    for (const path of paths) {
      try {
        if (rotateLog(path, { maxBytes, keep })) this.#log.info({ path, maxBytes, keep }, 'agent.log.rotated');
      } catch (e) {
        // A full disk or a permission problem: the engine keeps running and logging, unrotated.
        this.#log.warn({ path, err: e }, 'agent.log.rotate_failed');
      }
    }
  }

  /** Drains every replica and stops its processes; resolves once all are stopped. Idempotent. */
  close(): Promise<void> {
    return (this.#closing ??= this.#shutdown());
  }

  /** Starts again the shards of `replicaId` that gave up after too many restarts. */
  restart(replicaId: string): void {
    this.#root?.send({ type: 'restart', replicaId });
  }

  /** Stops every process now, without waiting for in-flight requests: the second signal. */
  stopNow(): void {
    this.#root?.send({ type: 'stop' });
  }

  async #shutdown(): Promise<void> {
    clearInterval(this.#rotation);
    const root = this.#root;
    if (root === undefined) return;
    root.send({ type: 'drain' });
    // Bounded by each shard's drain and kill bounds; the machines own those waits.
    await waitFor(root, (s) => s.status === 'done', { timeout: Infinity });
    root.stop();
  }
}
