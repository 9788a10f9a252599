// The NVML path: the same inventory as nvidia-smi's, read through the library nvidia-smi itself uses.
// Node has no built-in foreign-function interface and none is a dependency of llmgw, so no binding to
// libnvidia-ml is loaded here: `loadNvml` reports why and discovery uses nvidia-smi. The interface is
// what such a binding must provide (the NVML calls named in each method), and discovery over it is
// tested with a fake, so a binding is one adapter away.
import { existsSync } from 'node:fs';
import { cardClass, migClass } from './classes.js';
import type { Card, GpuProcess, Inventory, Memory, MigInstance, MigMode, Wear } from './types.js';

/** An opaque NVML device handle (a whole card or a MIG device). */
export type NvmlHandle = { readonly __brand: 'NvmlHandle' };

/** The NVML calls discovery needs. Each returns undefined where NVML returns an error for that field. */
export interface Nvml {
  /** nvmlSystemGetDriverVersion */
  driverVersion(): string | undefined;
  /** nvmlDeviceGetCount_v2 */
  deviceCount(): number;
  /** nvmlDeviceGetHandleByIndex_v2 */
  deviceHandleByIndex(index: number): NvmlHandle;
  /** nvmlDeviceGetName; for a MIG device NVML returns "<card name> MIG <profile>". */
  name(device: NvmlHandle): string | undefined;
  /** nvmlDeviceGetUUID: `GPU-…` for a card, `MIG-…` for a MIG device. */
  uuid(device: NvmlHandle): string | undefined;
  /** nvmlDeviceGetPciInfo_v3 busId. */
  pciBusId(device: NvmlHandle): string | undefined;
  /** nvmlDeviceGetMemoryInfo, in bytes. */
  memoryInfo(device: NvmlHandle): { totalBytes: number; usedBytes: number; freeBytes: number } | undefined;
  /** nvmlDeviceGetCudaComputeCapability */
  computeCapability(device: NvmlHandle): { major: number; minor: number } | undefined;
  /** nvmlDeviceGetMigMode: undefined when the card has no MIG (NVML_ERROR_NOT_SUPPORTED). */
  migMode(device: NvmlHandle): { current: boolean; pending: boolean } | undefined;
  /** nvmlDeviceGetMaxMigDeviceCount */
  maxMigDeviceCount(device: NvmlHandle): number;
  /** nvmlDeviceGetMigDeviceHandleByIndex: undefined for an empty slot (NVML_ERROR_NOT_FOUND). */
  migDeviceHandleByIndex(device: NvmlHandle, index: number): NvmlHandle | undefined;
  /** nvmlDeviceGetGpuInstanceId / nvmlDeviceGetComputeInstanceId of a MIG device. */
  gpuInstanceId(mig: NvmlHandle): number | undefined;
  computeInstanceId(mig: NvmlHandle): number | undefined;
  /** nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU), °C. */
  temperatureC(device: NvmlHandle): number | undefined;
  /** nvmlDeviceGetPowerUsage / nvmlDeviceGetEnforcedPowerLimit, milliwatts. */
  powerUsageMw(device: NvmlHandle): number | undefined;
  powerLimitMw(device: NvmlHandle): number | undefined;
  /** nvmlDeviceGetUtilizationRates().gpu; NVML reports NOT_SUPPORTED under MIG. */
  utilisationPct(device: NvmlHandle): number | undefined;
  /** nvmlDeviceGetComputeRunningProcesses_v3 (carries gpuInstanceId/computeInstanceId). */
  computeProcesses(device: NvmlHandle): readonly { pid: number; usedBytes: number | undefined; gpuInstanceId: number | undefined; computeInstanceId: number | undefined }[];
  /** nvmlDeviceGetRetiredPages (both causes) and nvmlDeviceGetRemappedRows. */
  retiredPages(device: NvmlHandle): { singleBit: number; doubleBit: number; pending: boolean } | undefined;
  remappedRows(device: NvmlHandle): { correctable: number; uncorrectable: number; pending: boolean; failure: boolean } | undefined;
}

const MIB = 1024 * 1024;

function memoryOf(m: ReturnType<Nvml['memoryInfo']>): Memory {
  if (m === undefined) return { totalMib: undefined, usedMib: undefined, freeMib: undefined, reservedMib: undefined };
  return { totalMib: Math.floor(m.totalBytes / MIB), usedMib: Math.floor(m.usedBytes / MIB), freeMib: Math.floor(m.freeBytes / MIB), reservedMib: undefined };
}

function modeOf(v: boolean | undefined, hasMig: boolean): MigMode {
  if (!hasMig) return 'unsupported';
  return v === true ? 'enabled' : 'disabled';
}

/** The profile of a MIG device from its NVML name ("NVIDIA A100-SXM4-80GB MIG 3g.40gb"), never from memory. */
export function profileFromMigName(name: string | undefined): string | undefined {
  const m = name === undefined ? null : /\sMIG\s+(\S+)\s*$/.exec(name);
  return m?.[1];
}

