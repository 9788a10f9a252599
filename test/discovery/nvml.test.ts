// The NVML path, over a fake NVML: the same inventory shape as nvidia-smi's, MIG cards as their
// instances with profiles from NVML's MIG device names, and unknowns left undefined.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { inventoryFromNvml, loadNvml, profileFromMigName, usableDevices, type Nvml, type NvmlHandle } from '../../src/discovery/index.js';

interface FakeDevice {
  name: string;
  uuid: string;
  memBytes?: { totalBytes: number; usedBytes: number; freeBytes: number };
  mig?: { current: boolean; pending: boolean };
  slots?: (FakeDevice | undefined)[];
  gi?: number;
  ci?: number;
  procs?: { pid: number; usedBytes: number | undefined; gpuInstanceId: number | undefined; computeInstanceId: number | undefined }[];
  util?: number;
}

const handle = (d: FakeDevice): NvmlHandle => d as unknown as NvmlHandle;
const dev = (h: NvmlHandle): FakeDevice => h as unknown as FakeDevice;
const GiB = 1024 ** 3;

function fakeNvml(cards: FakeDevice[]): Nvml {
  return {
    driverVersion: () => '550.54.15',
    deviceCount: () => cards.length,
    deviceHandleByIndex: (i) => {
      const c = cards[i];
      if (c === undefined) throw new Error(`no card ${i}`);
      return handle(c);
    },
    name: (h) => dev(h).name,
    uuid: (h) => dev(h).uuid,
    pciBusId: () => '00000000:41:00.0',
    memoryInfo: (h) => dev(h).memBytes,
    computeCapability: () => ({ major: 8, minor: 0 }),
    migMode: (h) => dev(h).mig,
    maxMigDeviceCount: (h) => dev(h).slots?.length ?? 0,
    migDeviceHandleByIndex: (h, i) => {
      const m = dev(h).slots?.[i];
      return m === undefined ? undefined : handle(m);
    },
    gpuInstanceId: (h) => dev(h).gi,
    computeInstanceId: (h) => dev(h).ci,
    temperatureC: () => 31,
    powerUsageMw: () => 61_500,
    powerLimitMw: () => 400_000,
    utilisationPct: (h) => dev(h).util,
    computeProcesses: (h) => dev(h).procs ?? [],
    retiredPages: () => undefined,
    remappedRows: () => ({ correctable: 0, uncorrectable: 0, pending: false, failure: false }),
  };
}

const mig3g = (uuid: string, gi: number): FakeDevice => ({
  name: 'NVIDIA A100 80GB PCIe MIG 3g.40gb',
  uuid,
  gi,
  ci: 0,
  memBytes: { totalBytes: 40192 * 1024 * 1024, usedBytes: 0, freeBytes: 40192 * 1024 * 1024 },
});

void test('nvml: a MIG card is its instances (empty slots skipped), a whole card stays whole', () => {
  const nvml = fakeNvml([
    {
      name: 'NVIDIA A100 80GB PCIe',
      uuid: 'GPU-932bfb2c-849a-2a22-1e84-9eff6bc02b39',
      memBytes: { totalBytes: 80 * GiB, usedBytes: GiB, freeBytes: 79 * GiB },
      mig: { current: true, pending: true },
      // Slot 1 empty: instances need not be contiguous.
      slots: [mig3g('MIG-0929581a-2be6-5dec-bf34-0954c6c529a6', 1), undefined, mig3g('MIG-3adbed3a-d03d-549f-a016-ba1fd7359f23', 2)],
      procs: [{ pid: 77, usedBytes: 2 * GiB, gpuInstanceId: 2, computeInstanceId: 0 }],
      util: undefined,
    },
    { name: 'NVIDIA A100 80GB PCIe', uuid: 'GPU-41255406-c9af-f94b-4ebf-9d57ad1853da', memBytes: { totalBytes: 80 * GiB, usedBytes: 0, freeBytes: 80 * GiB }, mig: { current: false, pending: true }, util: 0 },
  ]);
  const inv = inventoryFromNvml(nvml);
  assert.equal(inv.source, 'nvml');
  const [c0, c1] = inv.cards;
  assert.deepEqual(
    c0?.instances.map((m) => [m.deviceIndex, m.profile, m.uuid, m.gpuInstanceId, m.memory.totalMib, m.class, m.processes.map((p) => p.pid)]),
    [
      [0, '3g.40gb', 'MIG-0929581a-2be6-5dec-bf34-0954c6c529a6', 1, 40192, 'a100-80g-mig-3g.40gb', []],
      [2, '3g.40gb', 'MIG-3adbed3a-d03d-549f-a016-ba1fd7359f23', 2, 40192, 'a100-80g-mig-3g.40gb', [77]],
    ],
  );
  assert.equal(c0?.utilisationPct, undefined);
  assert.deepEqual([c0?.computeCapability, c0?.powerDrawW, c0?.powerLimitW, c0?.busId], ['8.0', 61.5, 400, '0000:41:00.0']);
  assert.deepEqual([c1?.migCurrent, c1?.migPending, c1?.utilisationPct, c1?.instances.length], ['disabled', 'enabled', 0, 0]);
  assert.equal(c0?.wear.retiredPagesSingleBit, undefined, 'NVML errors are unknown, not 0');
  assert.deepEqual(usableDevices(inv).devices.map((d) => `${d.index} ${d.label}`), ['1000 0/mig0', '1002 0/mig2', '1 1']);
});

void test('nvml: a card without MIG support reports unsupported, memory unknown stays unknown', () => {
  const inv = inventoryFromNvml(fakeNvml([{ name: 'NVIDIA GeForce RTX 3080', uuid: 'GPU-19d6d965-2acc-f646-00f8-4c76979aabb4', util: 65 }]));
  const c = inv.cards[0];
  assert.deepEqual([c?.migCurrent, c?.memory.totalMib, c?.class], ['unsupported', undefined, 'rtx-3080']);
});

void test('nvml: MIG profile names come from NVML device names, never from memory', () => {
  assert.equal(profileFromMigName('NVIDIA H200 MIG 1c.3g.71gb'), '1c.3g.71gb');
  assert.equal(profileFromMigName('NVIDIA A100-SXM4-40GB MIG 1g.5gb+me'), '1g.5gb+me');
  assert.equal(profileFromMigName('NVIDIA A100-SXM4-40GB'), undefined);
});

void test('nvml: this build has no binding, and says why', () => {
  const r = loadNvml();
  assert.equal(r.ok, false);
  if (!r.ok) assert.match(r.reason, /no NVML binding \(no FFI package\); using nvidia-smi/);
});
