// vLLM: single node, multi-node under its own multiprocessing launcher or under Ray, LoRA adapters at
// start or on demand, and KV-cache events for the router's precise index.
import { LlmgwError } from '../errors/index.js';
import { flagValue, hasFlag } from './argv.js';
import { vllmKvTransferArgs } from './disagg.js';
import type { KvEventsConfig, VllmConfig } from './config.js';
import { baseEnv, isLeader, listenHost, materializeEnv } from './env.js';
import { vllmKvEventsArgs, vllmKvEventsEnv } from './kv-events.js';
import { vllmAdapterAccess, type AdapterAccess, type ServesAdapters } from './lora.js';
import type { Adapter, Command, Engine, GpuInfo, Host, KvEventsPublisher, Profile, ShardSpec } from './types.js';
import { quantizationOf, requireComputeCapability, validateCommon } from './validate.js';
import { reasoningParserArgs } from './reasoning.js';
import { embeddingArgs, validateTask } from './embedding.js';

/** `--lora-modules name=path ...`: registered under their names, so a request names one as its model. */
export function loraModules(adapters: readonly Adapter[]): string[] {
  return adapters.length === 0 ? [] : ['--lora-modules', ...adapters.map((a) => `${a.name}=${a.path}`)];
}

/**
 * `--scheduling-policy priority` unless the profile chooses a policy itself: the gateway's admission
 * sends each request's class as vLLM's `priority`, so an interactive request overtakes batch work
 * already queued in the engine too. Requests without a priority keep vLLM's default of 0, so
 * clients that bypass the gateway are served first come first served as before.
 */
export function schedulingPolicyArgs(profileArgs: readonly string[]): string[] {
  return hasFlag(profileArgs, '--scheduling-policy') ? [] : ['--scheduling-policy', 'priority'];
}

/** The policy such an engine runs with those profile arguments (the gateway sends `priority` only under `priority`). */
export const schedulingPolicyOf = (profileArgs: readonly string[]): string => flagValue(profileArgs, '--scheduling-policy') ?? 'priority';

/** Builds vLLM launch commands. */
export class Vllm implements Engine, KvEventsPublisher, ServesAdapters {
  readonly name = 'vllm';
  readonly healthPath = '/health';
  readonly metricsPath = '/metrics';
  readonly publishesKvEvents = true;
  readonly #cfg: VllmConfig;
  readonly #kv: KvEventsConfig;
  #installed: string | undefined;

  constructor(cfg: VllmConfig, kv: KvEventsConfig) {
    this.#cfg = cfg;
    this.#kv = kv;
  }

  /** Points the engine at the environment the agent installed and checked. It wins over the
   * configuration, as llama.cpp's does: it is the one seen to run. */
  useInstalled(path: string): void {
    this.#installed = path;
  }

  /** The vllm to run: the installed one, else the configured one, else whatever PATH has. */
  bin(): string {
    return this.#installed ?? (this.#cfg.bin !== '' ? this.#cfg.bin : 'vllm');
  }

  /** By name as the request's model; on demand through /v1/load_lora_adapter. */
  adapterAccess(profile: Profile): AdapterAccess {
    return vllmAdapterAccess(profile);
  }

  validate(profile: Profile, gpus: readonly GpuInfo[]): void {
    validateCommon(profile, gpus);
    validateTask('vllm', profile);
    // FP8 needs Ada or Hopper; on anything older vLLM either refuses or silently falls back to a
    // slower path, and a silent fallback is worse.
    if (quantizationOf(profile.args) === 'fp8') requireComputeCapability(profile, gpus, 8.9, 'fp8 quantization');
  }

  /** Only the leader answers: under Ray a worker runs nothing but the join, under mp only the driver
   * binds the port. */
  servesHttp(spec: ShardSpec): boolean {
    return isLeader(spec);
  }

  /** One server process; under Ray the leader runs a head and then the server, a worker only the
   * join (the cluster gives the leader its GPUs, so a worker running no vLLM process is correct). */
  commands(spec: ShardSpec, host: Host): readonly Command[] {
    const ray = this.#rayCommand(spec, host);
    // A Ray worker is the join and nothing else. It blocks, so its exit is the shard's exit.
    if (ray !== undefined && !isLeader(spec)) return [ray];
    const server = this.#serverCommand(spec, host);
    return ray !== undefined ? [ray, server] : [server];
  }

