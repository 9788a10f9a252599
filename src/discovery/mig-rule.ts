// A replica on a MIG class runs on exactly one instance: a CUDA process opens one MIG device, and
// instances have no NVLink between them, so a profile asking for more than one GPU, stage or node
// on a MIG class describes a replica that cannot start. Catalog validation and placement both ask
// this, so the rule and its wording live once, here.
import { isMigClass } from './classes.js';

/** The profile fields the rule reads (catalog's and engines' Profile both satisfy it). */
export interface MigRuleProfile {
  readonly gpuClass: string;
  readonly tp: number;
  readonly pp: number;
  readonly gpusPerNode: number;
  readonly nodes: number;
}

/** One broken rule: the YAML key and what to write instead. */
export interface MigRuleIssue {
  readonly key: 'tp' | 'pp' | 'gpus_per_node' | 'nodes';
  readonly message: string;
}

/** Why this profile cannot run on its MIG class; empty when it can, or the class is not MIG. */
export function migProfileIssues(p: MigRuleProfile): MigRuleIssue[] {
  if (!isMigClass(p.gpuClass)) return [];
  const why = `gpu_class ${p.gpuClass} is a MIG instance: a replica gets exactly one, a process opens one MIG device and instances have no NVLink between them`;
  const issues: MigRuleIssue[] = [];
  if (p.tp > 1) issues.push({ key: 'tp', message: `${p.tp}, but ${why}; write tp: 1, or use a whole-card class` });
  if (p.pp > 1) issues.push({ key: 'pp', message: `${p.pp}, but ${why}; write pp: 1, or use a whole-card class` });
  if (p.gpusPerNode > 1) issues.push({ key: 'gpus_per_node', message: `${p.gpusPerNode}, but ${why}; write gpus_per_node: 1, or use a whole-card class` });
  if (p.nodes > 1) issues.push({ key: 'nodes', message: `${p.nodes}, but ${why}; write nodes: 1, or use a whole-card class` });
  return issues;
}
