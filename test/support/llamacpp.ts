// The real llama.cpp for tests: the prebuilt CPU llama-server in shared/engines/llama.cpp, installed
// the way an operator installs it (`llmgw engines install`), and the project's tiny qwen3 model from
// the cache. Where the build is missing the tests say so; in CI (which has ../shared) they fail.
import { existsSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { TestContext } from 'node:test';
import { installEngine, type InstalledEngine } from '../../src/actors/index.js';
import { cacheDirOf } from '../../src/cli/engines.js';
import { parseDevices } from '../../src/engines/index.js';
import { tinyQwen3File } from '../../src/gguf/index.js';
import { qwen3TokenizerFile } from '../../src/tokenize/index.js';
import { sharedDir } from './shared.js';

const buildDir = join(sharedDir, 'engines', 'llama.cpp');

/** The prebuilt llama-server tarball, or undefined when this checkout has none beside it. */
export function llamaCppTarball(): string | undefined {
  if (!existsSync(buildDir)) return undefined;
  const name = readdirSync(buildDir).find((n) => /-linux-x64-cpu\.tar\.gz$/.test(n));
  return name === undefined ? undefined : join(buildDir, name);
}

/** The tarball, or: skips the test saying why, except in CI, where a missing engine is a failure. */
export function llamaCppOrSkip(t: TestContext): string | undefined {
  const tarball = llamaCppTarball();
  if (tarball !== undefined) return tarball;
  const why = `no prebuilt llama-server in ${buildDir} (set LLMGW_SHARED to the shared/ folder that holds engines/llama.cpp)`;
  if (process.env.CI !== undefined) throw new Error(`the real-engine tests need the llama.cpp build: ${why}`);
  t.skip(why);
  return undefined;
}

/** Installs the build into `stateDir` as `llmgw engines install llamacpp` does. */
export function installLlamaCpp(tarball: string, stateDir: string): Promise<InstalledEngine> {
  return installEngine({ engine: 'llamacpp', from: tarball, stateDir, parseDevices });
}

/** The tiny qwen3 GGUF from the cache every run shares (made on first use). */
export async function tinyModel(): Promise<string> {
  return (await tinyQwen3File({ cacheDir: cacheDirOf(process.env), tokenizerDir: dirname(qwen3TokenizerFile()) })).path;
}
