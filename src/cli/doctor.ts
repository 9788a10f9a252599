// `llmgw doctor`: what this node's GPUs are and whether anything can run on them. It prints each
// card's MIG mode (current and pending) and instances, warns of every state in which nothing can
// run (a MIG change pending a reset, MIG enabled with nothing carved, a profile no device can serve,
// nvidia-smi missing or failing, a llama.cpp build that lists no GPU on a GPU node, KV events on
// loopback TCP), and exits 1 when nothing of the config (by default the built-in one) can run, so a
// provisioning script can stop there.
import { readFileSync } from 'node:fs';
import { execa } from 'execa';
import { installedEngines } from '../actors/index.js';
import { cpuClass, profileOf } from '../catalog/index.js';
import { cardLines, discoverWithSmi, inventoryFromNvml, loadNvml, usableDevices, type Inventory } from '../discovery/index.js';
import { canFallBackToCpu, type Host, type ShardSpec } from '../engines/index.js';
import { ConfigError, LlmgwError } from '../errors/index.js';
import { defaultNodeConfig, devicesByClassLines, devicesOfClass, place, withDiscovered, type NodeConfig } from '../placement/index.js';
import { loadConfig, registryOf, type Config } from './config.js';
import { defaultConfigSource, defaultConfigYaml } from './default-config.js';
import { currentHost } from './host.js';
import { ipcDirWarning, kvIpcDirOf, kvTransportOf } from './kv-transport.js';

/** Where doctor writes and what it reads, so a test runs it in-process against a fake nvidia-smi. */
export interface DoctorIo {
  readonly out: (text: string) => void;
  readonly err: (text: string) => void;
  readonly readFile: (path: string) => string;
  readonly host: Host;
}

const usage = `usage: llmgw doctor [--nvidia-smi PATH] [--config FILE] [--gateway URL] [--timeout-ms N]

Prints this node's GPUs (MIG mode, pending mode, instances, memory, processes) and warns of states
in which nothing can run. --nvidia-smi (or LLMGW_NVIDIA_SMI) runs another nvidia-smi, e.g. a fake.
Checks that each replica's profile in --config (else the built-in default that \`serve\` runs) has a
device to run on, that a llama.cpp build on a GPU node lists its GPUs, and how each engine's KV
events travel (ipc:// in the agent's private directory, or loopback TCP open to local processes).
With --gateway (a running llmgw serve, e.g. http://127.0.0.1:8080), also warns of engines whose KV
events do not arrive or whose hashes are not ours, from its /metrics.
Exits 1 when nothing in that config can run.
`;

/** Parses `--name value` and `--name=value` options; unknown ones are usage errors. */
export function readOptions(argv: readonly string[], names: readonly string[]): { values: Record<string, string>; help?: true; error?: string } {
  const values: Record<string, string> = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] ?? '';
    if (a === '--help' || a === '-h') return { values, help: true };
    const eq = a.indexOf('=');
    const name = eq < 0 ? a : a.slice(0, eq);
    if (!names.includes(name)) return { values, error: `unknown argument ${JSON.stringify(a)}` };
    const v = eq < 0 ? argv[++i] : a.slice(eq + 1);
    // `--config --nvidia-smi x` is a forgotten value, not a config file named "--nvidia-smi".
    if (v === undefined || v === '' || (eq < 0 && v.startsWith('--'))) return { values, error: `${name} needs a value` };
    values[name] = v;
  }
  return { values };
}

/** The GPU inventory, from NVML when a binding loads, else nvidia-smi; and a line saying which. */
export async function discover(o: { nvidiaSmi: string; timeoutMs: number; env: Host['env'] }): Promise<{ inventory: Inventory; sourceLine: string }> {
  const nvml = loadNvml();
  if (nvml.ok) return { inventory: inventoryFromNvml(nvml.nvml), sourceLine: 'source: NVML' };
  const inventory = await discoverWithSmi({ bin: o.nvidiaSmi, timeoutMs: o.timeoutMs, env: o.env });
  return { inventory, sourceLine: `source: ${o.nvidiaSmi} (NVML not used: ${nvml.reason})` };
}

