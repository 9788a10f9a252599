// Joins what nvidia-smi's commands say into one inventory, then turns the inventory into the devices
// placement may use. -L names the cards and their MIG instances (UUIDs, profiles); -q -x gives modes,
// ids, memory and processes; the CSV query gives compute capability. Cards are joined by UUID and
// instances by device index, never by minor_number or element order.
import type { GpuInfo } from '../engines/index.js';
import { cardClass, migClass } from './classes.js';
import type { CsvRow } from './smi-csv.js';
import type { ListedGpu, ListedMig } from './smi-list.js';
import type { Queried, QueriedGpu, QueriedMig } from './smi-query.js';
import type { Card, Device, Exclusion, GpuProcess, Inventory, Memory, MigInstance, MigMode, Wear } from './types.js';
import { known, numberOf } from './values.js';

/** What each nvidia-smi command returned; undefined where it failed (the failure is in `problems`). */
export interface SmiOutputs {
  readonly list: readonly ListedGpu[] | undefined;
  readonly query: Queried | undefined;
  readonly csv: readonly CsvRow[] | undefined;
  readonly problems: readonly string[];
}

const unknownMemory: Memory = { totalMib: undefined, usedMib: undefined, freeMib: undefined, reservedMib: undefined };
const unknownWear: Wear = {
  retiredPagesSingleBit: undefined,
  retiredPagesDoubleBit: undefined,
  retiredPagesPending: undefined,
  remappedRowsCorrectable: undefined,
  remappedRowsUncorrectable: undefined,
  remappedRowsPending: undefined,
  remappedRowsFailure: undefined,
};

function csvMode(raw: string | undefined): MigMode | undefined {
  const v = known(raw)?.toLowerCase();
  if (v === 'enabled') return 'enabled';
  if (v === 'disabled') return 'disabled';
  return undefined;
}

/** The label every view shows for a card or one of its MIG devices. */
export function deviceLabel(cardIndex: number, migDeviceIndex?: number): string {
  return migDeviceIndex === undefined ? `${cardIndex}` : `${cardIndex}/mig${migDeviceIndex}`;
}

/** The number placement gives a MIG device: 1000 + 100 x card + instance, which no card index can be. */
export function migDeviceNumber(cardIndex: number, migDeviceIndex: number): number {
  return 1000 + 100 * cardIndex + migDeviceIndex;
}

/** The card a device number belongs to, and its MIG device index when it names an instance. */
export function splitDeviceNumber(n: number): { cardIndex: number; migDeviceIndex: number | undefined } {
  if (n < 1000) return { cardIndex: n, migDeviceIndex: undefined };
  return { cardIndex: Math.floor((n - 1000) / 100), migDeviceIndex: (n - 1000) % 100 };
}

/** The view label of a device number: `3` or `0/mig2`. */
export function labelOfDeviceNumber(n: number): string {
  const s = splitDeviceNumber(n);
  return deviceLabel(s.cardIndex, s.migDeviceIndex);
}

function instancesOf(
  cardIndex: number,
  cls: string,
  listed: readonly ListedMig[],
  queried: readonly QueriedMig[],
  processes: readonly GpuProcess[],
  notes: string[],
): { instances: MigInstance[]; unattributed: GpuProcess[] } {
  const indices = [...new Set([...listed.map((m) => m.deviceIndex), ...queried.map((m) => m.deviceIndex)])].sort((a, b) => a - b);
  const claimed = new Set<GpuProcess>();
  const instances = indices.map((d): MigInstance => {
    const l = listed.find((m) => m.deviceIndex === d);
    const q = queried.find((m) => m.deviceIndex === d);
    if (l === undefined) notes.push(`${deviceLabel(cardIndex, d)}: in -q -x but not in -L, so its MIG UUID and profile are unknown`);
    const gpuInstanceId = q?.gpuInstanceId ?? l?.gpuInstanceId;
    const computeInstanceId = q?.computeInstanceId ?? l?.computeInstanceId;
    const mine = processes.filter(
      (p) => gpuInstanceId !== undefined && p.gpuInstanceId === gpuInstanceId && p.computeInstanceId === computeInstanceId,
    );
    for (const p of mine) claimed.add(p);
    return {
      deviceIndex: d,
      uuid: l?.uuid,
      profile: l?.profile,
      gpuInstanceId,
      computeInstanceId,
      multiprocessorCount: q?.multiprocessorCount,
      memory: q?.memory ?? unknownMemory,
      processes: mine,
      class: l === undefined ? undefined : migClass(cls, l.profile),
    };
  });
  return { instances, unattributed: processes.filter((p) => !claimed.has(p)) };
}

