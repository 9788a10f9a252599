// Where the captured nvidia-smi and llama.cpp outputs live, and how to read one, including a
// section of a capture bundle (the same section rules as the fake nvidia-smi script uses).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot, sharedDir } from '../support/shared.js';

export { repoRoot };

/** The shared captures of real nvidia-smi and llama-server outputs. */
export const gpuFixtures = join(sharedDir, 'fixtures', 'gpu');

/** The fake nvidia-smi script. */
export const fakeSmi = join(repoRoot, 'test', 'discovery', 'fixtures', 'fake-nvidia-smi.mjs');

/** A fixture's full path. */
export const fixture = (name: string): string => join(gpuFixtures, name);

/** A fixture's text. */
export const readFixture = (name: string): string => readFileSync(fixture(name), 'utf8');

/** The output of one command in a capture bundle: `state` is `idle`, `load` or `capabilities`. */
export function bundleSection(name: string, state: string, command: (cmd: string) => boolean): string {
  const parts = readFixture(name).split(/^#{20,}\n/m);
  for (let i = 0; i + 1 < parts.length; i++) {
    const head = parts[i] ?? '';
    const title = /^# (\S+) :: (.*)$/m.exec(head);
    const cmd = /^# \$ (.*)$/m.exec(head);
    if (title?.[1] === state && cmd?.[1] !== undefined && command(cmd[1].trim())) return parts[i + 1] ?? '';
  }
  throw new Error(`${name}: no ${state} section for that command`);
}

export const bundles = {
  h100Mig: 'nvidia-smi-capture-bundle_h100-80gb-hbm3_mig-3g.40gb+2g.20gb+2x1g.10gb_driver-590.48.01_masked.txt',
  h100: 'nvidia-smi-capture-bundle_h100-80gb-hbm3_no-mig_driver-590.48.01_masked.txt',
  h200Mig: 'nvidia-smi-capture-bundle_h200_mig-1c.3g.71gb+2c.3g.71gb+2g.35gb+2x1g.18gb_driver-590.48.01_masked.txt',
} as const;
