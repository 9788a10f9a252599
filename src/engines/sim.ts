// The simulated engine: this llmgw's own `sim serve`, launched through the same interface as the real
// ones, speaking vLLM's API and publishing vLLM's KV events with vLLM's flags and environment.
import { LlmgwError } from '../errors/index.js';
import type { KvEventsConfig, SimConfig } from './config.js';
import { vllmKvTransferArgs } from './disagg.js';
import { baseEnv, isLeader, listenHost, materializeEnv } from './env.js';
import { vllmKvEventsArgs, vllmKvEventsEnv } from './kv-events.js';
import { vllmAdapterAccess, type AdapterAccess, type ServesAdapters } from './lora.js';
import type { Command, Engine, GpuInfo, Host, KvEventsPublisher, Profile, ShardSpec } from './types.js';
import { validateCommon } from './validate.js';
import { loraModules, schedulingPolicyArgs } from './vllm.js';
import { reasoningParserArgs, validateSimReasoningParser } from './reasoning.js';
import { embeddingArgs, validateTask } from './embedding.js';

/** Builds `llmgw sim serve` commands. */
export class Sim implements Engine, KvEventsPublisher, ServesAdapters {
  readonly name = 'sim';
  readonly healthPath = '/health';
  readonly metricsPath = '/metrics';
  readonly publishesKvEvents = true;
  readonly #cfg: SimConfig;
  readonly #kv: KvEventsConfig;

  constructor(cfg: SimConfig, kv: KvEventsConfig) {
    this.#cfg = cfg;
    this.#kv = kv;
  }

  /** As vLLM: the sim serves its adapters through vLLM's routes. */
  adapterAccess(profile: Profile): AdapterAccess {
    return vllmAdapterAccess(profile);
  }

  /** The sim spans nodes as vLLM does under its mp launcher, so the same profile checks apply. */
  validate(profile: Profile, gpus: readonly GpuInfo[]): void {
    validateCommon(profile, gpus);
    validateSimReasoningParser(profile);
    validateTask('sim', profile);
  }

  servesHttp(spec: ShardSpec): boolean {
    return isLeader(spec);
  }

  commands(spec: ShardSpec, host: Host): readonly Command[] {
    const p = spec.profile;
    const program = this.#program(host);
    const [path, ...pre] = program;
    if (path === undefined) throw this.#noProgram();
    const args = [
      ...pre,
      'sim',
      'serve',
      p.modelPath,
      '--host',
      listenHost(spec),
      '--port',
      String(spec.httpPort),
      // vLLM's default is the model path; the sim wants the name said.
      '--served-model-name',
      p.servedModelName !== '' ? p.servedModelName : p.modelPath,
      '--block-size',
      String(this.#cfg.blockSize),
    ];
    if (spec.nNodes > 1) {
      // vLLM's multi-node flags under its mp launcher, which the sim plays: every node runs serve
      // with its rank and the leader's address; workers are headless.
      args.push('--nnodes', String(spec.nNodes), '--node-rank', String(spec.rank), '--master-addr', spec.leaderAddr, '--master-port', String(spec.leaderPort));
      if (!isLeader(spec)) args.push('--headless');
    }
    const env = baseEnv(spec);
    if (p.kvEvents && spec.kvEventsPort > 0 && isLeader(spec)) {
      args.push(...vllmKvEventsArgs(spec, this.#kv));
      Object.assign(env, vllmKvEventsEnv(this.#kv));
    }
    // Always seeded, not only with events: the sim's block hashes are then reproducible in every test.
    env.PYTHONHASHSEED = this.#kv.hashSeed;
    if (!p.runtimeLora) args.push(...loraModules(p.adapters));
    // As vLLM: the routes that load and unload adapters exist only when this is set.
    else if (p.adapters.length > 0) env.VLLM_ALLOW_RUNTIME_LORA_UPDATING = 'True';
    // The sim plays vLLM's NIXL roles from the same flag vLLM reads.
    args.push(...reasoningParserArgs('sim', p), ...embeddingArgs('sim', p), ...schedulingPolicyArgs(p.args), ...vllmKvTransferArgs(p), ...p.args);
    if (spec.apiKey !== '') env.VLLM_API_KEY = spec.apiKey;
    return [{ name: 'sim', path, args, ...materializeEnv(env, host), waitForLeaderPort: false }];
  }

  #program(host: Host): readonly string[] {
    if (this.#cfg.bin !== '') return [this.#cfg.bin];
    return host.llmgwCommand ?? [];
  }

  #noProgram(): LlmgwError {
    return new LlmgwError('LLMGW_SIM_BIN', 'engines.sim.bin is empty and the host did not say how to run this llmgw; write engines.sim.bin: /path/to/llmgw');
  }
}
