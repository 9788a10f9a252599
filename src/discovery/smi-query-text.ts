// `nvidia-smi -q` (text): the same facts as -q -x, indented "Key : value" lines. It is read when
// only text output exists (the capture bundles, or a driver whose XML fails), and it is the one
// real capture we have of processes inside MIG instances ("GPU instance ID : 2" per process).
import { LlmgwError } from '../errors/index.js';
import type { QueriedGpu, QueriedMig, Queried } from './smi-query.js';
import type { GpuProcess, Memory, MigMode } from './types.js';
import { flagOf, integerOf, known, normaliseBusId, numberOf } from './values.js';

interface Line {
  readonly key: string;
  readonly value: string | undefined;
  readonly children: Line[];
}

function treeOf(text: string): Line[] {
  const roots: Line[] = [];
  const stack: { indent: number; line: Line }[] = [];
  for (const raw of text.split(/\r?\n/)) {
    if (raw.trim() === '' || /^=+.*=+$/.test(raw.trim())) continue;
    const indent = raw.length - raw.trimStart().length;
    const colon = raw.indexOf(' : ');
    const key = (colon < 0 ? raw : raw.slice(0, colon)).trim();
    const line: Line = { key, value: colon < 0 ? undefined : raw.slice(colon + 3).trim(), children: [] };
    while (stack.length > 0 && (stack[stack.length - 1]?.indent ?? 0) >= indent) stack.pop();
    const parent = stack[stack.length - 1];
    if (parent === undefined) roots.push(line);
    else parent.line.children.push(line);
    stack.push({ indent, line });
  }
  return roots;
}

function get(lines: readonly Line[] | undefined, ...path: readonly string[]): Line | undefined {
  let cur: Line | undefined;
  let level = lines;
  for (const key of path) {
    cur = level?.find((l) => l.key === key);
    level = cur?.children;
  }
  return cur;
}

function value(lines: readonly Line[] | undefined, ...path: readonly string[]): string | undefined {
  return get(lines, ...path)?.value;
}

function modeOf(raw: string | undefined): MigMode | undefined {
  const v = raw?.toLowerCase();
  if (v === 'enabled') return 'enabled';
  if (v === 'disabled') return 'disabled';
  if (v === 'n/a') return 'unsupported';
  return undefined;
}

function memoryOf(l: Line | undefined): Memory {
  return {
    totalMib: numberOf(value(l?.children, 'Total')),
    usedMib: numberOf(value(l?.children, 'Used')),
    freeMib: numberOf(value(l?.children, 'Free')),
    reservedMib: numberOf(value(l?.children, 'Reserved')),
  };
}

function processesOf(section: Line | undefined): GpuProcess[] {
  const out: GpuProcess[] = [];
  let gi: number | undefined;
  let ci: number | undefined;
  for (const l of section?.children ?? []) {
    if (l.key === 'GPU instance ID') gi = integerOf(l.value);
    else if (l.key === 'Compute instance ID') ci = integerOf(l.value);
    else if (l.key === 'Process ID') {
      out.push({
        pid: integerOf(l.value),
        type: known(value(l.children, 'Type')),
        name: value(l.children, 'Name') ?? '',
        usedMemoryMib: numberOf(value(l.children, 'Used GPU Memory')),
        gpuInstanceId: gi,
        computeInstanceId: ci,
      });
      gi = undefined;
      ci = undefined;
    }
  }
  return out;
}

function gpuOf(section: Line): QueriedGpu {
  const c = section.children;
  const migDevices: QueriedMig[] = c
    .filter((l) => l.key === 'MIG Device')
    .map((d) => {
      const deviceIndex = integerOf(value(d.children, 'Index'));
      if (deviceIndex === undefined) throw new LlmgwError('LLMGW_SMI_QUERY', `nvidia-smi -q: a MIG Device of ${section.key} has no readable Index`);
      return {
        deviceIndex,
        gpuInstanceId: integerOf(value(d.children, 'GPU Instance ID')),
        computeInstanceId: integerOf(value(d.children, 'Compute Instance ID')),
        multiprocessorCount: integerOf(value(d.children, 'Device Attributes', 'Shared', 'Multiprocessor count')),
        // R590 says "Shared FB Memory Usage", R535 "FB Memory Usage".
        memory: memoryOf(d.children.find((l) => l.key.endsWith('FB Memory Usage'))),
      };
    });
  const migCurrent = modeOf(value(c, 'MIG Mode', 'Current'));
  const power = get(c, 'GPU Power Readings')?.children ?? get(c, 'Power Readings')?.children;
  const draw = [value(power, 'Power Draw'), value(power, 'Instantaneous Power Draw'), value(power, 'Average Power Draw')].map(numberOf).find((n) => n !== undefined);
  const limit = [value(power, 'Current Power Limit'), value(power, 'Power Limit'), value(power, 'Enforced Power Limit')].map(numberOf).find((n) => n !== undefined);
  const procs = get(c, 'Processes');
  return {
    busId: normaliseBusId(section.key.replace(/^GPU\s+/, '')),
    name: known(value(c, 'Product Name')),
    uuid: known(value(c, 'GPU UUID')),
    migCurrent,
    migPending: modeOf(value(c, 'MIG Mode', 'Pending')),
    hasMigDevicesElement: get(c, 'MIG Mode') !== undefined,
    migDevices,
    memory: memoryOf(get(c, 'FB Memory Usage')),
    utilisationPct: migCurrent === 'enabled' ? undefined : numberOf(value(c, 'Utilization', 'GPU')),
    temperatureC: numberOf(value(c, 'Temperature', 'GPU Current Temp')),
    powerDrawW: draw,
    powerLimitW: limit,
    wear: {
      retiredPagesSingleBit: integerOf(value(c, 'Retired Pages', 'Single Bit ECC')),
      retiredPagesDoubleBit: integerOf(value(c, 'Retired Pages', 'Double Bit ECC')),
      retiredPagesPending: flagOf(value(c, 'Retired Pages', 'Pending Page Blacklist')),
      remappedRowsCorrectable: integerOf(value(c, 'Remapped Rows', 'Correctable Error')),
      remappedRowsUncorrectable: integerOf(value(c, 'Remapped Rows', 'Uncorrectable Error')),
      remappedRowsPending: flagOf(value(c, 'Remapped Rows', 'Pending')),
      remappedRowsFailure: flagOf(value(c, 'Remapped Rows', 'Remapping Failure Occurred')),
    },
    processes: procs?.value !== undefined ? [] : processesOf(procs),
  };
}

/** Parses `nvidia-smi -q` text output into the same shape as -q -x. */
export function parseSmiQueryText(text: string): Queried {
  const roots = treeOf(text);
  if (get(roots, 'Driver Version') === undefined) {
    throw new LlmgwError('LLMGW_SMI_QUERY', 'nvidia-smi -q: no "Driver Version" line; this is not nvidia-smi -q output');
  }
  return {
    driverVersion: known(value(roots, 'Driver Version')),
    attachedGpus: integerOf(value(roots, 'Attached GPUs')),
    gpus: roots.filter((l) => /^GPU [0-9A-Fa-f]+:/.test(l.key)).map(gpuOf),
  };
}
