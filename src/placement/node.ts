// The `node:` section: this node's name and address, the devices placement may hand out, and where
// its port ranges start. Devices are listed, or `devices: discover` reads them from nvidia-smi at
// start (`withDiscovered`), MIG instances in place of their cards.
import { deepFreeze, readMap, type Issues } from '../config/index.js';
import type { GpuInfo } from '../engines/index.js';
import { cpuClass } from '../catalog/index.js';
import { isMigClass, labelOfDeviceNumber, usableDevices, type Exclusion, type Inventory } from '../discovery/index.js';

/** A device placement can give a shard: the GPU facts validation needs, its UUID and its class. */
export interface NodeDevice extends GpuInfo {
  /** GPU-… for a card, MIG-… for a MIG instance (the only name CUDA opens one by). */
  readonly uuid: string;
  /** The class profiles ask for by gpu_class; "cpu" is reserved for "no GPU". */
  readonly gpuClass: string;
  /** How every view names it: `3`, or `0/mig2` for MIG instance 2 of card 0. */
  readonly label: string;
  /** A MIG instance's GPU instance: compute instances of one GPU instance share its memory. */
  readonly gpuInstanceId: number | undefined;
}

/** Where each port range starts on this node. */
export interface NodePorts {
  /** First engine HTTP port; shards get consecutive ones. */
  readonly httpBase: number;
  /** First KV-event port; each publishing shard takes its event and replay ports from here. */
  readonly kvEventsBase: number;
}

/** This node, as placement sees it. */
export interface NodeConfig {
  readonly name: string;
  /** The management address engines listen on and the gateway reaches them at. */
  readonly addr: string;
  readonly devices: readonly NodeDevice[];
  /** `devices: discover`: the devices come from discovery at start, not from the file. */
  readonly discover: boolean;
  /** What discovery found and placement must not use (a MIG card with nothing carved), with why. */
  readonly excluded: readonly Exclusion[];
  readonly ports: NodePorts;
}

/** The defaults of the `node:` section: a node with no GPUs on loopback. */
export const defaultNodeConfig: NodeConfig = deepFreeze({
  name: 'local',
  addr: '127.0.0.1',
  devices: [],
  discover: false,
  excluded: [],
  ports: { httpBase: 8100, kvEventsBase: 5600 },
});

const deviceKeys = ['index', 'name', 'uuid', 'class', 'compute_capability', 'memory_total_mb'] as const;

/** Parses the `node:` section, recording every problem in `issues`. */
export function parseNodeConfig(raw: unknown, path: string, issues: Issues): NodeConfig {
  const d = defaultNodeConfig;
  const m = readMap(raw, path, issues, ['name', 'addr', 'devices', 'ports']);
  if (m === undefined) return d;
  const discover = m.raw.devices === 'discover';
  const devices = discover
    ? []
    : m.list('devices', (r, at) => {
        const dev = readMap(r, at, issues, deviceKeys);
        if (dev === undefined) return undefined;
        const gpuClass = dev.string('class', '');
        if (gpuClass === '') dev.problem('class', 'is missing; write the class profiles name in gpu_class, e.g. class: l4');
        if (gpuClass === cpuClass) dev.problem('class', '"cpu" means "no GPU" to profiles; give the device another class name');
        // Unknown memory is never zero: leaving it out says "the driver would not tell".
        const memory = dev.has('memory_total_mb') ? dev.int('memory_total_mb', 0, 1) : undefined;
        const index = dev.int('index', 0, 0);
        const uuid = dev.string('uuid', '');
        if (isMigClass(gpuClass)) {
          // CUDA opens a MIG instance by its UUID only, and its number must not collide with a card's.
          if (!uuid.startsWith('MIG-')) dev.problem('uuid', `${JSON.stringify(uuid)}, but class ${gpuClass} is a MIG instance; write its MIG-… UUID from nvidia-smi -L`);
          if (index < 1000) dev.problem('index', `${index}, but a MIG instance is numbered 1000 + 100 x card + instance (instance 2 of card 0 is 1002)`);
        } else if (index >= 1000) {
          dev.problem('index', `${index} is a MIG instance number (1000 + 100 x card + instance), but class ${gpuClass} is a whole card; use the card's nvidia-smi index`);
        }
        return {
          index,
          name: dev.string('name', ''),
          uuid,
          gpuClass,
          computeCapability: dev.string('compute_capability', ''),
          memoryTotalMb: memory,
          label: labelOfDeviceNumber(index),
          gpuInstanceId: undefined,
        };
      });
  const seen = new Set<number>();
  devices.forEach((dev, i) => {
    if (seen.has(dev.index)) {
      issues.push({ path: `${m.at('devices')}[${i}].index`, message: `${dev.index} is listed twice; each device has its own index` });
    }
    seen.add(dev.index);
  });
  const p = m.map('ports', ['http_base', 'kv_events_base']);
  return deepFreeze({
    name: m.text('name', d.name),
    addr: m.string('addr', d.addr),
    devices,
    discover,
    excluded: [],
    ports: {
      httpBase: p?.int('http_base', d.ports.httpBase, 1) ?? d.ports.httpBase,
      kvEventsBase: p?.int('kv_events_base', d.ports.kvEventsBase, 1) ?? d.ports.kvEventsBase,
    },
  });
}

/** The node with its devices taken from a discovered inventory: instances for MIG cards, the rest whole. */
export function withDiscovered(node: NodeConfig, inv: Inventory): NodeConfig {
  const u = usableDevices(inv);
  return deepFreeze({
    ...node,
    devices: u.devices.map(
      (dev): NodeDevice => ({
        index: dev.index,
        name: dev.name,
        uuid: dev.uuid,
        gpuClass: dev.class,
        computeCapability: dev.computeCapability ?? '',
        memoryTotalMb: dev.memoryTotalMib,
        label: dev.label,
        gpuInstanceId: dev.mig?.gpuInstanceId,
      }),
    ),
    excluded: u.excluded,
  });
}

/** The node's devices of one class, in index order; the cpu class has none. */
export function devicesOfClass(node: NodeConfig, gpuClass: string): readonly NodeDevice[] {
  if (gpuClass === cpuClass) return [];
  return node.devices.filter((d) => d.gpuClass === gpuClass).sort((a, b) => a.index - b.index);
}
