// Checks that apply to every engine, run before anything starts: a profile the hardware cannot run is
// refused with the field to change, not discovered as a crash loop on the node.
import { LlmgwError } from '../errors/index.js';
import { dataParallelSizeOf, hasFlag } from './argv.js';
import type { GpuInfo, Profile } from './types.js';

/** The profile keys a refusal can point at, in the catalog's YAML spelling. */
export type ProfileField =
  | 'engine'
  | 'reasoning_parser'
  | 'gpu_class'
  | 'tp'
  | 'pp'
  | 'gpus_per_node'
  | 'nodes'
  | 'model_path'
  | 'args'
  | 'adapters'
  | 'runtime_lora'
  | 'kv_events'
  | 'role'
  | 'task'
  | 'pooling';

/** A profile an engine refuses: `field` is the YAML key to change, so the catalog can report its path. */
export class ProfileError extends LlmgwError {
  readonly field: ProfileField;
  constructor(field: ProfileField, message: string) {
    super('LLMGW_PROFILE', message);
    this.field = field;
  }
}

/** How many GPUs one shard of this profile occupies on its node: gpus_per_node, or when unset tp for
 * each data-parallel rank its args ask for (vLLM runs every DP rank of one serve on its own GPUs). */
export function gpusPerShard(p: Profile): number {
  return p.gpusPerNode > 0 ? p.gpusPerNode : p.tp * dataParallelSizeOf(p.args);
}

/** The checks every engine shares: a model, a positive tp, a node layout that adds up, enough GPUs,
 * and a uniform tensor-parallel group. */
export function validateCommon(p: Profile, gpus: readonly GpuInfo[]): void {
  const name = JSON.stringify(p.name);
  if (p.modelPath === '') {
    throw new ProfileError('model_path', `profile ${name}: model_path is empty; write the model's directory or file`);
  }
  // args come last and win, so these would move the engine away from where the gateway and the
  // agent's health checks reach it.
  for (const [flag, owner] of [['--port', 'node.ports.http_base'], ['--host', 'node.addr']] as const) {
    if (hasFlag(p.args, flag)) {
      throw new ProfileError('args', `profile ${name}: args set ${flag}, which placement gives each shard from ${owner}; drop it from args and change ${owner} instead`);
    }
  }
  if (!(p.tp > 0)) {
    throw new ProfileError('tp', `profile ${name}: tp is ${p.tp}, but the tensor-parallel degree must be 1 or more`);
  }
  if (p.nodes > 1 && p.gpusPerNode <= 0) {
    throw new ProfileError(
      'gpus_per_node',
      `profile ${name}: a ${p.nodes}-node profile needs gpus_per_node; write gpus_per_node: ${Math.max(1, Math.floor((p.tp * Math.max(p.pp, 1)) / p.nodes))}`,
    );
  }
  const perNode = gpusPerShard(p);
  const nodes = Math.max(p.nodes, 1);
  const pp = Math.max(p.pp, 1);
  const dp = dataParallelSizeOf(p.args);
  if (perNode * nodes !== p.tp * pp * dp) {
    const ofDp = dp > 1 ? ` x data-parallel size ${dp}` : '';
    throw new ProfileError(
      'gpus_per_node',
      `profile ${name}: ${nodes} nodes x ${perNode} GPUs does not match tp ${p.tp} x pp ${pp}${ofDp}; ` +
        `every GPU of the replica runs one rank, so gpus_per_node x nodes must equal tp x pp${dp > 1 ? ' x data-parallel size' : ''}`,
    );
  }
  // No devices listed means the class is not on this node: placement reports that, not validation.
  if (gpus.length > 0 && gpus.length < perNode) {
    throw new ProfileError(
      p.gpusPerNode > 0 ? 'gpus_per_node' : 'tp',
      `profile ${name}: needs ${perNode} GPUs per node, the node has ${gpus.length} of class ${JSON.stringify(p.gpuClass)}`,
    );
  }
  // A tensor-parallel group must be uniform: mixing models makes the slowest card set the pace of
  // every collective, and mismatched memory makes the smallest card decide what fits.
  const first = gpus[0];
  if (first !== undefined) {
    for (const g of gpus.slice(1)) {
      if (g.name !== first.name) {
        throw new ProfileError(
          'gpu_class',
          `profile ${name}: the GPUs of class ${JSON.stringify(p.gpuClass)} are not uniform (${JSON.stringify(first.name)} and ` +
            `${JSON.stringify(g.name)}); a tensor-parallel group may not mix GPU types, so give each type its own class`,
        );
      }
    }
  }
}

/** Refuses a profile whose quantization (`why`) these GPUs cannot execute. An unparsable or unknown
 * capability is let through rather than blocking a launch on a parsing problem: the engine refuses
 * it clearly enough itself. */
export function requireComputeCapability(p: Profile, gpus: readonly GpuInfo[], minCap: number, why: string): void {
  for (const g of gpus) {
    const text = g.computeCapability.trim();
    const cap = text === '' ? Number.NaN : Number(text);
    if (!Number.isFinite(cap)) continue;
    if (cap < minCap) {
      throw new ProfileError(
        'args',
        `profile ${JSON.stringify(p.name)}: ${why} needs compute capability ${minCap.toFixed(1)}, ` +
          `GPU ${g.index} (${g.name}) has ${cap.toFixed(1)}; use another gpu_class or drop it from args`,
      );
    }
  }
}

/** The value of --quantization in the profile's args (either spelling), or '' when absent. */
export function quantizationOf(args: readonly string[]): string {
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === undefined) continue;
    if (a === '--quantization') {
      const v = args[i + 1];
      if (v !== undefined) return v;
    }
    if (a.startsWith('--quantization=')) return a.slice('--quantization='.length);
  }
  return '';
}
