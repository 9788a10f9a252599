// `llmgw ctl`: operator views of the running system. `ctl nodes` lists this node's devices grouped
// by class, MIG instances as card/migN, and what placement leaves out with the reason; with
// --gateway, and `ctl status`, every node of a running gateway's cluster.
import { readFileSync } from 'node:fs';
import { LlmgwError } from '../errors/index.js';
import { defaultNodeConfig, devicesByClassLines, withDiscovered, type NodeConfig } from '../placement/index.js';
import { loadConfig } from './config.js';
import { clusterNodesLines, clusterStatusLines, readView } from './ctl-cluster.js';
import { discover, nvidiaSmiOf, readOptions, type DoctorIo } from './doctor.js';
import { currentHost } from './host.js';

const usage = `usage: llmgw ctl nodes [--config FILE] [--nvidia-smi PATH] [--timeout-ms N]
       llmgw ctl nodes --gateway URL [--api-key KEY] [--timeout-ms N]
       llmgw ctl status [--gateway URL] [--api-key KEY] [--timeout-ms N]

ctl nodes lists this node's devices grouped by class. Devices listed under node.devices in the config
are shown as listed; otherwise (or with devices: discover) they are discovered through nvidia-smi.
With --gateway it lists every node of the running gateway's cluster instead: its state, devices,
what is placed on it and what is ready. ctl status adds each node's actors, external replicas and
replicas waiting for room (default gateway http://127.0.0.1:8080; the key may come from LLMGW_API_KEY).
`;

async function fromGateway(sub: 'nodes' | 'status', values: Record<string, string>, io: DoctorIo, timeoutMs: number): Promise<number> {
  const gateway = values['--gateway'] ?? 'http://127.0.0.1:8080';
  try {
    const body = await readView(gateway, sub, { apiKey: values['--api-key'] ?? io.host.env.LLMGW_API_KEY, timeoutMs });
    io.out((sub === 'nodes' ? clusterNodesLines(body) : clusterStatusLines(body)).join('\n') + '\n');
    return 0;
  } catch (e) {
    if (!(e instanceof LlmgwError)) throw e;
    io.err(`llmgw ctl ${sub}: ${e.message}\n`);
    return 1;
  }
}

/** Runs `ctl` and returns its exit code: 0 listed, 1 a failure, 2 bad usage. */
export async function ctl(argv: readonly string[], io: DoctorIo): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === '--help' || sub === '-h') {
    io.out(usage);
    return 0;
  }
  if (sub === undefined) {
    io.err(usage);
    return 2;
  }
  if (sub !== 'nodes' && sub !== 'status') {
    io.err(`llmgw ctl: unknown view ${JSON.stringify(sub)} (have nodes, status)\n${usage}`);
    return 2;
  }
  const opts = readOptions(rest, ['--config', '--nvidia-smi', '--timeout-ms', '--gateway', '--api-key']);
  if (opts.help) {
    io.out(usage);
    return 0;
  }
  const timeoutMs = Number(opts.values['--timeout-ms'] ?? 10_000);
  if (opts.error !== undefined || !(Number.isInteger(timeoutMs) && timeoutMs > 0)) {
    io.err(`llmgw ctl nodes: ${opts.error ?? '--timeout-ms must be a whole number of milliseconds'}\n${usage}`);
    return 2;
  }
  if (sub === 'status' || opts.values['--gateway'] !== undefined) return fromGateway(sub, opts.values, io, timeoutMs);
  let node: NodeConfig = { ...defaultNodeConfig, discover: true };
  const file = opts.values['--config'];
  if (file !== undefined) {
    try {
      node = loadConfig(io.readFile(file), file).node;
    } catch (e) {
      if (e instanceof LlmgwError) {
        io.err(`llmgw ctl nodes: ${e.message}\n`);
        return 1;
      }
      if (e instanceof Error && 'code' in e) {
        io.err(`llmgw ctl nodes: cannot read ${file}: ${e.message}\n`);
        return 1;
      }
      throw e;
    }
  }
  const lines: string[] = [];
  if (node.discover) {
    const { inventory, sourceLine } = await discover({ nvidiaSmi: nvidiaSmiOf(opts.values['--nvidia-smi'], io.host.env), timeoutMs, env: io.host.env });
    node = withDiscovered(node, inventory);
    lines.push(`node ${node.name} (${node.addr}), devices discovered; ${sourceLine}`);
    for (const p of inventory.problems) lines.push(`warning: ${p}`);
  } else {
    lines.push(`node ${node.name} (${node.addr}), devices as listed in ${file ?? 'the config'}`);
  }
  lines.push(...devicesByClassLines(node).map((l) => `  ${l}`));
  io.out(lines.join('\n') + '\n');
  return 0;
}

/** `llmgw ctl` on this machine. */
export async function main(argv: readonly string[]): Promise<number> {
  return ctl(argv, {
    out: (t) => process.stdout.write(t),
    err: (t) => process.stderr.write(t),
    readFile: (p) => readFileSync(p, 'utf8'),
    host: currentHost(),
  });
}