/** The nvidia-smi to run: --nvidia-smi, else LLMGW_NVIDIA_SMI, else the one on PATH. */
export function nvidiaSmiOf(flag: string | undefined, env: Host['env']): string {
  return flag ?? env.LLMGW_NVIDIA_SMI ?? 'nvidia-smi';
}

function modeWarnings(inv: Inventory): string[] {
  const out: string[] = [];
  for (const c of inv.cards) {
    const cur = c.migCurrent;
    const pend = c.migPending;
    if ((cur === 'enabled' || cur === 'disabled') && (pend === 'enabled' || pend === 'disabled') && cur !== pend) {
      const after =
        pend === 'enabled'
          ? 'the card then has MIG on and no instances, so nothing runs on it until instances are carved'
          : 'its instances then go away and the card is used whole';
      out.push(
        `card ${c.index}: MIG change pending a reset: current ${cur}, pending ${pend}; it takes effect when the card is reset ` +
          `(stop its processes, then nvidia-smi -i ${c.index} -r) and ${after}`,
      );
    }
  }
  return out;
}

/** Runs each distinct llama.cpp build placed on a GPU with --list-devices; warns when it lists none. */
async function llamaCppWarnings(config: Config, shards: readonly ShardSpec[], io: DoctorIo, timeoutMs: number): Promise<string[]> {
  const registry = registryOf(config);
  const out: string[] = [];
  const seen = new Set<string>();
  for (const spec of shards) {
    if (spec.gpuIndices.length === 0) continue;
    let engine;
    try {
      engine = registry.get(spec.profile.engine);
    } catch (e) {
      if (e instanceof LlmgwError) continue; // catalog validation reported it
      throw e;
    }
    if (!canFallBackToCpu(engine)) continue;
    const cmd = engine.listDevicesCommand(spec, io.host);
    if (seen.has(cmd.path)) continue;
    seen.add(cmd.path);
    const r = await execa(cmd.path, [...cmd.args], { env: Object.fromEntries(cmd.env), extendEnv: false, timeout: timeoutMs, reject: false, stdin: 'ignore' });
    if (r.failed && (r as { code?: string }).code === 'ENOENT') {
      out.push(`${engine.name}: ${cmd.path} not found, so replica ${spec.replicaId} cannot start; set engines.${engine.name}.bin`);
      continue;
    }
    // Only stdout holds the listing: the backend's log on stderr has indented lines too.
    const devices = engine.parseDevices(r.stdout);
    if (devices.length === 0) {
      out.push(
        `${engine.name}: ${cmd.path} --list-devices lists no GPU on a GPU node${r.failed ? ` (it exited ${r.exitCode ?? r.signal ?? 'abnormally'})` : ''}: ` +
          `its GPU backend did not load (a CPU-only build, or no CUDA runtime), so replica ${spec.replicaId} would run on the CPU; install a CUDA build of llama.cpp`,
      );
    }
  }
  return out;
}

interface ConfigCheck {
  readonly warnings: string[];
  /** How each engine's KV events travel. */
  readonly kv: string[];
  readonly runnable: number;
  readonly wanted: number;
}

async function checkConfig(config: Config, inv: Inventory, io: DoctorIo, timeoutMs: number): Promise<ConfigCheck> {
  const node: NodeConfig = config.node.discover ? withDiscovered(config.node, inv) : config.node;
  const warnings: string[] = [];
  const classes = [...new Set(node.devices.map((d) => d.gpuClass))].sort();
  let runnable = 0;
  config.replicas.forEach((r) => {
    const p = profileOf(config, r);
    if (p === undefined || r.count === 0) return;
    if (p.gpuClass === cpuClass || devicesOfClass(node, p.gpuClass).length > 0) {
      runnable++;
      return;
    }
    warnings.push(
      `profile ${r.model}/${r.profile} wants gpu_class ${p.gpuClass}, and no device on node ${node.name} can serve it ` +
        `(classes here: ${classes.length === 0 ? 'none' : classes.join(', ')}); carve that profile, or change gpu_class`,
    );
  });
  let shards: ShardSpec[] = [];
  const ipcDir = kvIpcDirOf(config);
  try {
    shards = place(config, node, registryOf(config), { cpus: io.host.cpus, kvIpcDir: ipcDir });
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    for (const i of e.issues) warnings.push(`placement: ${i.path}: ${i.message}`);
  }
  warnings.push(...(await llamaCppWarnings(config, shards, io, timeoutMs)));
  const kv: string[] = [];
  for (const spec of shards) {
    const t = kvTransportOf(spec, ipcDir);
    if (t === undefined) continue;
    kv.push(`${spec.replicaId}: ${t.line}`);
    if (t.exposed) warnings.push(`replica ${spec.replicaId}: ${t.line}`);
  }
  const dirWarning = kv.length > 0 ? ipcDirWarning(ipcDir, process.getuid?.()) : undefined;
  if (dirWarning !== undefined) warnings.push(dirWarning);
  return { warnings, kv, runnable, wanted: config.replicas.filter((r) => r.count > 0).length };
}

