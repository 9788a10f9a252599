// llama.cpp: the engine that makes a cluster without GPUs useful. It runs a small model on CPU at a
// speed fine for testing the whole path and serves the same OpenAI API, so nothing downstream can
// tell the difference. It is also the one engine that silently falls back to the CPU.
import { join } from 'node:path';
import { LlmgwError } from '../errors/index.js';
import { hasFlag } from './argv.js';
import type { LlamaCppConfig } from './config.js';
import { baseEnv, listenHost, materializeEnv, onMig } from './env.js';
import { llamaCppAdapterAccess, type AdapterAccess, type ServesAdapters } from './lora.js';
import type { Command, CpuFallback, Engine, GpuInfo, Host, Profile, ShardSpec } from './types.js';
import { ProfileError, validateCommon } from './validate.js';
import { reasoningParserArgs } from './reasoning.js';
import { embeddingArgs, validateTask } from './embedding.js';

/** The model file of a GGUF directory, and its vision projector when one lies beside it. */
export interface GgufPick {
  readonly model: string;
  readonly projector?: string;
}

const byCodeUnit = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/** Resolves a model directory from its file names. A multi-file model arrives as the directory it was
 * downloaded into; llama.cpp wants a file and, given the first part of a split GGUF, finds the rest
 * beside it. Parts are named "-00001-of-00004", so the first in sorted order is the first part. An
 * mmproj file is a vision projector, not the model: it is returned second, to load beside it. */
/** What llama-server loads for a model_path: the path itself, or the model a directory's `names` hold. */
export function modelFileOf(modelPath: string, names: readonly string[] | undefined): GgufPick {
  return names === undefined ? { model: modelPath } : pickGguf(modelPath, names);
}

export function pickGguf(dir: string, names: readonly string[]): GgufPick {
  const models: string[] = [];
  const projectors: string[] = [];
  for (const n of names) {
    const lower = n.toLowerCase();
    if (!lower.endsWith('.gguf')) continue;
    (lower.includes('mmproj') ? projectors : models).push(n);
  }
  models.sort(byCodeUnit);
  projectors.sort(byCodeUnit);
  const model = models[0];
  if (model === undefined) {
    const what = projectors.length > 0 ? 'a vision projector (mmproj) and no model' : 'no .gguf file';
    throw new LlmgwError('LLMGW_GGUF', `model_path ${dir} holds ${what}; point model_path at a directory or file with the model's .gguf`);
  }
  const projector = projectors[0];
  return projector === undefined ? { model: join(dir, model) } : { model: join(dir, model), projector: join(dir, projector) };
}

/** The devices a `--list-devices` output names, e.g. "CUDA0: NVIDIA L4 (22994 MiB, 22713 MiB free)":
 * the indented lines after "Available devices:". Older builds print only the header when there are
 * none, newer ones "(none)". The listing ends at the first line that is not indented, because with
 * stdout and stderr captured together the backend's own log ("ggml_cuda_init: ...", then its indented
 * "Device 0: ..." lines) can follow it, and those are not devices. */
export function parseDevices(out: string): string[] {
  const devices: string[] = [];
  let listing = false;
  for (const raw of out.split(/\r?\n/)) {
    const line = raw.trimEnd();
    if (line.trim() === '') continue;
    if (line.trimStart().startsWith('Available devices')) {
      listing = true;
      continue;
    }
    if (!listing) continue;
    if (!/^\s/.test(line)) {
      listing = false;
      continue;
    }
    const entry = line.trim();
    if (entry === '(none)') continue;
    // "<NAME>: <description>"; the name may itself hold a colon, as in RPC[host:port].
    if (/^\S+?:\s/.test(entry)) devices.push(entry);
  }
  return devices;
}

/** Builds llama.cpp (llama-server) launch commands. */
export class LlamaCpp implements Engine, CpuFallback, ServesAdapters {
  readonly name = 'llamacpp';
  /** Answers 503 while the model loads, which is exactly what the supervisor needs. */
  readonly healthPath = '/health';
  /** Exists only with --metrics, which commands always passes. */
  readonly metricsPath = '/metrics';
  /** llama.cpp keeps running when its GPU backend does not load: it asks for layers on a GPU it then
   * has none of, comes up and answers on the CPU at a tenth of the speed, with no error anywhere. */
  readonly fallsBackToCpu = true;
  readonly #cfg: LlamaCppConfig;
  #installed: string | undefined;

  constructor(cfg: LlamaCppConfig) {
    this.#cfg = cfg;
  }

  /** Points the engine at a build the agent installed and checked; it wins over everything else,
   * being the only one seen to run. */
  useInstalled(path: string): void {
    this.#installed = path;
  }

  /** Whether the configuration names a binary: the operator's deliberate choice. One merely found on
   * PATH is not, and is not reported as installed. */
  configured(): boolean {
    return this.#cfg.bin !== '';
  }

  /** The llama-server to run: installed, else configured, else PATH's (reached only by a node the
   * agent did not provision and nobody told where its engine is). */
  bin(): string {
    return this.#installed ?? (this.#cfg.bin !== '' ? this.#cfg.bin : 'llama-server');
  }

  /** llama.cpp spreads a model over a node's GPUs by layer, so gpus_per_node is how many it gets. It
   * has no tensor parallelism and no group spanning machines; accepting tp or nodes would give a
   * replica serving from fewer cards, or one machine, while the catalog believes otherwise. */
  /** By index and scale in the request's `lora` list; every adapter is loaded at start. */
  adapterAccess(profile: Profile): AdapterAccess {
    return llamaCppAdapterAccess(profile);
  }

