// The real llama.cpp for tests: the prebuilt CPU llama-server in shared/engines/llama.cpp, installed
// the way an operator installs it (`llmgw engines install`), and the project's tiny qwen3 model from
// the cache. Where the build is missing the tests fail saying where they looked: the suite needs
// ../shared (its fixtures and vectors too), and CI has it.
import { existsSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { installEngine, type InstalledEngine } from '../../src/actors/index.js';
import { cacheDirOf } from '../../src/cli/engines.js';
import { parseDevices } from '../../src/engines/index.js';
import { tinyQwen3File } from '../../src/gguf/index.js';
import { qwen3TokenizerFile } from '../../src/tokenize/index.js';
import { sharedDir } from './shared.js';

const buildDir = join(sharedDir, 'engines', 'llama.cpp');

/** The prebuilt llama-server tarball; throws naming where it looked when this checkout has none beside it. */
export function llamaCppTarball(): string {
  const name = existsSync(buildDir) ? readdirSync(buildDir).find((n) => /-linux-x64-cpu\.tar\.gz$/.test(n)) : undefined;
  if (name === undefined) {
    throw new Error(`the real-engine tests need llama.cpp's prebuilt llama-server: no *-linux-x64-cpu.tar.gz in ${buildDir}; check out shared/ beside the repository or set LLMGW_SHARED`);
  }
  return join(buildDir, name);
}

/** Installs the build into `stateDir` as `llmgw engines install llamacpp` does. */
export function installLlamaCpp(tarball: string, stateDir: string): Promise<InstalledEngine> {
  return installEngine({ engine: 'llamacpp', from: tarball, stateDir, parseDevices });
}

/** The tiny qwen3 GGUF from the cache every run shares (made on first use). */
export async function tinyModel(): Promise<string> {
  return (await tinyQwen3File({ cacheDir: cacheDirOf(process.env), tokenizerDir: dirname(qwen3TokenizerFile()) })).path;
}
