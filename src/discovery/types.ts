// What discovery reports about a node's GPUs. Every reading the driver may withhold is optional:
// `N/A`, `[Insufficient Permissions]`, a missing element on an older schema all become undefined,
// never zero, because a zero would read as "free memory: none" or "power: idle" and be acted on.

/** A card's MIG mode. Undefined where a value of this type is optional: the driver did not say. */
export type MigMode = 'enabled' | 'disabled' | 'unsupported';

/** Frame-buffer memory in MiB, as nvidia-smi reports it. */
export interface Memory {
  readonly totalMib: number | undefined;
  readonly usedMib: number | undefined;
  readonly freeMib: number | undefined;
  readonly reservedMib: number | undefined;
}

/** A process using a card; on a MIG card, the instance it runs in. */
export interface GpuProcess {
  readonly pid: number | undefined;
  /** `C`, `G` or `C+G`. */
  readonly type: string | undefined;
  /** Empty names are common on Windows; kept empty rather than invented. */
  readonly name: string;
  readonly usedMemoryMib: number | undefined;
  readonly gpuInstanceId: number | undefined;
  readonly computeInstanceId: number | undefined;
}

/** Memory wear counters; undefined where the card has no such mechanism or the schema no element. */
export interface Wear {
  readonly retiredPagesSingleBit: number | undefined;
  readonly retiredPagesDoubleBit: number | undefined;
  readonly retiredPagesPending: boolean | undefined;
  readonly remappedRowsCorrectable: number | undefined;
  readonly remappedRowsUncorrectable: number | undefined;
  readonly remappedRowsPending: boolean | undefined;
  readonly remappedRowsFailure: boolean | undefined;
}

/** One MIG device (strictly, one compute instance) of a card in MIG mode. */
export interface MigInstance {
  /** `Device N` in `nvidia-smi -L`, equal to `mig_device/index` in the XML. */
  readonly deviceIndex: number;
  /** `MIG-<uuid>` (or the pre-R470 `MIG-GPU-<uuid>/<gi>/<ci>`); undefined when -L did not list it. */
  readonly uuid: string | undefined;
  /** The profile name as `-L` prints it (`3g.40gb`, `1c.3g.71gb`); never derived from memory. */
  readonly profile: string | undefined;
  readonly gpuInstanceId: number | undefined;
  readonly computeInstanceId: number | undefined;
  readonly multiprocessorCount: number | undefined;
  /** The GPU instance's memory: compute instances of one GPU instance each report all of it. */
  readonly memory: Memory;
  readonly processes: readonly GpuProcess[];
  /** Card class + `-mig-` + profile; undefined without a profile. */
  readonly class: string | undefined;
}

/** What a card reads out about itself, the same whichever nvidia-smi output it came from. */
export interface CardReadings {
  /** Undefined when the schema predates MIG (no `mig_mode` element) or the value is unreadable. */
  readonly migCurrent: MigMode | undefined;
  /** The mode after the next GPU reset (Ampere) or instance change. */
  readonly migPending: MigMode | undefined;
  readonly memory: Memory;
  /** Left out (undefined) under MIG: nvidia-smi has no per-instance utilisation, and N/A is not 0. */
  readonly utilisationPct: number | undefined;
  readonly temperatureC: number | undefined;
  readonly powerDrawW: number | undefined;
  readonly powerLimitW: number | undefined;
  readonly wear: Wear;
  /** Processes not attributed to an instance (all of them on a whole card). */
  readonly processes: readonly GpuProcess[];
}

/** One physical card. */
export interface Card extends CardReadings {
  /** nvidia-smi's index: order in `-L` and in the XML (PCI bus order), never `minor_number`. */
  readonly index: number;
  readonly uuid: string;
  readonly name: string;
  /** PCI bus id normalised to a 4-digit domain (`0000:01:00.0`), as llama.cpp writes it. */
  readonly busId: string | undefined;
  /** Product and memory: `a100-80g`. */
  readonly class: string;
  readonly computeCapability: string | undefined;
  /** Instances, in device-index order; empty on a whole card or a MIG card with nothing carved. */
  readonly instances: readonly MigInstance[];
  /** What the sources disagreed on or left out for this card, for doctor. */
  readonly notes: readonly string[];
}

/** Where an inventory came from, which doctor prints. */
export type InventorySource = 'nvidia-smi' | 'nvml' | 'none';

/** A node's GPUs as discovered. */
export interface Inventory {
  readonly source: InventorySource;
  readonly driverVersion: string | undefined;
  readonly cards: readonly Card[];
  /** Source-level problems (a command that failed, a schema without MIG elements). */
  readonly problems: readonly string[];
}

/** A unit placement can give a replica: a whole card, or one MIG instance. */
export interface Device {
  /** A card's index, or 1000 + 100 x card + MIG device index for an instance. */
  readonly index: number;
  /** `0` for a card, `0/mig2` for an instance: the name every view shows. */
  readonly label: string;
  /** `GPU-…` or `MIG-…`: what CUDA_VISIBLE_DEVICES gets for an instance. */
  readonly uuid: string;
  readonly class: string;
  readonly cardIndex: number;
  /** Set for a MIG instance; compute instances of one GPU instance share its memory. */
  readonly mig: { readonly deviceIndex: number; readonly profile: string; readonly gpuInstanceId: number | undefined } | undefined;
  readonly name: string;
  readonly computeCapability: string | undefined;
  readonly memoryTotalMib: number | undefined;
}

/** A card, or an instance, that placement must leave out, and why. */
export interface Exclusion {
  readonly label: string;
  readonly cardIndex: number;
  readonly reason: string;
}
