// What a node offers, as ctl nodes and plan print it: devices grouped by class (instances named
// card/migN), what placement leaves out and why, and for each profile where it fits. On a MIG class
// the answer is one instance per replica or nothing: a replica never spans instances.
import { cpuClass, type Catalog } from '../catalog/index.js';
import { isMigClass, migProfileIssues } from '../discovery/index.js';
import { gpusPerShard } from '../engines/index.js';
import { devicesOfClass, type NodeConfig } from './node.js';

/** The node's devices grouped by class, then each device left out with its reason. */
export function devicesByClassLines(node: NodeConfig): string[] {
  const classes = [...new Set(node.devices.map((d) => d.gpuClass))].sort();
  const lines: string[] = [];
  for (const cls of classes) {
    const of = devicesOfClass(node, cls);
    lines.push(`${cls}: ${of.length} device${of.length === 1 ? '' : 's'}`);
    for (const d of of) lines.push(`  ${d.label.padEnd(8)} ${d.uuid}  ${d.memoryTotalMb === undefined ? '?' : d.memoryTotalMb} MiB`);
  }
  if (classes.length === 0) lines.push('no GPU devices');
  for (const e of node.excluded) lines.push(`left out: ${e.label}: ${e.reason}`);
  return lines;
}

/** For each profile of each model: how many devices of its class the node has, and how many replicas fit. */
export function profileFitLines(catalog: Catalog, node: NodeConfig): string[] {
  const lines: string[] = [];
  for (const [key, model] of Object.entries(catalog.models)) {
    for (const p of model.profiles) {
      const name = `${key}/${p.name} (${p.engine}, gpu_class ${p.gpuClass})`;
      if (p.gpuClass === cpuClass) {
        lines.push(`${name}: CPU only, no GPU needed`);
        continue;
      }
      const refused = migProfileIssues(p);
      if (refused.length > 0) {
        lines.push(`${name}: fits nowhere: ${refused.map((r) => `${r.key} ${r.message}`).join('; ')}`);
        continue;
      }
      const have = devicesOfClass(node, p.gpuClass).length;
      const need = isMigClass(p.gpuClass) ? 1 : Math.max(1, gpusPerShard(p));
      const unit = isMigClass(p.gpuClass) ? 'instance' : 'GPU';
      if (have === 0) {
        lines.push(`${name}: no device of class ${p.gpuClass} on node ${node.name}`);
        continue;
      }
      const fit = Math.floor(have / need);
      lines.push(`${name}: ${need} ${unit}${need === 1 ? '' : 's'} per replica, ${have} of class here, up to ${fit} replica${fit === 1 ? '' : 's'}`);
    }
  }
  return lines;
}
