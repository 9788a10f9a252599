// `nvidia-smi -q -x`: modes, GPU/compute instance ids, per-instance memory, processes with their
// instance ids, temperature, power and wear. Schemas v11 to v13 rename several elements; each reading
// tries the names it has had and is undefined when none is present.
import { LlmgwError } from '../errors/index.js';
import type { CardReadings, GpuProcess, Memory, MigMode, Wear } from './types.js';
import { flagOf, integerOf, known, normaliseBusId, numberOf } from './values.js';
import { childOf, elementsOf, parseXml, textOf, type XmlElement } from './xml.js';

/** One `mig_device` of the XML: ids, memory and SMs, but no UUID and no profile name. */
export interface QueriedMig {
  readonly deviceIndex: number;
  readonly gpuInstanceId: number | undefined;
  readonly computeInstanceId: number | undefined;
  readonly multiprocessorCount: number | undefined;
  readonly memory: Memory;
}

/** One `<gpu>` of the XML. */
export interface QueriedGpu extends CardReadings {
  readonly busId: string | undefined;
  readonly name: string | undefined;
  readonly uuid: string | undefined;
  /** False when the schema has no `mig_devices` element at all. */
  readonly hasMigDevicesElement: boolean;
  readonly migDevices: readonly QueriedMig[];
}

/** The whole XML document, reduced to what discovery uses. */
export interface Queried {
  readonly driverVersion: string | undefined;
  /** What the document claims; not trusted for counting (a trimmed capture says 4 and holds 1). */
  readonly attachedGpus: number | undefined;
  readonly gpus: readonly QueriedGpu[];
}

function text(el: XmlElement | undefined, ...path: readonly string[]): string | undefined {
  return textOf(childOf(el, ...path));
}

/** The first of several element paths that exists and has a known value. */
function firstKnown(el: XmlElement, paths: readonly (readonly string[])[]): string | undefined {
  for (const p of paths) {
    const v = known(text(el, ...p));
    if (v !== undefined) return v;
  }
  return undefined;
}

function migModeOf(raw: string | undefined): MigMode | undefined {
  if (raw === undefined) return undefined;
  const v = raw.trim().toLowerCase();
  if (v === 'enabled') return 'enabled';
  if (v === 'disabled') return 'disabled';
  // GPUs that cannot do MIG (V100, GeForce) say N/A here; with the element present, that is a fact.
  if (v === 'n/a') return 'unsupported';
  return undefined;
}

function memoryOf(el: XmlElement | undefined): Memory {
  return {
    totalMib: numberOf(text(el, 'total')),
    usedMib: numberOf(text(el, 'used')),
    freeMib: numberOf(text(el, 'free')),
    reservedMib: numberOf(text(el, 'reserved')),
  };
}

/** The memory block of a MIG device: R590's text output calls it "Shared FB Memory Usage", so match by suffix. */
function migMemoryElement(el: XmlElement): XmlElement | undefined {
  return elementsOf(el).find((c) => c.name.endsWith('fb_memory_usage'));
}

function processesOf(gpu: XmlElement): GpuProcess[] {
  const procs = childOf(gpu, 'processes');
  if (procs === undefined) return [];
  return elementsOf(procs, 'process_info').map((p) => ({
    pid: integerOf(text(p, 'pid')),
    type: known(text(p, 'type')),
    name: text(p, 'process_name') ?? '',
    usedMemoryMib: numberOf(text(p, 'used_memory')),
    gpuInstanceId: integerOf(text(p, 'gpu_instance_id')),
    computeInstanceId: integerOf(text(p, 'compute_instance_id')),
  }));
}

function wearOf(gpu: XmlElement): Wear {
  const retired = childOf(gpu, 'retired_pages');
  const remapped = childOf(gpu, 'remapped_rows');
  return {
    retiredPagesSingleBit: integerOf(text(retired, 'multiple_single_bit_retirement', 'retired_count')),
    retiredPagesDoubleBit: integerOf(text(retired, 'double_bit_retirement', 'retired_count')),
    retiredPagesPending: flagOf(text(retired, 'pending_retirement')),
    remappedRowsCorrectable: integerOf(text(remapped, 'remapped_row_corr')),
    remappedRowsUncorrectable: integerOf(text(remapped, 'remapped_row_unc')),
    remappedRowsPending: flagOf(text(remapped, 'remapped_row_pending')),
    remappedRowsFailure: flagOf(text(remapped, 'remapped_row_failure')),
  };
}

function gpuOf(gpu: XmlElement): QueriedGpu {
  const migMode = childOf(gpu, 'mig_mode');
  const migDevicesEl = childOf(gpu, 'mig_devices');
  const migDevices: QueriedMig[] = [];
  for (const d of migDevicesEl === undefined ? [] : elementsOf(migDevicesEl, 'mig_device')) {
    const deviceIndex = integerOf(text(d, 'index'));
    if (deviceIndex === undefined) {
      throw new LlmgwError('LLMGW_SMI_QUERY', `nvidia-smi -q -x: a mig_device of ${text(gpu, 'uuid') ?? 'a GPU'} has no readable <index>; it cannot be matched to its -L line`);
    }
    migDevices.push({
      deviceIndex,
      gpuInstanceId: integerOf(text(d, 'gpu_instance_id')),
      computeInstanceId: integerOf(text(d, 'compute_instance_id')),
      multiprocessorCount: integerOf(text(d, 'device_attributes', 'shared', 'multiprocessor_count')),
      memory: memoryOf(migMemoryElement(d)),
    });
  }
  const migCurrent = migModeOf(text(migMode, 'current_mig'));
  return {
    busId: normaliseBusId(gpu.attributes.id ?? text(gpu, 'pci', 'pci_bus_id')),
    name: known(text(gpu, 'product_name')),
    uuid: known(text(gpu, 'uuid')),
    migCurrent,
    migPending: migModeOf(text(migMode, 'pending_mig')),
    hasMigDevicesElement: migDevicesEl !== undefined,
    migDevices,
    memory: memoryOf(childOf(gpu, 'fb_memory_usage')),
    utilisationPct: migCurrent === 'enabled' ? undefined : numberOf(text(gpu, 'utilization', 'gpu_util')),
    temperatureC: numberOf(text(gpu, 'temperature', 'gpu_temp')),
    // v11 power_readings/power_draw; v12 gpu_power_readings/power_draw; v13 dropped power_draw for
    // instant_power_draw and average_power_draw.
    powerDrawW: numberOf(
      firstKnown(gpu, [
        ['gpu_power_readings', 'power_draw'],
        ['gpu_power_readings', 'instant_power_draw'],
        ['gpu_power_readings', 'average_power_draw'],
        ['power_readings', 'power_draw'],
      ]),
    ),
    powerLimitW: numberOf(
      firstKnown(gpu, [
        ['gpu_power_readings', 'current_power_limit'],
        ['power_readings', 'power_limit'],
        ['power_readings', 'enforced_power_limit'],
      ]),
    ),
    wear: wearOf(gpu),
    processes: processesOf(gpu),
  };
}

/** Parses `nvidia-smi -q -x` output. */
export function parseSmiQuery(xml: string): Queried {
  const root = parseXml(xml);
  if (root.name !== 'nvidia_smi_log') {
    throw new LlmgwError('LLMGW_SMI_QUERY', `nvidia-smi -q -x: root element is <${root.name}>, expected <nvidia_smi_log>`);
  }
  return {
    driverVersion: known(text(root, 'driver_version')),
    attachedGpus: integerOf(text(root, 'attached_gpus')),
    gpus: elementsOf(root, 'gpu').map(gpuOf),
  };
}