function cardOf(index: number, l: ListedGpu | undefined, q: QueriedGpu | undefined, csv: CsvRow | undefined): Card {
  const notes: string[] = [];
  const name = l?.name ?? q?.name ?? 'unknown GPU';
  const uuid = l?.uuid ?? q?.uuid ?? '';
  // Without -q -x the CSV query may still carry the card's memory (it is what names the class).
  const memory = q?.memory ?? { ...unknownMemory, totalMib: numberOf(csv?.['memory.total']) };
  const cls = cardClass(name, memory.totalMib);
  const listedMigs = l?.migs ?? [];
  if (q === undefined) notes.push('no -q -x data for this card: MIG mode, memory, processes and readings are unknown');
  let migCurrent = q?.migCurrent ?? csvMode(csv?.['mig.mode.current']);
  const migPending = q?.migPending ?? csvMode(csv?.['mig.mode.pending']);
  // -L prints MIG lines only for instances that exist, so they prove MIG is on when nothing else says.
  if (migCurrent === undefined && listedMigs.length > 0) migCurrent = 'enabled';
  if (migCurrent !== 'enabled' && listedMigs.length > 0) notes.push(`-L lists ${listedMigs.length} MIG device(s) but -q -x says MIG is ${migCurrent ?? 'unknown'}`);
  if (q !== undefined && !q.hasMigDevicesElement && q.migCurrent === undefined) notes.push('this driver schema has no MIG elements');
  const processes = q?.processes ?? [];
  const mig = migCurrent === 'enabled' ? instancesOf(index, cls, listedMigs, q?.migDevices ?? [], processes, notes) : { instances: [], unattributed: processes };
  return {
    index,
    uuid,
    name,
    busId: q?.busId,
    class: cls,
    computeCapability: known(csv?.compute_cap),
    migCurrent,
    migPending,
    memory,
    utilisationPct: migCurrent === 'enabled' ? undefined : q?.utilisationPct,
    temperatureC: q?.temperatureC,
    powerDrawW: q?.powerDrawW,
    powerLimitW: q?.powerLimitW,
    wear: q?.wear ?? unknownWear,
    processes: mig.unattributed,
    instances: mig.instances,
    notes,
  };
}

/** One inventory from nvidia-smi's outputs; works with any subset of them, noting what is missing. */
export function inventoryFromSmi(o: SmiOutputs): Inventory {
  const problems = [...o.problems];
  const queried = o.query?.gpus ?? [];
  const csvByUuid = new Map((o.csv ?? []).flatMap((r) => (r.uuid === undefined ? [] : [[r.uuid, r] as const])));
  const cards: Card[] = [];
  if (o.list !== undefined) {
    for (const l of o.list) cards.push(cardOf(l.index, l, queried.find((q) => q.uuid === l.uuid), csvByUuid.get(l.uuid)));
    for (const q of queried) {
      if (o.list.some((l) => l.uuid === q.uuid)) continue;
      const c = cardOf(cards.length, undefined, q, q.uuid === undefined ? undefined : csvByUuid.get(q.uuid));
      cards.push({ ...c, notes: [...c.notes, '-q -x lists this card and -L does not; its index is a guess'] });
    }
  } else {
    queried.forEach((q, i) => cards.push(cardOf(i, undefined, q, q.uuid === undefined ? undefined : csvByUuid.get(q.uuid))));
  }
  const attached = o.query?.attachedGpus;
  if (o.query !== undefined && attached !== undefined && attached !== queried.length) {
    problems.push(`-q -x says attached_gpus ${attached} but holds ${queried.length} <gpu> element(s); the elements are what is used`);
  }
  const source = o.list === undefined && o.query === undefined ? 'none' : 'nvidia-smi';
  return { source, driverVersion: o.query?.driverVersion, cards, problems };
}

/** What placement may use, and what it must leave out with the reason. */
export interface Usable {
  readonly devices: readonly Device[];
  readonly excluded: readonly Exclusion[];
}

/** The devices of an inventory: whole cards, or a MIG card's instances in its place. */
export function usableDevices(inv: Inventory): Usable {
  const devices: Device[] = [];
  const excluded: Exclusion[] = [];
  for (const c of inv.cards) {
    if (c.migCurrent !== 'enabled') {
      devices.push({
        index: c.index,
        label: deviceLabel(c.index),
        uuid: c.uuid,
        class: c.class,
        cardIndex: c.index,
        mig: undefined,
        name: c.name,
        computeCapability: c.computeCapability,
        memoryTotalMib: c.memory.totalMib,
      });
      continue;
    }
    if (c.instances.length === 0) {
      excluded.push({
        label: deviceLabel(c.index),
        cardIndex: c.index,
        reason: `MIG is enabled and no instance is carved, so CUDA can use nothing on it; carve instances (nvidia-smi mig -i ${c.index} -cgi <profiles> -C) or turn MIG off (nvidia-smi -i ${c.index} -mig 0)`,
      });
      continue;
    }
    for (const m of c.instances) {
      const label = deviceLabel(c.index, m.deviceIndex);
      if (m.uuid === undefined || m.profile === undefined || m.class === undefined) {
        excluded.push({
          label,
          cardIndex: c.index,
          reason: 'nvidia-smi -L did not list this instance, so its MIG UUID (the only name CUDA opens it by) and profile are unknown',
        });
        continue;
      }
      devices.push({
        index: migDeviceNumber(c.index, m.deviceIndex),
        label,
        uuid: m.uuid,
        class: m.class,
        cardIndex: c.index,
        mig: { deviceIndex: m.deviceIndex, profile: m.profile, gpuInstanceId: m.gpuInstanceId },
        name: `${c.name} MIG ${m.profile}`,
        computeCapability: c.computeCapability,
        memoryTotalMib: m.memory.totalMib,
      });
    }
  }
  return { devices, excluded };
}

/** The facts an engine's validation needs about a device. */
export function gpuInfoOf(d: Device): GpuInfo {
  return { index: d.index, name: d.name, computeCapability: d.computeCapability ?? '', memoryTotalMb: d.memoryTotalMib };
}
