// The environment every engine shares, and the rules for what a profile may add to it. This is where
// multi-node runs go wrong: one missing NCCL variable turns a working tensor-parallel group into one
// that hangs on its first all-reduce, so each rule below says which failure it prevents.
import type { Command, Host, ShardSpec } from './types.js';

/** Generated variables by name, before they are merged over the inherited environment. */
export type EnvMap = Record<string, string>;

/** Whether a profile may set an environment variable, and why not. */
export interface EnvVerdict {
  readonly refused: boolean;
  readonly why: string;
}

// The engine runs as the agent's user, often root: any of these makes it load or run code that is not
// the engine's (a preload library, a Python or Node startup hook, a shell rc file, another PATH entry).
const codeLoading: ReadonlySet<string> = new Set([
  'PYTHONPATH',
  'PYTHONHOME',
  'PYTHONSTARTUP',
  'PYTHONUSERBASE',
  'PYTHONWARNINGS', // a warning filter names a category class, which Python imports
  'NODE_OPTIONS',
  'BASH_ENV',
  'ENV',
  'PATH',
]);

// The CUDA driver loads the library these name into every process that initialises CUDA, as the
// loader does with LD_PRELOAD (profiling tools use it).
const libraryLoading: ReadonlySet<string> = new Set(['CUDA_INJECTION64_PATH', 'CUDA_INJECTION32_PATH']);

// Placement decides these; a profile overriding them puts the shard on a card another shard holds.
const placement: ReadonlySet<string> = new Set(['CUDA_VISIBLE_DEVICES', 'CUDA_DEVICE_ORDER', 'GGML_VK_VISIBLE_DEVICES']);

/** The variables engines read their API key from; llmgw sets them from the shard's key. */
export const apiKeyVars: ReadonlySet<string> = new Set(['VLLM_API_KEY', 'LLAMA_API_KEY', 'LLMGW_SGLANG_API_KEY']);

// The gateway recomputes the engine's block hashes with the configured seed and reads hashes as ints;
// a profile changing either makes every precise routing decision silently miss.
const hashing: ReadonlySet<string> = new Set(['PYTHONHASHSEED', 'VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES']);

const validName = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Whether a profile's env key is refused, and the reason an operator reads. Catalog validation reports
 * refused keys; command construction drops them again, because the profile may come from elsewhere. */
export function unsafeEnv(key: string): EnvVerdict {
  if (!validName.test(key)) {
    return { refused: true, why: `${JSON.stringify(key)} is not a variable name (letters, digits and _, not starting with a digit)` };
  }
  if (key.startsWith('LD_') || key.startsWith('DYLD_') || libraryLoading.has(key)) {
    return { refused: true, why: `${key} makes the engine load other libraries; install them where the engine finds them instead` };
  }
  if (codeLoading.has(key)) {
    return { refused: true, why: `${key} makes the engine run code that is not the engine's; set it in the agent's own environment if it is really needed` };
  }
  if (placement.has(key)) {
    return { refused: true, why: `${key} is set by placement to the shard's own devices; choose devices with gpu_class and gpus_per_node` };
  }
  if (apiKeyVars.has(key)) {
    return { refused: true, why: `${key} is the engine API key llmgw sets for each shard; it cannot come from a profile` };
  }
  if (hashing.has(key)) {
    return { refused: true, why: `${key} must match what the gateway hashes with; set kv_events.hash_seed instead` };
  }
  return { refused: false, why: '' };
}

/** Whether the shard was given a MIG instance (CUDA opens one only by its MIG- UUID). */
export function onMig(spec: ShardSpec): boolean {
  return spec.gpuUuids.some((u) => u.startsWith('MIG-'));
}

/** Where the engine listens: the node's management address, or every address when none is set. */
export function listenHost(spec: ShardSpec): string {
  return spec.bindAddr === '' ? '0.0.0.0' : spec.bindAddr;
}

/** Whether this shard is its replica's leader, which serves HTTP. */
export function isLeader(spec: ShardSpec): boolean {
  return spec.rank === 0;
}

