// Placement hands the agent a flat list of shard specs; the agent runs replicas. This groups the
// shards by replica and adds the KV facts the router hashes with, read from the same arguments the
// engine is started with, so the router and the engine cannot disagree about them.
import { dataParallelSizeOf, flagValue, schedulingPolicyOf, type ShardSpec } from '../engines/index.js';
import type { ReplicaPlan } from './node-agent.js';

/** vLLM's default KV block size on GPUs, used when the profile does not set --block-size. */
const VLLM_DEFAULT_BLOCK_SIZE = 16;
/** Mirror bound when the profile does not say what a GPU engine holds: above what one 80 GB card
 * caches at 16 tokens a block, so a real engine's mirror is never reset early for size. */
const DEFAULT_CAPACITY_BLOCKS = 262_144;
/** The sim's own default of --kv-capacity-blocks. */
const SIM_CAPACITY_BLOCKS = 4_096;

/** The facts that come from config rather than from a shard's own arguments. */
export interface PlanFacts {
  /** PYTHONHASHSEED every KV-event publisher is started with (kv_events.hash_seed). */
  readonly hashSeed: string;
  /** The sim's block size (engines.sim.block_size): the sim builder passes it, not the profile. */
  readonly simBlockSize: number;
}

function positive(v: string | undefined, fallback: number): number {
  const n = Number(v);
  return v !== undefined && Number.isInteger(n) && n > 0 ? n : fallback;
}

/** Groups this node's shard specs into replica plans, in the order placement gave them. */
export function planReplicas(shards: readonly ShardSpec[], facts: PlanFacts): ReplicaPlan[] {
  const byReplica = new Map<string, ShardSpec[]>();
  for (const s of shards) {
    const list = byReplica.get(s.replicaId) ?? [];
    list.push(s);
    byReplica.set(s.replicaId, list);
  }
  return [...byReplica.entries()].map(([replicaId, specs]) => {
    // The leader's profile when it runs here; a worker-only node has the same profile anyway.
    const p = (specs.find((s) => s.rank === 0) ?? specs[0])?.profile;
    const args = p?.args ?? [];
    const isSim = p?.engine === 'sim';
    const defaultBlock = isSim ? facts.simBlockSize : VLLM_DEFAULT_BLOCK_SIZE;
    return {
      replicaId,
      model: p === undefined ? replicaId : p.servedModelName !== '' ? p.servedModelName : p.modelPath,
      adapters: p?.adapters.map((a) => a.name) ?? [],
      shards: specs,
      blockSizeTokens: positive(flagValue(args, '--block-size'), defaultBlock),
      hashSeed: facts.hashSeed,
      dataParallelSize: dataParallelSizeOf(args),
      schedulesByPriority: (p?.engine === 'vllm' || isSim) && schedulingPolicyOf(args) === 'priority',
      capacityBlocks: positive(flagValue(args, '--kv-capacity-blocks', '--num-gpu-blocks-override'), isSim ? SIM_CAPACITY_BLOCKS : DEFAULT_CAPACITY_BLOCKS),
    };
  });
}