  #usesRay(spec: ShardSpec): boolean {
    return spec.nNodes > 1 && this.#cfg.launchMode === 'ray';
  }

  #serverCommand(spec: ShardSpec, host: Host): Command {
    const p = spec.profile;
    const args = ['serve', p.modelPath, '--host', listenHost(spec), '--port', String(spec.httpPort), '--tensor-parallel-size', String(p.tp)];
    if (p.pp > 1) args.push('--pipeline-parallel-size', String(p.pp));
    if (p.servedModelName !== '') args.push('--served-model-name', p.servedModelName);
    args.push(...reasoningParserArgs('vllm', p), ...embeddingArgs('vllm', p));
    const env = baseEnv(spec);
    if (spec.nNodes > 1) {
      const mode = this.#cfg.launchMode;
      if (mode === 'ray') {
        // Ray was started by the command before this one; vLLM finds the cluster by these.
        env.VLLM_HOST_IP = spec.leaderAddr;
        env.RAY_ADDRESS = `${spec.leaderAddr}:${spec.leaderPort}`;
        args.push('--distributed-executor-backend', 'ray');
      } else if (mode === '' || mode === 'mp') {
        // vLLM's own multi-node launch: every node runs the same serve with its rank and the leader's
        // address; workers run headless (no API server, only their GPUs). VLLM_HOST_IP is this node's
        // own address for vLLM to find, so it is left to vLLM: given the leader's, which workers once
        // were, every worker announced itself as the leader.
        args.push(
          '--distributed-executor-backend',
          'mp',
          '--nnodes',
          String(spec.nNodes),
          '--node-rank',
          String(spec.rank),
          '--master-addr',
          spec.leaderAddr,
          '--master-port',
          String(spec.leaderPort),
        );
        if (!isLeader(spec)) args.push('--headless');
      } else {
        throw new LlmgwError(
          'LLMGW_LAUNCH_MODE',
          `engines.vllm.launch_mode: ${JSON.stringify(mode)} is not "mp" or "ray"; write launch_mode: mp (the default) or ray`,
        );
      }
    }
    if (p.adapters.length > 0) {
      // At start, adapters are registered under their names. On demand (runtime_lora) they start
      // unregistered and the router loads each through vLLM's /v1/load_lora_adapter when a request
      // first wants it, which vLLM allows only with VLLM_ALLOW_RUNTIME_LORA_UPDATING set. --max-loras
      // stays vLLM's default of one: raise it in the profile's args to mix more adapters in a batch.
      args.push('--enable-lora');
      if (p.runtimeLora) env.VLLM_ALLOW_RUNTIME_LORA_UPDATING = 'True';
      else args.push(...loraModules(p.adapters));
    }
    // Published to the agent on loopback and hashed the way the gateway hashes. Only the leader has a
    // scheduler to publish from, and without a port the agent is not listening.
    if (p.kvEvents && spec.kvEventsPort > 0 && isLeader(spec)) {
      args.push(...vllmKvEventsArgs(spec, this.#kv));
      Object.assign(env, vllmKvEventsEnv(this.#kv));
    }
    args.push(...schedulingPolicyArgs(p.args), ...vllmKvTransferArgs(p));
    // Profile args last, so an operator can override anything above.
    args.push(...p.args);
    // In the environment, never on the command line, which every user on the node can read.
    if (spec.apiKey !== '') env.VLLM_API_KEY = spec.apiKey;
    return { name: 'vllm', path: this.bin(), args, ...materializeEnv(env, host), waitForLeaderPort: false };
  }

  #rayCommand(spec: ShardSpec, host: Host): Command | undefined {
    if (!this.#usesRay(spec)) return undefined;
    const args = ['start', '--block'];
    if (isLeader(spec)) {
      // Ray's head has no authentication: whoever reaches its port can run code on the node. Its
      // dashboard, and the job API behind it, is the easiest way in, and nothing here uses it.
      args.push('--head', '--port', String(spec.leaderPort), '--include-dashboard=false');
    } else {
      args.push('--address', `${spec.leaderAddr}:${spec.leaderPort}`);
    }
    args.push('--num-gpus', String(spec.gpuIndices.length));
    return {
      name: 'ray',
      path: this.#cfg.rayBin !== '' ? this.#cfg.rayBin : 'ray',
      args,
      ...materializeEnv(baseEnv(spec), host),
      // The head must listen before anything else happens: a worker cannot join, and the leader's
      // server cannot claim GPUs, until it does.
      waitForLeaderPort: true,
    };
  }
}
