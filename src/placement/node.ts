// The `node:` section: this node's name and address, the devices placement may hand out, and where
// its port ranges start. Discovery (nvidia-smi) fills devices in a later step; here they are listed.
import type { GpuInfo, Issues } from '../engines/index.js';
import { deepFreeze, readMap } from '../engines/index.js';
import { cpuClass } from '../catalog/index.js';

/** A device placement can give a shard: the GPU facts validation needs, its UUID and its class. */
export interface NodeDevice extends GpuInfo {
  /** GPU-… for a card, MIG-… for a MIG instance (the only name CUDA opens one by). */
  readonly uuid: string;
  /** The class profiles ask for by gpu_class; "cpu" is reserved for "no GPU". */
  readonly gpuClass: string;
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
  readonly ports: NodePorts;
}

/** The defaults of the `node:` section: a node with no GPUs on loopback. */
export const defaultNodeConfig: NodeConfig = deepFreeze({
  name: 'local',
  addr: '127.0.0.1',
  devices: [],
  ports: { httpBase: 8100, kvEventsBase: 5600 },
});

const deviceKeys = ['index', 'name', 'uuid', 'class', 'compute_capability', 'memory_total_mb'] as const;

/** Parses the `node:` section, recording every problem in `issues`. */
export function parseNodeConfig(raw: unknown, path: string, issues: Issues): NodeConfig {
  const d = defaultNodeConfig;
  const m = readMap(raw, path, issues, ['name', 'addr', 'devices', 'ports']);
  if (m === undefined) return d;
  const devices = m.list('devices', (r, at) => {
    const dev = readMap(r, at, issues, deviceKeys);
    if (dev === undefined) return undefined;
    const gpuClass = dev.string('class', '');
    if (gpuClass === '') dev.problem('class', 'is missing; write the class profiles name in gpu_class, e.g. class: l4');
    if (gpuClass === cpuClass) dev.problem('class', '"cpu" means "no GPU" to profiles; give the device another class name');
    // Unknown memory is never zero: leaving it out says "the driver would not tell".
    const memory = dev.has('memory_total_mb') ? dev.int('memory_total_mb', 0, 1) : undefined;
    return {
      index: dev.int('index', 0, 0),
      name: dev.string('name', ''),
      uuid: dev.string('uuid', ''),
      gpuClass,
      computeCapability: dev.string('compute_capability', ''),
      memoryTotalMb: memory,
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
    name: m.string('name', d.name),
    addr: m.string('addr', d.addr),
    devices,
    ports: {
      httpBase: p?.int('http_base', d.ports.httpBase, 1) ?? d.ports.httpBase,
      kvEventsBase: p?.int('kv_events_base', d.ports.kvEventsBase, 1) ?? d.ports.kvEventsBase,
    },
  });
}

/** The node's devices of one class, in index order; the cpu class has none. */
export function devicesOfClass(node: NodeConfig, gpuClass: string): readonly NodeDevice[] {
  if (gpuClass === cpuClass) return [];
  return node.devices.filter((d) => d.gpuClass === gpuClass).sort((a, b) => a.index - b.index);
}