  validate(profile: Profile, gpus: readonly GpuInfo[]): void {
    const name = JSON.stringify(profile.name);
    if (profile.runtimeLora) {
      // llama-server reads its adapters once at start and has no route that loads another.
      throw new ProfileError('runtime_lora', `profile ${name}: llamacpp loads its adapters only at start; write runtime_lora: false`);
    }
    if (profile.nodes > 1) {
      throw new ProfileError('nodes', `profile ${name}: llamacpp does not span nodes; write nodes: 1, or use vllm or sglang for a ${profile.nodes}-node replica`);
    }
    if (profile.tp > 1 || profile.pp > 1) {
      const n = Math.max(profile.tp, 1) * Math.max(profile.pp, 1);
      throw new ProfileError(
        profile.tp > 1 ? 'tp' : 'pp',
        `profile ${name}: llamacpp splits a model across a node's GPUs by layer, not by tp or pp; write gpus_per_node: ${n} instead`,
      );
    }
    // The common checks count a replica's GPUs as tp; for llama.cpp the count is gpus_per_node.
    validateCommon({ ...profile, tp: Math.max(profile.gpusPerNode, 1), gpusPerNode: 0 }, gpus);
    validateTask('llamacpp', profile);
  }

  /** Every llama.cpp shard answers: a llama.cpp replica is always exactly one shard. */
  servesHttp(_spec: ShardSpec): boolean {
    return true;
  }

  commands(spec: ShardSpec, host: Host): readonly Command[] {
    return [{ name: 'llama-server', path: this.bin(), args: this.#args(spec, host), ...materializeEnv(this.#env(spec), host), waitForLeaderPort: false }];
  }

  /** `llama-server --list-devices` with the shard's environment, so it lists the devices the shard sees. */
  listDevicesCommand(spec: ShardSpec, host: Host): Command {
    return { name: 'llama-server --list-devices', path: this.bin(), args: ['--list-devices'], ...materializeEnv(this.#env(spec), host), waitForLeaderPort: false };
  }

  parseDevices(out: string): string[] {
    return parseDevices(out);
  }

  #args(spec: ShardSpec, host: Host): string[] {
    const p = spec.profile;
    // A path that is a file (every single-file model) is used as it is; a missing one too: that is the
    // engine's error to give, in its own words.
    const pick = modelFileOf(p.modelPath, host.listDir?.(p.modelPath));
    // Without --metrics there is no /metrics, and an endpoint the router cannot measure is one it
    // routes to blind.
    const args = ['--model', pick.model, '--host', listenHost(spec), '--port', String(spec.httpPort), '--metrics'];
    // The model's own chat template, which renders tool definitions the way the model was trained to
    // read them. Pinned rather than relied on: newer builds default to it, older ones do not, and an
    // engine upgrade should not change how prompts are built under a running fleet.
    if (!hasFlag(p.args, '--jinja', '--no-jinja')) args.push('--jinja');
    if (p.servedModelName !== '') args.push('--alias', p.servedModelName);
    args.push(...reasoningParserArgs('llamacpp', p), ...embeddingArgs('llamacpp', p));
    if (pick.projector !== undefined && !hasFlag(p.args, '--mmproj', '-mm')) args.push('--mmproj', pick.projector);
    if (!hasFlag(p.args, '--parallel', '-np')) {
      args.push('--parallel', String(this.#cfg.parallel > 0 ? this.#cfg.parallel : 4));
    }
    const gpus = spec.gpuIndices.length;
    // With GPUs, offload every layer: llama.cpp keeps the model on the CPU otherwise, which is not what
    // a GPU placement asked for. Without them the flag is omitted rather than zero, so a build with no
    // GPU support never sees an argument it rejects.
    if (gpus > 0 && !hasFlag(p.args, '--n-gpu-layers', '-ngl')) args.push('--n-gpu-layers', '999');
    // Several GPUs: layers spread across all of them, the only split llama.cpp does without a matched
    // interconnect, in proportion to free memory, which for whole cards is an even split.
    if (gpus > 1 && !hasFlag(p.args, '--split-mode', '-sm')) args.push('--split-mode', 'layer');
    if (gpus === 0 && !hasFlag(p.args, '--threads', '-t')) {
      // What placement reserved first: the node's other replicas were placed around it.
      const n = spec.threads > 0 ? spec.threads : this.#cfg.threads > 0 ? this.#cfg.threads : Math.max(Math.floor(host.cpus / 2), 1);
      args.push('--threads', String(n));
    }
    // Loaded at start, applied per request by "lora": [{id, scale}]; a request naming none is the base
    // model. Scale zero, not --lora with --lora-init-without-apply: that leaves the scale at 1, and
    // llama-server applies it to every request with no "lora" of its own, the base model's included.
    for (const a of p.adapters) args.push('--lora-scaled', `${a.path}:0`);
    args.push(...p.args);
    return args;
  }

  #env(spec: ShardSpec): Record<string, string> {
    const env = baseEnv(spec);
    if (spec.apiKey !== '') env.LLAMA_API_KEY = spec.apiKey;
    // The Vulkan build (what a GPU older than the CUDA builds gets) does not read CUDA_VISIBLE_DEVICES;
    // this is its own. Vulkan numbers devices as the driver lists them, on NVIDIA the same bus order as
    // nvidia-smi. Not on a MIG instance, which Vulkan does not see at all: an index here would name
    // some other card.
    if (spec.gpuIndices.length > 0 && !onMig(spec)) env.GGML_VK_VISIBLE_DEVICES = spec.gpuIndices.join(',');
    return env;
  }
}