/** One inventory read through NVML. */
export function inventoryFromNvml(nvml: Nvml): Inventory {
  const cards: Card[] = [];
  const problems: string[] = [];
  for (let index = 0; index < nvml.deviceCount(); index++) {
    const h = nvml.deviceHandleByIndex(index);
    const name = nvml.name(h) ?? 'unknown GPU';
    const memory = memoryOf(nvml.memoryInfo(h));
    const cls = cardClass(name, memory.totalMib);
    const mode = nvml.migMode(h);
    const migCurrent = modeOf(mode?.current, mode !== undefined);
    const notes: string[] = [];
    const processes: GpuProcess[] = nvml.computeProcesses(h).map((p) => ({
      pid: p.pid,
      type: 'C',
      name: '',
      usedMemoryMib: p.usedBytes === undefined ? undefined : Math.floor(p.usedBytes / MIB),
      gpuInstanceId: p.gpuInstanceId,
      computeInstanceId: p.computeInstanceId,
    }));
    const instances: MigInstance[] = [];
    if (migCurrent === 'enabled') {
      const max = nvml.maxMigDeviceCount(h);
      // Slots can be empty between carved instances, so every slot up to the maximum is asked.
      for (let i = 0; i < max; i++) {
        const m = nvml.migDeviceHandleByIndex(h, i);
        if (m === undefined) continue;
        const profile = profileFromMigName(nvml.name(m));
        const gi = nvml.gpuInstanceId(m);
        const ci = nvml.computeInstanceId(m);
        if (profile === undefined) notes.push(`MIG device ${i}: NVML's name ${JSON.stringify(nvml.name(m))} carries no profile`);
        instances.push({
          deviceIndex: i,
          uuid: nvml.uuid(m),
          profile,
          gpuInstanceId: gi,
          computeInstanceId: ci,
          multiprocessorCount: undefined,
          memory: memoryOf(nvml.memoryInfo(m)),
          processes: processes.filter((p) => gi !== undefined && p.gpuInstanceId === gi && p.computeInstanceId === ci),
          class: profile === undefined ? undefined : migClass(cls, profile),
        });
      }
    }
    const claimed = new Set(instances.flatMap((m) => m.processes));
    const retired = nvml.retiredPages(h);
    const remapped = nvml.remappedRows(h);
    const wear: Wear = {
      retiredPagesSingleBit: retired?.singleBit,
      retiredPagesDoubleBit: retired?.doubleBit,
      retiredPagesPending: retired?.pending,
      remappedRowsCorrectable: remapped?.correctable,
      remappedRowsUncorrectable: remapped?.uncorrectable,
      remappedRowsPending: remapped?.pending,
      remappedRowsFailure: remapped?.failure,
    };
    const cc = nvml.computeCapability(h);
    const draw = nvml.powerUsageMw(h);
    const limit = nvml.powerLimitMw(h);
    cards.push({
      index,
      uuid: nvml.uuid(h) ?? '',
      name,
      busId: nvml.pciBusId(h)?.toLowerCase().replace(/^[0-9a-f]{4}(?=[0-9a-f]{4}:)/, ''),
      class: cls,
      computeCapability: cc === undefined ? undefined : `${cc.major}.${cc.minor}`,
      migCurrent,
      migPending: modeOf(mode?.pending, mode !== undefined),
      memory,
      utilisationPct: migCurrent === 'enabled' ? undefined : nvml.utilisationPct(h),
      temperatureC: nvml.temperatureC(h),
      powerDrawW: draw === undefined ? undefined : draw / 1000,
      powerLimitW: limit === undefined ? undefined : limit / 1000,
      wear,
      processes: processes.filter((p) => !claimed.has(p)),
      instances,
      notes,
    });
  }
  return { source: 'nvml', driverVersion: nvml.driverVersion(), cards, problems };
}

/** Where the NVML library is usually installed; used only to say whether one is present. */
const libraryPaths = [
  '/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1',
  '/usr/lib64/libnvidia-ml.so.1',
  '/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1',
  '/usr/lib/wsl/lib/libnvidia-ml.so.1',
];

/** The NVML binding, when one can be loaded, or why not. */
export function loadNvml(): { ok: true; nvml: Nvml } | { ok: false; reason: string } {
  const found = libraryPaths.find((p) => existsSync(p));
  // Node cannot call a C library without a native addon, and llmgw ships none: loading libnvidia-ml
  // needs an FFI package (koffi or similar) that is not a dependency. Until one is, NVML is not used.
  return {
    ok: false,
    reason:
      found === undefined
        ? 'libnvidia-ml.so.1 not found, and this build of llmgw has no NVML binding (no FFI package); using nvidia-smi'
        : `${found} is present, but this build of llmgw has no NVML binding (no FFI package); using nvidia-smi`,
  };
}
