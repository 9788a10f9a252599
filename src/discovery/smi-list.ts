// `nvidia-smi -L`: the only source of MIG instance UUIDs and profile names (the XML has neither).
import { LlmgwError } from '../errors/index.js';

/** One MIG line of -L. */
export interface ListedMig {
  readonly profile: string;
  readonly deviceIndex: number;
  readonly uuid: string;
  /** Read out of a pre-R470 `MIG-GPU-<parent>/<gi>/<ci>` UUID; undefined for the current form. */
  readonly gpuInstanceId: number | undefined;
  readonly computeInstanceId: number | undefined;
}

/** One GPU line of -L and the MIG lines under it. */
export interface ListedGpu {
  readonly index: number;
  readonly name: string;
  readonly uuid: string;
  readonly migs: readonly ListedMig[];
}

const gpuLine = /^GPU (\d+): (.+) \(UUID: (GPU-[^)\s]+)\)$/;
// The profile is padded so `Device` lines up, and the device number right-aligned: split on runs of
// whitespace, never on columns (`MIG 1c.3g.71gb  Device  0:` vs `MIG 1g.10gb     Device  0:`).
const migLine = /^\s+MIG\s+(\S+)\s+Device\s+(\d+):\s+\(UUID:\s+(MIG-[^)\s]+)\)$/;
const oldMigUuid = /^MIG-(GPU-[0-9A-Fa-f-]+)\/(\d+)\/(\d+)$/;
const newMigUuid = /^MIG-[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$/;

/** Parses -L output. Lines it does not recognise are errors: a skipped line could be a skipped instance. */
export function parseSmiList(text: string): ListedGpu[] {
  const gpus: { index: number; name: string; uuid: string; migs: ListedMig[] }[] = [];
  const lines = text.split(/\r?\n/);
  for (const [n, line] of lines.entries()) {
    if (line.trim() === '') continue;
    const g = gpuLine.exec(line);
    if (g !== null) {
      const [, index = '', name = '', uuid = ''] = g;
      if (Number(index) !== gpus.length) {
        throw new LlmgwError('LLMGW_SMI_LIST', `nvidia-smi -L, line ${n + 1}: GPU ${index} follows ${gpus.length} GPU line(s); expected GPU ${gpus.length}`);
      }
      gpus.push({ index: Number(index), name: name.trim(), uuid, migs: [] });
      continue;
    }
    const m = migLine.exec(line);
    if (m !== null) {
      const parent = gpus[gpus.length - 1];
      if (parent === undefined) throw new LlmgwError('LLMGW_SMI_LIST', `nvidia-smi -L, line ${n + 1}: a MIG line before any GPU line: ${JSON.stringify(line)}`);
      const [, profile = '', dev = '', uuid = ''] = m;
      const old = oldMigUuid.exec(uuid);
      if (old === null && !newMigUuid.test(uuid)) {
        throw new LlmgwError('LLMGW_SMI_LIST', `nvidia-smi -L, line ${n + 1}: ${JSON.stringify(uuid)} is neither MIG-<uuid> nor MIG-GPU-<uuid>/<gi>/<ci>`);
      }
      if (old !== null && old[1] !== parent.uuid) {
        throw new LlmgwError('LLMGW_SMI_LIST', `nvidia-smi -L, line ${n + 1}: ${uuid} names parent ${old[1] ?? ''} but sits under ${parent.uuid}`);
      }
      parent.migs.push({
        profile,
        deviceIndex: Number(dev),
        uuid,
        gpuInstanceId: old === null ? undefined : Number(old[2]),
        computeInstanceId: old === null ? undefined : Number(old[3]),
      });
      continue;
    }
    // The driver prints this instead of a list when no GPU is visible; it is an empty node, not an error.
    if (/^No devices were found\s*$/.test(line)) continue;
    throw new LlmgwError('LLMGW_SMI_LIST', `nvidia-smi -L, line ${n + 1}: unrecognised ${JSON.stringify(line)}; expected "GPU <n>: <name> (UUID: GPU-…)" or "  MIG <profile> Device <m>: (UUID: MIG-…)"`);
  }
  return gpus;
}