// One series of a Prometheus text scrape whose value is 1, as the label values it names.
function flagged(text: string, name: string, label: string, extra = ''): string[] {
  const re = new RegExp(`^${name}\\{${label}="([^"]*)"${extra}\\} 1$`, 'gm');
  return [...text.matchAll(re)].map((m) => m[1] ?? '');
}

/**
 * What a running gateway's /metrics says of its engines' KV events: silent under traffic, or hashing
 * otherwise than we do. Either way its prefixes are unknown to routing, which falls back to load
 * without a word to the client; this is where an operator hears of it.
 */
export async function kvEventWarnings(gateway: string, timeoutMs: number): Promise<string[]> {
  let url: URL;
  try {
    url = new URL('/metrics', gateway);
  } catch {
    // Said as a warning like an unreachable gateway: the GPU checks above still stand.
    return [`gateway ${JSON.stringify(gateway)} is not a URL; write it as http://HOST:PORT`];
  }
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(), timeoutMs);
  let text: string;
  try {
    const r = await fetch(url, { signal: ac.signal });
    text = await r.text();
    if (!r.ok) return [`${url.href} answered ${r.status}; KV events not checked`];
  } catch (e) {
    return [`no answer from ${url.href} (${e instanceof Error ? e.message : String(e)}); KV events not checked`];
  } finally {
    clearTimeout(timer);
  }
  const silent = flagged(text, 'llmgw_kv_engine_silent', 'engine').map(
    (e) =>
      `engine ${e}: requests in flight and no KV event arrived for a minute, so routing does not know its cache and sends by load; ` +
      `check that it runs with the --kv-events-config the agent gave it (endpoint port, topic) and that nothing else holds that port`,
  );
  const mismatched = flagged(text, 'llmgw_kv_hash_verification', 'engine', ',outcome="mismatch"').map(
    (e) => `engine ${e}: its block hashes are not ours (another PYTHONHASHSEED or --prefix-caching-hash-algo); the agent's kv.stream.hash_mismatch log line says which and how to fix it`,
  );
  return [...silent, ...mismatched];
}

