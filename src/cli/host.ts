// The facts about this machine that engine builders take as parameters: read here, at the edge.
import { readdirSync, statSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import type { Host } from '../engines/index.js';

/** The file names in `path` when it is a directory; undefined when it is a file or not there (the
 * engine then reports a missing model in its own words). */
export function listDir(path: string): readonly string[] | undefined {
  try {
    if (!statSync(path).isDirectory()) return undefined;
  } catch (e) {
    if (e instanceof Error && 'code' in e && (e.code === 'ENOENT' || e.code === 'ENOTDIR')) return undefined;
    throw e;
  }
  return readdirSync(path, { withFileTypes: true })
    .filter((d) => !d.isDirectory())
    .map((d) => d.name);
}

/** This process's host: its environment, CPUs, directory listings and how to run this llmgw again. */
export function currentHost(): Host {
  return {
    env: process.env,
    cpus: availableParallelism(),
    listDir,
    llmgwCommand: [process.execPath, fileURLToPath(new URL('./main.js', import.meta.url))],
  };
}