// CUDA_VISIBLE_DEVICES: the indices placement gave, or their UUIDs when the agent named them, which it
// does for MIG instances: an instance has no index CUDA knows, and placement's 1000+ numbers mean nothing to it.
function visibleDevices(spec: ShardSpec): string {
  return spec.gpuUuids.length > 0 ? spec.gpuUuids.join(',') : spec.gpuIndices.join(',');
}

/** The generated environment every engine shares (CUDA pinning and NCCL's fabric rules), with the
 * profile's env last, minus the keys `unsafeEnv` refuses. */
export function baseEnv(spec: ShardSpec): EnvMap {
  const env: EnvMap = {
    // Pins the shard to its GPUs, so two shards on one node cannot fight over the same card. Empty
    // for a CPU shard, which hides every GPU from it rather than letting it take one.
    CUDA_VISIBLE_DEVICES: visibleDevices(spec),
    // The indices are nvidia-smi's, which counts by PCI bus; CUDA counts fastest first unless told, and
    // on a node with two kinds of GPU the shard would open a card placement gave to another shard.
    CUDA_DEVICE_ORDER: 'PCI_BUS_ID',
  };
  if (spec.hcas.length > 0) {
    // Only the chosen fabric's adapters: left unset, NCCL picks adapters of another fabric where the
    // peer is unreachable, and the job hangs instead of failing.
    env.NCCL_IB_HCA = spec.hcas.join(',');
    env.NCCL_IB_DISABLE = '0';
    // RoCE: the routable RoCE v2 entry. NCCL's default is a link-local v1 one on most hosts, and a job
    // on it hangs. InfiniBand needs none, so an undefined index sets nothing.
    if (spec.gidIndex !== undefined) env.NCCL_IB_GID_INDEX = String(spec.gidIndex);
  } else {
    // Single node or no fabric: IB is not the path, and NCCL stops looking for one instead of timing out.
    env.NCCL_IB_DISABLE = '1';
  }
  // Inside a multi-node NVLink domain NCCL carries collectives over NVLink between nodes only when
  // told to (and needs IMEX for it); otherwise it falls back to the network.
  if (spec.nNodes > 1 && spec.fabric.startsWith('nvl:')) {
    env.NCCL_MNNVL_ENABLE = '1';
    env.NCCL_CUMEM_ENABLE = '1';
  }
  if (spec.mgmtInterface !== '') {
    // Bootstrap on the management interface: NCCL otherwise probes every interface, including
    // IB-over-IP addresses that cannot route between fabrics.
    env.NCCL_SOCKET_IFNAME = spec.mgmtInterface;
    env.GLOO_SOCKET_IFNAME = spec.mgmtInterface;
  }
  // Profile overrides win: the escape hatch for per-cluster tuning no builder can guess. Checked again
  // here, not only in catalog validation: this is the process about to run, whatever sent the profile.
  for (const [k, v] of Object.entries(spec.profile.env)) {
    if (!unsafeEnv(k).refused) env[k] = v;
  }
  return env;
}

/** The environment a shard with this spec is given, for a tool showing an operator what an engine sees. */
export function ncclEnv(spec: ShardSpec): EnvMap {
  return baseEnv(spec);
}

/** The complete environment: the host's, with the generated variables over it, sorted by key so a
 * command is reproducible and diffable. Inheriting matters: engines need PATH, HOME, HF_HOME and
 * whatever the operator set up for the agent. */
export function materializeEnv(generated: EnvMap, host: Host): Pick<Command, 'env' | 'generated'> {
  const merged = new Map<string, string>();
  for (const [k, v] of Object.entries(host.env)) if (v !== undefined) merged.set(k, v);
  for (const [k, v] of Object.entries(generated)) merged.set(k, v);
  const byKey = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);
  const env = [...merged.entries()].sort((a, b) => byKey(a[0], b[0]));
  return { env, generated: Object.keys(generated).sort(byKey) };
}
