// TensorRT-LLM's trtllm-serve, from its documented options (no seed). The agent does not install it:
// a node offers it only when engines.trtllm.python names the interpreter it is installed under.
import type { TrtllmConfig } from './config.js';
import { baseEnv, listenHost, materializeEnv } from './env.js';
import type { Command, Engine, GpuInfo, HelpCommand, Host, Profile, ShardSpec } from './types.js';
import { ProfileError, validateCommon } from './validate.js';
import { reasoningParserArgs } from './reasoning.js';
import { validateTask } from './embedding.js';

/** The module behind the trtllm-serve entry point; run with -m it is the same program. */
const serveModule = 'tensorrt_llm.commands.serve';

/** Builds TensorRT-LLM launch commands. */
export class Trtllm implements Engine, HelpCommand {
  readonly name = 'trtllm';
  readonly healthPath = '/health';
  readonly metricsPath = '/metrics';
  readonly #cfg: TrtllmConfig;

  constructor(cfg: TrtllmConfig) {
    this.#cfg = cfg;
  }

  validate(profile: Profile, gpus: readonly GpuInfo[]): void {
    const name = JSON.stringify(profile.name);
    if (this.#cfg.python === '') {
      throw new ProfileError(
        'engine',
        `profile ${name}: trtllm is offered only where its interpreter is configured, and engines.trtllm.python is empty; ` +
          `write engines.trtllm.python: /path/to/venv/bin/python3 on nodes that have TensorRT-LLM, or use another engine`,
      );
    }
    // trtllm-serve spans nodes only under MPI (mpirun or a Slurm launcher), which llmgw does not drive.
    if (profile.nodes > 1) {
      throw new ProfileError('nodes', `profile ${name}: trtllm replicas run on one node here; write nodes: 1, or use vllm or sglang for a ${profile.nodes}-node replica`);
    }
    // Its LoRA adapters come through an --extra_llm_api_options file, not flags llmgw can build.
    if (profile.adapters.length > 0) {
      throw new ProfileError('adapters', `profile ${name}: trtllm takes LoRA adapters only through its --extra_llm_api_options file; remove adapters and pass that file in args`);
    }
    validateCommon(profile, gpus);
    validateTask('trtllm', profile);
  }

  servesHttp(_spec: ShardSpec): boolean {
    return true;
  }

  commands(spec: ShardSpec, host: Host): readonly Command[] {
    const p = spec.profile;
    // The model comes first and the serve subcommand is left implicit: newer trtllm-serve treats a
    // first argument that is not a subcommand as `serve`, older ones have no subcommands at all.
    const args = ['-m', serveModule, p.modelPath, '--host', listenHost(spec), '--port', String(spec.httpPort), '--tp_size', String(p.tp)];
    if (p.pp > 1) args.push('--pp_size', String(p.pp));
    if (p.servedModelName !== '') args.push('--served_model_name', p.servedModelName);
    args.push(...reasoningParserArgs('trtllm', p));
    args.push(...p.args);
    // trtllm-serve checks no API key at all, so the shard's key is not passed anywhere (and never on
    // the command line): the replica is reachable by whoever reaches its port. Bind it (node.addr) to a
    // network only the gateway reaches.
    return [{ name: 'trtllm-serve', path: this.#cfg.python, args, ...materializeEnv(baseEnv(spec), host), waitForLeaderPort: false }];
  }

  /** trtllm-serve's help through the interpreter the command runs. */
  helpCommand(cmd: Command): { path: string; args: readonly string[] } {
    return { path: cmd.path, args: ['-m', serveModule, 'serve', '--help'] };
  }
}