/** Runs doctor and returns its exit code: 0 something can run, 1 nothing can, 2 bad usage. */
export async function doctor(argv: readonly string[], io: DoctorIo): Promise<number> {
  const opts = readOptions(argv, ['--nvidia-smi', '--config', '--gateway', '--timeout-ms']);
  if (opts.help) {
    io.out(usage);
    return 0;
  }
  const timeoutMs = Number(opts.values['--timeout-ms'] ?? 10_000);
  if (opts.error !== undefined || !(Number.isInteger(timeoutMs) && timeoutMs > 0)) {
    io.err(`llmgw doctor: ${opts.error ?? '--timeout-ms must be a whole number of milliseconds'}\n${usage}`);
    return 2;
  }
  const configFile = opts.values['--config'];
  // Without --config, the config `serve` would run: the built-in default (sim replicas on the CPU),
  // so a machine with no GPU is not told that nothing can run when the default runs there.
  const source = configFile ?? defaultConfigSource;
  let config: Config;
  try {
    config = loadConfig(configFile === undefined ? defaultConfigYaml : io.readFile(configFile), source);
  } catch (e) {
    if (e instanceof LlmgwError) {
      io.err(`llmgw doctor: ${e.message}\n`);
      return 1;
    }
    if (e instanceof Error && 'code' in e) {
      io.err(`llmgw doctor: cannot read ${source}: ${e.message}\n`);
      return 1;
    }
    throw e;
  }
  const { inventory: inv, sourceLine } = await discover({ nvidiaSmi: nvidiaSmiOf(opts.values['--nvidia-smi'], io.host.env), timeoutMs, env: io.host.env });
  const lines = [sourceLine, `driver: ${inv.driverVersion ?? 'unknown'}; ${inv.cards.length} card${inv.cards.length === 1 ? '' : 's'}`];
  for (const c of inv.cards) lines.push('', ...cardLines(c));
  const usable = usableDevices(inv);
  lines.push('', 'devices by class:', ...devicesByClassLines(withDiscovered(configFile === undefined ? defaultNodeConfig : config.node, inv)).map((l) => `  ${l}`));
  const warnings = [...inv.problems, ...modeWarnings(inv), ...usable.excluded.map((e) => `${e.label}: ${e.reason}`)];
  const notes = inv.cards.flatMap((c) => c.notes.map((n) => `card ${c.index}: ${n}`));
  const gateway = opts.values['--gateway'];
  if (gateway !== undefined) warnings.push(...(await kvEventWarnings(gateway, timeoutMs)));
  if (usable.devices.length === 0) {
    warnings.push(inv.cards.length === 0 ? 'no GPU was found, so nothing can run on a GPU here' : 'no GPU device is usable, so nothing can run on a GPU here');
  }
  const check = await checkConfig(config, inv, io, timeoutMs);
  warnings.push(...check.warnings);
  const verdict = check.runnable === 0 ? `none of the ${check.wanted} replica set${check.wanted === 1 ? '' : 's'} in ${source} has a device to run on` : undefined;
  if (check.kv.length > 0) lines.push('', `kv events (${source}):`, ...check.kv.map((l) => `  ${l}`));
  // What `llmgw engines install` recorded: these run in preference to engines.*.bin and PATH.
  const installed = installedEngines(config.agent.stateDir);
  lines.push('', `engines installed under ${config.agent.stateDir}:${installed.length === 0 ? ' none' : ''}`);
  for (const i of installed) lines.push(`  ${i.engine}: ${i.version}; devices: ${i.devices.length === 0 ? 'none (CPU)' : i.devices.join(', ')}; ${i.bin}`);
  lines.push('');
  for (const n of notes) lines.push(`note: ${n}`);
  for (const w of warnings) lines.push(`warning: ${w}`);
  lines.push(`replica sets that can run: ${check.runnable} of ${check.wanted} in ${source}`);
  lines.push(verdict === undefined ? `ok: ${usable.devices.length} usable device${usable.devices.length === 1 ? '' : 's'}` : `nothing can run: ${verdict}`);
  io.out(lines.join('\n') + '\n');
  return verdict === undefined ? 0 : 1;
}

/** The inventory a command needs when its --config (or the default) says `devices: discover`;
 * undefined otherwise, or when the config does not load (the command reports that itself). */
export async function discoveredFor(argv: readonly string[], readFile: (path: string) => string, host: Host): Promise<Inventory | undefined> {
  const i = argv.findIndex((a) => a === '--config' || a.startsWith('--config='));
  const arg = argv[i];
  if (arg === undefined) return undefined;
  const file = arg === '--config' ? argv[i + 1] : arg.slice('--config='.length);
  if (file === undefined) return undefined;
  let config: Config;
  try {
    config = loadConfig(readFile(file), file);
  } catch (e) {
    if (e instanceof LlmgwError || (e instanceof Error && 'code' in e)) return undefined;
    throw e;
  }
  return discoveredIfAsked(config, host);
}

/** This node's GPUs when the loaded config says `devices: discover`, else undefined. */
export async function discoveredIfAsked(config: Config, host: Host): Promise<Inventory | undefined> {
  if (!config.node.discover) return undefined;
  return (await discover({ nvidiaSmi: nvidiaSmiOf(undefined, host.env), timeoutMs: 10_000, env: host.env })).inventory;
}

/** `llmgw doctor` on this machine. */
export async function main(argv: readonly string[]): Promise<number> {
  return doctor(argv, {
    out: (t) => process.stdout.write(t),
    err: (t) => process.stderr.write(t),
    readFile: (p) => readFileSync(p, 'utf8'),
    host: currentHost(),
  });
}
