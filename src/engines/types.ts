// The shapes command construction works on. Field names follow the reference design (camelCase of
// the Go), so a reader of the seeds finds each one.

/** A LoRA adapter loaded beside the model. Its index in the profile is the id requests apply it by. */
export interface Adapter {
  readonly name: string;
  readonly path: string;
}

/** What a profile's replicas serve: chat and completions, or /v1/embeddings. */
export type ModelTask = 'generate' | 'embed';

/** How an embedding model pools a prompt into one vector. */
export type Pooling = 'mean' | 'cls' | 'last';

/** What a replica does in a disaggregated pool: only prefill, only decode, or either. */
export type DisaggRole = 'prefill' | 'decode' | 'both';

/** How a model runs on a GPU class: the catalog profile, reduced to what launching needs. */
export interface Profile {
  readonly name: string;
  readonly engine: string;
  readonly gpuClass: string;
  /** Tensor-parallel degree. */
  readonly tp: number;
  /** Pipeline-parallel degree. */
  readonly pp: number;
  /** GPUs each shard occupies; 0 means tp. */
  readonly gpusPerNode: number;
  /** Nodes the replica spans; above 1 a fabric is required. */
  readonly nodes: number;
  /** Passed to the engine untouched, after everything llmgw generates, so they can override it. */
  readonly args: readonly string[];
  /** Overrides the generated environment, minus the keys `unsafeEnv` refuses. */
  readonly env: Readonly<Record<string, string>>;
  readonly modelPath: string;
  /** The name clients use, which need not match the path. */
  readonly servedModelName: string;
  readonly adapters: readonly Adapter[];
  /** Adapters are loaded on demand by the router rather than registered at start. */
  readonly runtimeLora: boolean;
  /** The engine publishes its KV-cache events to the agent, for the router's precise index. */
  readonly kvEvents: boolean;
  /** Its part in prefill/decode disaggregation; absent: it serves whole requests and moves no KV cache. */
  readonly role?: DisaggRole | undefined;
  /** SGLang's bootstrap server port for a prefill role (its --disaggregation-bootstrap-port). */
  readonly bootstrapPort?: number | undefined;
  /** The reasoning parser, in vLLM's names (qwen3, deepseek_r1, ...); absent or empty: none. */
  readonly reasoningParser?: string | undefined;
  /** 'embed': the replicas serve /v1/embeddings (each engine's pooling mode); absent: they generate. */
  readonly task?: ModelTask | undefined;
  /** The pooling an embedding model runs with; absent: the model's own. */
  readonly pooling?: Pooling | undefined;
}

/** One shard of one replica on this node: everything a builder needs, decided by placement. */
export interface ShardSpec {
  readonly replicaId: string;
  readonly shardId: string;
  /** Node rank; 0 is the leader and serves HTTP. */
  readonly rank: number;
  readonly nNodes: number;
  /** The distributed-init endpoint, on the management network: NCCL bootstraps over TCP first. */
  readonly leaderAddr: string;
  readonly leaderPort: number;
  /** Local GPUs by nvidia-smi index (MIG instances: 1000 + 100 x card + instance, which CUDA does not know). */
  readonly gpuIndices: readonly number[];
  /** The same devices by UUID, set only when one is a MIG instance: the only name CUDA opens one by. */
  readonly gpuUuids: readonly string[];
  /** Adapters of the chosen fabric, and only that fabric. */
  readonly hcas: readonly string[];
  /** Ethernet interface for bootstrap traffic. */
  readonly mgmtInterface: string;
  /** RoCE v2 GID index; undefined on InfiniBand, where NCCL needs none. */
  readonly gidIndex: number | undefined;
  readonly httpPort: number;
  readonly profile: Profile;
  /** Address the engine listens on; empty listens on every address. */
  readonly bindAddr: string;
  /** What the engine demands of every request; passed in its environment, never on its command line. */
  readonly apiKey: string;
  /** Loopback port the agent receives this shard's KV events on; 0 when it publishes none. */
  readonly kvEventsPort: number;
  /** Loopback port the engine binds its KV-event replay socket on (the agent's DEALER connects); 0 for none.
   * Data-parallel rank r uses kvEventsPort + r and kvReplayPort + r, as vLLM offsets both. */
  readonly kvReplayPort: number;
  /** Directory (mode 0700, the agent's user) where the engine binds its KV event and replay sockets
   * as ipc://; absent or empty: loopback TCP on the ports above (data-parallel engines, whose ranks
   * above 0 vLLM refuses to put on ipc://). The ports still name the sockets, so they stay unique. */
  readonly kvIpcDir?: string;
  /** CPU cores reserved for a shard with no GPU; 0 leaves it to the engine's configuration. */
  readonly threads: number;
  /** Control-plane facts carried for reporting back after a restart; `nvl:` marks a multi-node NVLink domain. */
  readonly pool: string;
  readonly fabric: string;
  /** Fingerprint of the profile version this shard was started from. */
  readonly profileFp: string;
}

