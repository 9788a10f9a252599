// How nvidia-smi writes a missing reading, and how each becomes unknown rather than zero.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { parseSmiQuery } from '../../src/discovery/index.js';

const gpuWith = (inner: string): string =>
  `<?xml version="1.0" ?><nvidia_smi_log><gpu id="00000000:01:00.0"><product_name>NVIDIA A100-SXM4-80GB</product_name><uuid>GPU-1</uuid>${inner}</gpu></nvidia_smi_log>`;

const rows: readonly { why: string; inner: string; want: number | undefined }[] = [
  { why: 'a plain reading', inner: '<fb_memory_usage><total>81920 MiB</total></fb_memory_usage>', want: 81920 },
  { why: 'N/A is unknown', inner: '<fb_memory_usage><total>N/A</total></fb_memory_usage>', want: undefined },
  { why: 'unprivileged pods: [Insufficient Permissions] is unknown', inner: '<fb_memory_usage><total>[Insufficient Permissions]</total></fb_memory_usage>', want: undefined },
  { why: 'R590 deprecations are unknown', inner: '<fb_memory_usage><total>Requested functionality has been deprecated</total></fb_memory_usage>', want: undefined },
  { why: 'anonymised sizes ("A MiB") are unknown, not NaN', inner: '<fb_memory_usage><total>A MiB</total></fb_memory_usage>', want: undefined },
  { why: 'an element the schema lacks is unknown', inner: '', want: undefined },
  { why: 'padded values are trimmed', inner: '<fb_memory_usage><total> 1024 MiB </total></fb_memory_usage>', want: 1024 },
  { why: 'a real zero stays zero', inner: '<fb_memory_usage><total>0 MiB</total></fb_memory_usage>', want: 0 },
];
for (const r of rows) {
  void test(`readings: ${r.why}`, () => assert.equal(parseSmiQuery(gpuWith(r.inner)).gpus[0]?.memory.totalMib, r.want));
}

void test('readings: MIG mode N/A means no MIG support; a missing mig_mode means unknown', () => {
  assert.equal(parseSmiQuery(gpuWith('<mig_mode><current_mig>N/A</current_mig><pending_mig>N/A</pending_mig></mig_mode>')).gpus[0]?.migCurrent, 'unsupported');
  assert.equal(parseSmiQuery(gpuWith('')).gpus[0]?.migCurrent, undefined);
});

void test('readings: the PCI bus id is normalised to a 4-digit domain, as llama.cpp writes it', () => {
  assert.equal(parseSmiQuery(gpuWith('')).gpus[0]?.busId, '0000:01:00.0');
});
