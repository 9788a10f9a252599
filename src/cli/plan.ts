// `llmgw plan`: every process the config would start on this node, each with its full command line
// and the environment llmgw sets for it, so an operator sees exactly what would run before it runs.
import { readFileSync } from 'node:fs';
import { cpuClass } from '../catalog/index.js';
import { LlmgwError } from '../errors/index.js';
import type { Command, Host, ShardSpec } from '../engines/index.js';
import { disaggOf } from '../engines/index.js';
import { labelOfDeviceNumber, type Inventory } from '../discovery/index.js';
import { place, profileFitLines, withDiscovered } from '../placement/index.js';
import { loadConfig, registryOf, type Config } from './config.js';
import { defaultConfigSource, defaultConfigYaml } from './default-config.js';
import { currentHost } from './host.js';
import { discoveredFor } from './doctor.js';
import { kvIpcDirOf, kvTransportOf } from './kv-transport.js';
import { configArgument } from './node-plan.js';

/** Where plan writes and what it reads, so a test runs it in-process. */
export interface PlanIo {
  readonly out: (text: string) => void;
  readonly err: (text: string) => void;
  readonly readFile: (path: string) => string;
  readonly host: Host;
  /** What discovery found, used when the config's node says `devices: discover`. */
  readonly discovered?: Inventory;
}

const usage = 'usage: llmgw plan [--config FILE]\n\nWithout --config, plans the built-in default config.\n';

/** Quotes a word for a POSIX shell only when it needs it, so the printed line can be pasted. */
export function shellQuote(word: string): string {
  if (word !== '' && /^[A-Za-z0-9_@%+=:,./-]+$/.test(word)) return word;
  return `'${word.replaceAll("'", `'\\''`)}'`;
}

function describeEnv(cmd: Command, spec: ShardSpec): string[] {
  const values = new Map(cmd.env);
  const lines = cmd.generated.map((k) => {
    // A profile key that survived is the profile's value: it wins over what llmgw generates.
    const by = Object.hasOwn(spec.profile.env, k) && spec.profile.env[k] === values.get(k) ? 'profile' : 'llmgw';
    return `      ${k}=${shellQuote(values.get(k) ?? '')}  # set by ${by}`;
  });
  const inherited = cmd.env.length - cmd.generated.length;
  lines.push(`      (+ ${inherited} variable${inherited === 1 ? '' : 's'} inherited from the environment llmgw runs in)`);
  return lines;
}

function deviceCounts(config: Config, shards: readonly ShardSpec[]): string[] {
  const classes = new Set<string>([...config.node.devices.map((d) => d.gpuClass), ...shards.map((s) => s.profile.gpuClass)]);
  return [...classes].sort().map((cls) => {
    const placed = shards.filter((s) => s.profile.gpuClass === cls);
    if (cls === cpuClass) return `  ${cls}: ${placed.length} shard${placed.length === 1 ? '' : 's'}, no GPUs`;
    const total = config.node.devices.filter((d) => d.gpuClass === cls).length;
    const used = placed.reduce((n, s) => n + s.gpuIndices.length, 0);
    return `  ${cls}: ${total} device${total === 1 ? '' : 's'}, ${used} placed, ${placed.length} shard${placed.length === 1 ? '' : 's'}`;
  });
}

