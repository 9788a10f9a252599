// How GPUs read in every view (doctor, ctl nodes, plan): instances as `card/migN`, memory and
// processes per instance, heat, power and wear from the card, and utilisation left out under MIG
// rather than shown as zero. Unknown readings print as "?", never as 0.
import type { Card, GpuProcess, Memory, MigInstance, Wear } from './types.js';
import { deviceLabel } from './inventory.js';

const q = (v: number | string | undefined, unit = ''): string => (v === undefined ? '?' : `${v}${unit}`);

/** `12 / 19968 MiB used`, with `?` for what the driver would not say. */
export function memoryText(m: Memory): string {
  return `${q(m.usedMib)} / ${q(m.totalMib)} MiB used`;
}

function processText(p: GpuProcess): string {
  return `pid ${q(p.pid)} ${p.name === '' ? '(no name)' : p.name} ${q(p.usedMemoryMib, ' MiB')}`;
}

/** Wear counters, or undefined when the card reports none. */
export function wearText(w: Wear): string | undefined {
  const parts: string[] = [];
  if (w.retiredPagesSingleBit !== undefined || w.retiredPagesDoubleBit !== undefined) {
    parts.push(`retired pages ${q(w.retiredPagesSingleBit)} single-bit, ${q(w.retiredPagesDoubleBit)} double-bit${w.retiredPagesPending === true ? ', retirement pending' : ''}`);
  }
  if (w.remappedRowsCorrectable !== undefined || w.remappedRowsUncorrectable !== undefined) {
    parts.push(
      `remapped rows ${q(w.remappedRowsCorrectable)} correctable, ${q(w.remappedRowsUncorrectable)} uncorrectable` +
        `${w.remappedRowsPending === true ? ', remap pending (reset the card)' : ''}${w.remappedRowsFailure === true ? ', REMAPPING FAILED' : ''}`,
    );
  }
  return parts.length === 0 ? undefined : parts.join('; ');
}

function instanceLines(c: Card, m: MigInstance): string[] {
  const ids = `GI ${q(m.gpuInstanceId)} CI ${q(m.computeInstanceId)}`;
  const lines = [
    `    ${deviceLabel(c.index, m.deviceIndex)}  ${m.profile ?? '(profile unknown)'}  ${m.class ?? '(no class)'}  ${m.uuid ?? '(no MIG UUID)'}  ${ids}  ${memoryText(m.memory)}`,
  ];
  for (const p of m.processes) lines.push(`      ${processText(p)}`);
  return lines;
}

/** A card and what it holds, as doctor and ctl print it. */
export function cardLines(c: Card): string[] {
  const lines = [`card ${c.index}: ${c.name}  class ${c.class}  ${c.uuid}${c.busId === undefined ? '' : `  bus ${c.busId}`}`];
  lines.push(`  MIG mode: current ${c.migCurrent ?? 'unknown'}, pending ${c.migPending ?? 'unknown'}`);
  const readings = [`memory ${memoryText(c.memory)}`, `temperature ${q(c.temperatureC, ' C')}`, `power ${q(c.powerDrawW)} / ${q(c.powerLimitW)} W`];
  // Under MIG nvidia-smi has no per-instance utilisation and the card's is N/A: left out, not 0 %.
  if (c.migCurrent !== 'enabled') readings.push(`utilisation ${q(c.utilisationPct, ' %')}`);
  if (c.computeCapability !== undefined) readings.push(`compute capability ${c.computeCapability}`);
  lines.push(`  ${readings.join(', ')}`);
  const wear = wearText(c.wear);
  if (wear !== undefined) lines.push(`  wear: ${wear}`);
  if (c.migCurrent === 'enabled') {
    lines.push(c.instances.length === 0 ? '  instances: none carved' : `  instances (${c.instances.length}):`);
    for (const m of c.instances) lines.push(...instanceLines(c, m));
  }
  if (c.processes.length > 0) {
    lines.push(`  processes${c.migCurrent === 'enabled' ? ' not attributed to an instance' : ''}:`);
    for (const p of c.processes) lines.push(`    ${processText(p)}`);
  }
  return lines;
}
