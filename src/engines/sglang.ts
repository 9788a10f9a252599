// SGLang, from its documented launch options (no seed): `python -m sglang.launch_server`, multi-node
// through its own dist-init address, LoRA adapters at start or on demand.
import { hasFlag } from './argv.js';
import type { SglangConfig } from './config.js';
import { sglangDisaggArgs } from './disagg.js';
import { baseEnv, isLeader, listenHost, materializeEnv } from './env.js';
import { sglangAdapterAccess, type AdapterAccess, type ServesAdapters } from './lora.js';
import type { Command, Engine, GpuInfo, HelpCommand, Host, Profile, ShardSpec } from './types.js';
import { validateCommon } from './validate.js';
import { reasoningParserArgs } from './reasoning.js';
import { embeddingArgs, validateTask } from './embedding.js';

/** The launcher module SGLang's server runs as. */
const launcher = 'sglang.launch_server';

/** The variable the key travels in, from the agent to the bootstrap below. */
export const sglangKeyVar = 'LLMGW_SGLANG_API_KEY';

// SGLang takes its API key only as --api-key, and a command line is readable by every user on the
// node (/proc/<pid>/cmdline, ps). So with a key the interpreter runs this bootstrap instead of `-m`:
// it moves the key from the environment (readable only by the process's own user and root) into
// sys.argv inside the process, which the kernel's copy of the command line never sees, drops it from
// the environment so SGLang's own children do not inherit it, and runs the launcher as __main__.
const keyBootstrap = [
  'import os, runpy, sys',
  `sys.argv[1:1] = ["--api-key", os.environ.pop("${sglangKeyVar}")]`,
  `runpy.run_module("${launcher}", run_name="__main__", alter_sys=True)`,
].join('; ');

/** Builds SGLang launch commands. */
export class Sglang implements Engine, HelpCommand, ServesAdapters {
  readonly name = 'sglang';
  readonly healthPath = '/health';
  /** Exists only with --enable-metrics, which commands passes unless the profile does. */
  readonly metricsPath = '/metrics';
  readonly #cfg: SglangConfig;

  constructor(cfg: SglangConfig) {
    this.#cfg = cfg;
  }

  /** By `lora_path` beside the base model's name; on demand through /load_lora_adapter. */
  adapterAccess(profile: Profile): AdapterAccess {
    return sglangAdapterAccess(profile);
  }

  validate(profile: Profile, gpus: readonly GpuInfo[]): void {
    validateCommon(profile, gpus);
    validateTask('sglang', profile);
  }

  /** Only rank 0 runs the HTTP server; the other nodes run schedulers for their GPUs. */
  servesHttp(spec: ShardSpec): boolean {
    return isLeader(spec);
  }

  commands(spec: ShardSpec, host: Host): readonly Command[] {
    const p = spec.profile;
    const env = baseEnv(spec);
    const start = spec.apiKey !== '' ? ['-c', keyBootstrap] : ['-m', launcher];
    if (spec.apiKey !== '') env[sglangKeyVar] = spec.apiKey;
    // --tp-size is the whole replica's degree, across nodes, as in vLLM.
    const args = [...start, '--model-path', p.modelPath, '--host', listenHost(spec), '--port', String(spec.httpPort), '--tp-size', String(p.tp)];
    if (p.pp > 1) args.push('--pp-size', String(p.pp));
    if (p.servedModelName !== '') args.push('--served-model-name', p.servedModelName);
    args.push(...reasoningParserArgs('sglang', p), ...embeddingArgs('sglang', p));
    if (spec.nNodes > 1) {
      // SGLang's own multi-node launch: every node runs the same command with its rank and the
      // leader's address, which is on the management network (NCCL bootstraps over TCP first).
      args.push('--nnodes', String(spec.nNodes), '--node-rank', String(spec.rank), '--dist-init-addr', `${spec.leaderAddr}:${spec.leaderPort}`);
    }
    // An endpoint the router cannot measure is one it routes to blind.
    if (!hasFlag(p.args, '--enable-metrics')) args.push('--enable-metrics');
    if (p.adapters.length > 0) {
      // At start, registered under their names (newer SGLang infers --enable-lora from them, older
      // needs nothing else). On demand they start unloaded and the router loads each through
      // /load_lora_adapter, which needs LoRA switched on at start.
      if (p.runtimeLora) args.push('--enable-lora');
      else args.push('--lora-paths', ...p.adapters.map((a) => `${a.name}=${a.path}`));
    }
    args.push(...sglangDisaggArgs(p), ...p.args);
    return [{ name: 'sglang', path: this.#cfg.python !== '' ? this.#cfg.python : 'python3', args, ...materializeEnv(env, host), waitForLeaderPort: false }];
  }

  /** The launcher's help, through the interpreter the command runs (its path is python, not SGLang). */
  helpCommand(cmd: Command): { path: string; args: readonly string[] } {
    return { path: cmd.path, args: ['-m', launcher, '--help'] };
  }
}