/** Runs `plan` and returns its exit code: 0 planned, 1 a bad config, 2 bad usage. */
export function plan(argv: readonly string[], io: PlanIo): number {
  const arg = configArgument(argv, { status: false });
  if (arg.help) {
    io.out(usage);
    return 0;
  }
  if (arg.error !== undefined) {
    io.err(`llmgw plan: ${arg.error}\n${usage}`);
    return 2;
  }
  let text = defaultConfigYaml;
  let source = defaultConfigSource;
  if (arg.file !== undefined) {
    source = arg.file;
    try {
      text = io.readFile(arg.file);
    } catch (e) {
      io.err(`llmgw plan: cannot read ${arg.file}: ${e instanceof Error ? e.message : String(e)}\n`);
      return 1;
    }
  }
  try {
    const config = loadConfig(text, source);
    const registry = registryOf(config);
    const node = config.node.discover && io.discovered !== undefined ? withDiscovered(config.node, io.discovered) : config.node;
    // Why discovery found fewer devices than the node has (nvidia-smi missing, failing, hung), said
    // before placement counts them, or a refusal for "0 free of 0" would be all the operator sees.
    if (config.node.discover) for (const p of io.discovered?.problems ?? []) io.err(`llmgw plan: warning: node.devices: discover: ${p}\n`);
    const ipcDir = kvIpcDirOf(config);
    const shards = place(config, node, registry, { cpus: io.host.cpus, kvIpcDir: ipcDir });
    const lines = [`plan for node ${config.node.name} (${config.node.addr}) from ${source}: ${shards.length} shard${shards.length === 1 ? '' : 's'}`];
    let failed = 0;
    for (const spec of shards) {
      const p = spec.profile;
      const engine = registry.get(p.engine);
      lines.push('', `replica ${spec.replicaId} / shard ${spec.shardId}: model ${p.servedModelName}, profile ${p.name}, engine ${p.engine}`);
      const gpus = spec.gpuIndices.length > 0 ? `gpus ${spec.gpuIndices.map(labelOfDeviceNumber).join(',')} (${p.gpuClass})` : 'no GPUs';
      lines.push(`  rank ${spec.rank} of ${spec.nNodes}, ${gpus}, http ${spec.bindAddr || '0.0.0.0'}:${spec.httpPort}${engine.servesHttp(spec) ? '' : ' (not served)'}`);
      const disagg = disaggOf(p);
      if (disagg !== undefined) lines.push(`  role ${disagg.role} (prefill/decode disaggregation over ${disagg.protocol === 'nixl' ? "vLLM's NixlConnector" : `SGLang's bootstrap${disagg.bootstrapPort > 0 ? `, port ${disagg.bootstrapPort}` : ''}`})`);
      const kv = kvTransportOf(spec, ipcDir);
      if (kv !== undefined) lines.push(`  ${kv.line}`);
      let cmds: readonly Command[];
      try {
        cmds = engine.commands(spec, io.host);
      } catch (e) {
        if (!(e instanceof LlmgwError)) throw e;
        failed++;
        lines.push(`  cannot build: profile ${JSON.stringify(p.name)} of model ${JSON.stringify(p.servedModelName)}: ${e.message}`);
        continue;
      }
      for (const cmd of cmds) {
        lines.push(`  process ${cmd.name}${cmd.waitForLeaderPort ? ' (the next process waits for the leader port)' : ''}:`);
        lines.push(`    ${[cmd.path, ...cmd.args].map(shellQuote).join(' ')}`);
        lines.push('    environment:');
        lines.push(...describeEnv(cmd, spec));
      }
    }
    lines.push('', `devices by class on node ${config.node.name}:`, ...deviceCounts({ ...config, node }, shards));
    lines.push('', 'profiles and where they fit:', ...profileFitLines(config, node).map((l) => `  ${l}`));
    io.out(lines.join('\n') + '\n');
    if (failed > 0) {
      io.err(`llmgw plan: ${failed} shard${failed === 1 ? '' : 's'} could not be built (see above)\n`);
      return 1;
    }
    return 0;
  } catch (e) {
    if (e instanceof LlmgwError) {
      io.err(`llmgw plan: ${e.message}\n`);
      return 1;
    }
    throw e;
  }
}

/** `llmgw plan` on this machine. */
export async function main(argv: readonly string[]): Promise<number> {
  const host = currentHost();
  const discovered = await discoveredFor(argv, (p) => readFileSync(p, 'utf8'), host);
  return plan(argv, {
    out: (t) => process.stdout.write(t),
    err: (t) => process.stderr.write(t),
    readFile: (p) => readFileSync(p, 'utf8'),
    host,
    ...(discovered === undefined ? {} : { discovered }),
  });
}
