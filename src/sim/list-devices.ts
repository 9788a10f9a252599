// llama.cpp's `--list-devices` output for the devices the sim pretends to have, so the agent's
// CPU-fallback check (which parses exactly this) can be exercised on a machine without GPUs.
import { LlmgwError } from '../errors/index.js';

// `NAME: description (TOTAL MiB, FREE MiB free)`; the description may itself hold parentheses.
const deviceLine = /^[^\s:][^:]*: .+ \(\d+ MiB, \d+ MiB free\)$/;

/** The stdout of `llama-server --list-devices` (build b10431 and later: "(none)" when there are none). */
export function formatListDevices(devices: readonly string[]): string {
  for (const d of devices) {
    if (!deviceLine.test(d)) {
      throw new LlmgwError(
        'LLMGW_SIM_DEVICE',
        `--devices: ${JSON.stringify(d)} is not a llama.cpp device line; write it as "CUDA0: NVIDIA L4 (22994 MiB, 22713 MiB free)"`,
      );
    }
  }
  const lines = devices.length === 0 ? ['  (none)'] : devices.map((d) => `  ${d}`);
  return ['Available devices:', ...lines].join('\n') + '\n';
}
