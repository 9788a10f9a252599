// `llmgw engines`: the engine builds this node's agent installed (install, list), and the project's
// own tiny qwen3 model for trying a real engine without downloading one (tiny-model).
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { installedEngines, installEngine } from '../actors/index.js';
import { parseDevices } from '../engines/index.js';
import { LlmgwError } from '../errors/index.js';
import { tinyQwen3File } from '../gguf/index.js';
import { qwen3TokenizerFile } from '../tokenize/index.js';
import { loadConfig } from './config.js';
import { defaultConfigSource, defaultConfigYaml } from './default-config.js';
import { readOptions } from './doctor.js';
import { readFileSync } from 'node:fs';

const usage = `usage: llmgw engines install ENGINE FROM [--config FILE | --state-dir DIR]
       llmgw engines list [--config FILE | --state-dir DIR]
       llmgw engines tiny-model

install  unpacks a build (a .tar.gz or a directory; llamacpp: one holding bin/llama-server) under
         the agent's state directory (agent.state_dir of --config, else .llmgw-state), runs it with
         --version and --list-devices, and records it: serve, agent, plan and doctor then run it in
         preference to engines.ENGINE.bin or PATH.
list     prints each recorded build: engine, version, devices, binary.
tiny-model  makes (once, into the cache directory: LLMGW_CACHE_DIR, else ~/.cache/llmgw) a small
         random-weight qwen3 GGUF with Qwen3's tokenizer and chat template, and prints its path.
`;

/** The directory for made models: LLMGW_CACHE_DIR, else XDG's cache, else ~/.cache; never the repository. */
export function cacheDirOf(env: NodeJS.ProcessEnv): string {
  return env.LLMGW_CACHE_DIR ?? join(env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'llmgw');
}

function stateDirOf(values: Record<string, string>): string {
  const dir = values['--state-dir'];
  if (dir !== undefined) return dir;
  const file = values['--config'];
  const config = loadConfig(file === undefined ? defaultConfigYaml : readFileSync(file, 'utf8'), file ?? defaultConfigSource);
  return config.agent.stateDir;
}

/** Runs `llmgw engines`; returns the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  const [verb, ...rest] = argv;
  const positional = verb === 'install' ? rest.slice(0, 2) : [];
  const opts = readOptions(rest.slice(positional.length), ['--config', '--state-dir']);
  if (verb === undefined || verb === '--help' || verb === '-h' || opts.help) {
    (verb === undefined ? process.stderr : process.stdout).write(usage);
    return verb === undefined ? 2 : 0;
  }
  if (opts.error !== undefined || !['install', 'list', 'tiny-model'].includes(verb) || (verb === 'install' && positional.length < 2)) {
    process.stderr.write(`llmgw engines: ${opts.error ?? (verb === 'install' ? 'install needs ENGINE and FROM' : `unknown verb ${JSON.stringify(verb)}`)}\n${usage}`);
    return 2;
  }
  try {
    if (verb === 'tiny-model') {
      const m = await tinyQwen3File({ cacheDir: cacheDirOf(process.env), tokenizerDir: dirname(qwen3TokenizerFile()) });
      process.stdout.write(`${m.path}\n`);
      return 0;
    }
    const stateDir = stateDirOf(opts.values);
    if (verb === 'list') {
      const all = installedEngines(stateDir);
      if (all.length === 0) process.stdout.write(`no engine installed under ${stateDir}\n`);
      for (const i of all) process.stdout.write(`${i.engine}: ${i.version}; devices: ${i.devices.length === 0 ? 'none (CPU)' : i.devices.join(', ')}; ${i.bin}\n`);
      return 0;
    }
    const [engine = '', from = ''] = positional;
    const r = await installEngine({ engine, from, stateDir, parseDevices });
    process.stdout.write(`installed ${r.engine} (${r.version}) from ${r.source}: ${r.bin}; devices: ${r.devices.length === 0 ? 'none (CPU)' : r.devices.join(', ')}\n`);
    return 0;
  } catch (e) {
    if (e instanceof LlmgwError) {
      process.stderr.write(`llmgw engines: ${e.message}\n`);
      return 1;
    }
    throw e;
  }
}