/** A fully resolved launch: what to exec, with exactly which environment. */
export interface Command {
  /** Distinguishes the processes of a multi-process shard in logs. */
  readonly name: string;
  readonly path: string;
  readonly args: readonly string[];
  /** The complete environment, sorted by key: what runs is exactly what `llmgw plan` prints. */
  readonly env: readonly (readonly [string, string])[];
  /** Hold the next command until leaderAddr:leaderPort accepts a connection (Ray's head). */
  readonly waitForLeaderPort: boolean;
  /** The keys of `env` llmgw generated (CUDA, NCCL, keys, profile overrides), sorted; the rest is inherited. */
  readonly generated: readonly string[];
}

/** The GPU facts validation needs. */
export interface GpuInfo {
  readonly index: number;
  readonly name: string;
  /** "8.9"; empty or unparsable when unknown. */
  readonly computeCapability: string;
  /** Undefined when the driver would not say: unknown is never zero. */
  readonly memoryTotalMb: number | undefined;
}

/** What a builder needs to know about the host, passed in rather than read. */
export interface Host {
  /** The environment the agent inherited; engines need PATH, HOME, HF_HOME and the like. */
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly cpus: number;
  /** The names of the files in `path` when it is a directory, undefined when it is a file or missing.
   * Absent: model paths are taken as they are written (llama.cpp's GGUF directory lookup is skipped). */
  readonly listDir?: (path: string) => readonly string[] | undefined;
  /** How to run this llmgw (e.g. node and dist/src/cli/main.js): the `sim` engine's default program. */
  readonly llmgwCommand?: readonly string[];
}

/** Builds the launch commands of one inference engine. Pure: starts nothing, reads nothing. */
export interface Engine {
  /** The engine's identifier in the catalog. */
  readonly name: string;
  /** Rejects a profile that cannot work on these GPUs, before anything starts. */
  validate(profile: Profile, gpus: readonly GpuInfo[]): void;
  /** The processes of one shard in start order; all but the last are sidecars living as long as the shard. */
  commands(spec: ShardSpec, host: Host): readonly Command[];
  /** Whether this rank answers the OpenAI API: health-checking a worker that does not would fail it. */
  servesHttp(spec: ShardSpec): boolean;
  readonly healthPath: string;
  readonly metricsPath: string;
}

/** An engine that can come up on the CPU when placed on GPUs and serve there without an error
 * (llama.cpp): the agent checks such a shard sees its GPUs before calling it ready. */
export interface CpuFallback {
  readonly fallsBackToCpu: true;
  /** The engine's own device listing, run with the shard's environment so it lists what the shard sees. */
  listDevicesCommand(spec: ShardSpec, host: Host): Command;
  /** The devices in that listing's output; empty on a GPU placement means the GPU backend did not load. */
  parseDevices(out: string): string[];
}

/** An engine whose program is not asked for help by running its path with --help, because the path is
 * an interpreter starting it through a launcher module. */
export interface HelpCommand {
  helpCommand(cmd: Command): { readonly path: string; readonly args: readonly string[] };
}

/** An engine that can publish its KV-cache events to the agent, so placement gives it event ports. */
export interface KvEventsPublisher {
  readonly publishesKvEvents: true;
}

/** True when the engine may silently fall back to CPU, so its readiness needs a device check. */
export const canFallBackToCpu = (e: Engine): e is Engine & CpuFallback => 'fallsBackToCpu' in e;

/** True when the engine's help comes from a command other than `path --help`. */
export const hasHelpCommand = (e: Engine): e is Engine & HelpCommand => 'helpCommand' in e;

/** True when the engine publishes KV-cache events when its profile asks. */
export const publishesKvEvents = (e: Engine): e is Engine & KvEventsPublisher => 'publishesKvEvents' in e;
