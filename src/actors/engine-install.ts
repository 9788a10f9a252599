// Engine builds the agent installed itself: unpacked under the state directory, run once with
// --version and --list-devices, and recorded only when both answered. A recorded build is the one
// the agent has seen run, so it wins over a configured or PATH binary (the engine's useInstalled).
import { execa } from 'execa';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { LlmgwError } from '../errors/index.js';

/** One installed build, as recorded in `<state_dir>/engines/<engine>.json`. */
export interface InstalledEngine {
  readonly engine: string;
  /** The server binary, an absolute path. */
  readonly bin: string;
  /** The tarball or directory it came from. */
  readonly source: string;
  /** The first line of its --version output that names a version. */
  readonly version: string;
  /** The devices its --list-devices named: none on a CPU build. */
  readonly devices: readonly string[];
  readonly installedAt: string;
}

// What each installable engine's server binary is called inside a build, and where a build may keep it.
const servers: Readonly<Record<string, string>> = { llamacpp: 'llama-server' };
const binDirs = ['bin', '', 'build/bin'];
const RUN_TIMEOUT_MS = 30_000;

const recordFile = (stateDir: string, engine: string): string => join(stateDir, 'engines', `${engine}.json`);

function isInstalled(v: unknown): v is InstalledEngine {
  if (typeof v !== 'object' || v === null) return false;
  const r = v as Record<string, unknown>;
  return typeof r.engine === 'string' && typeof r.bin === 'string' && typeof r.version === 'string' && Array.isArray(r.devices) && typeof r.source === 'string';
}

/** Every build recorded under `stateDir` whose binary is still there; none when nothing was installed. */
export function installedEngines(stateDir: string): InstalledEngine[] {
  const dir = join(stateDir, 'engines');
  if (!existsSync(dir)) return [];
  const out: InstalledEngine[] = [];
  for (const name of readdirSync(dir)) {
    if (!name.endsWith('.json')) continue;
    let v: unknown;
    try {
      v = JSON.parse(readFileSync(join(dir, name), 'utf8'));
    } catch (e) {
      // A torn record names no build: the engine falls back to its configured binary, as before any install.
      if (e instanceof SyntaxError) continue;
      throw e;
    }
    if (isInstalled(v) && existsSync(v.bin)) out.push(v);
  }
  return out;
}

function serverIn(root: string, server: string): string | undefined {
  // A tarball usually holds one top directory; look inside it too.
  const tops = [root, ...readdirSync(root).map((n) => join(root, n)).filter((p) => statSync(p).isDirectory())];
  for (const top of tops) {
    for (const d of binDirs) {
      const p = join(top, d, server);
      if (existsSync(p) && statSync(p).isFile()) return p;
    }
  }
  return undefined;
}

/** The version line of `--version` output: llama.cpp prints "version: N (commit)" on stderr. */
export function versionLine(output: string): string {
  const lines = output.split(/\r?\n/).map((l) => l.trim()).filter((l) => l !== '');
  return lines.find((l) => /^version\b/i.test(l)) ?? lines[0] ?? '';
}

/**
 * Installs `engine` from `from` (a .tar.gz or a directory) under `stateDir`: unpacks or copies it to a
 * directory of its own, runs its server with --version and --list-devices (`parseDevices` reads the
 * listing), and records it. A build that does not run is removed and refused with its own output,
 * and the previous install, if any, stays in force.
 */
export async function installEngine(o: {
  engine: string;
  from: string;
  stateDir: string;
  parseDevices: (output: string) => readonly string[];
  signal?: AbortSignal;
}): Promise<InstalledEngine> {
  const server = servers[o.engine];
  if (server === undefined) {
    throw new LlmgwError('LLMGW_ENGINE_INSTALL', `engine ${JSON.stringify(o.engine)} is not installed by the agent (it installs ${Object.keys(servers).join(', ')}); set engines.${o.engine}.bin instead`);
  }
  const from = resolve(o.from);
  if (!existsSync(from)) throw new LlmgwError('LLMGW_ENGINE_INSTALL', `${from} does not exist; give a llama.cpp build as a .tar.gz or a directory holding bin/${server}`);
  const home = join(resolve(o.stateDir), 'engines', o.engine);
  mkdirSync(home, { recursive: true });
  const staging = join(home, `.staging-${process.pid}-${Date.now()}`);
  mkdirSync(staging);
  try {
    if (statSync(from).isDirectory()) cpSync(from, staging, { recursive: true, verbatimSymlinks: true });
    else {
      const r = await execa('tar', ['-xzf', from, '-C', staging], { reject: false, stdin: 'ignore', all: true, cancelSignal: o.signal, timeout: RUN_TIMEOUT_MS });
      if (r.failed) throw new LlmgwError('LLMGW_ENGINE_INSTALL', `${from} does not unpack with tar -xzf (${(r.all ?? r.shortMessage).trim().slice(0, 300)}); give a .tar.gz or a directory`);
    }
    const found = serverIn(staging, server);
    if (found === undefined) throw new LlmgwError('LLMGW_ENGINE_INSTALL', `${from} holds no ${server} (looked in bin/, the top and build/bin/); give the build's install prefix`);
    const run = async (arg: string): Promise<string> => {
      const r = await execa(found, [arg], { reject: false, stdin: 'ignore', all: true, cancelSignal: o.signal, timeout: RUN_TIMEOUT_MS });
      if (r.failed) throw new LlmgwError('LLMGW_ENGINE_INSTALL', `${server} ${arg} from ${from} failed (${r.shortMessage}): ${(r.all ?? '').trim().slice(-500)}; it cannot run on this node`);
      return r.all ?? '';
    };
    const version = versionLine(await run('--version'));
    const devices = o.parseDevices(await run('--list-devices'));
    // Named for the source and the moment: a reinstall of the same file never overwrites a build
    // that a running engine still has open.
    const dir = join(home, `${basename(from).replace(/\.tar\.gz$|\.tgz$/, '')}-${Date.now()}`);
    renameSync(staging, dir);
    const record: InstalledEngine = { engine: o.engine, bin: join(dir, found.slice(staging.length + 1)), source: from, version, devices, installedAt: new Date().toISOString() };
    const file = recordFile(o.stateDir, o.engine);
    writeFileSync(`${file}.tmp`, JSON.stringify(record, null, 2));
    renameSync(`${file}.tmp`, file);
    return record;
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}
