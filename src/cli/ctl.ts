// `llmgw ctl`: operator views of the running system. `ctl nodes` lists this node's devices grouped
// by class, MIG instances as card/migN, and what placement leaves out with the reason, or with
// --gateway every node of a running gateway's cluster; `ctl status` shows every actor of a running
// gateway, once or live.
import { readFileSync } from 'node:fs';
import { LlmgwError } from '../errors/index.js';
import { defaultNodeConfig, devicesByClassLines, withDiscovered, type NodeConfig } from '../placement/index.js';
import { loadConfig } from './config.js';
import { adminUsage, ctlAdmin } from './ctl-admin.js';
import { clusterStatusLines, readView } from './ctl-cluster.js';
import { discover, kvEventWarnings, nvidiaSmiOf, readOptions, type DoctorIo } from './doctor.js';
import { changeLine, fetchQueues, fetchStatus, fetchTails, queueTable, redrawFrame, statusTable, watchStatus, type StatusTarget } from './ctl-status.js';
import { currentHost } from './host.js';

const usage = `usage: llmgw ctl nodes [--config FILE] [--nvidia-smi PATH] [--timeout-ms N]
       llmgw ctl nodes --gateway URL [--api-key KEY] [--timeout-ms N]
       llmgw ctl status [--url URL | --config FILE] [--key KEY] [--watch] [-v]

nodes: lists the node's devices grouped by class. Devices listed under node.devices in the config are
shown as listed; otherwise (or with devices: discover) they are discovered through nvidia-smi. With
--gateway, every node of that gateway's cluster instead: its state, devices, what is placed on it and
ready, its actors, external replicas, and replicas waiting for room (the key may come from LLMGW_API_KEY).

status: every actor of a running gateway and of every node linked to it (nodes, replicas, shards,
publishers): its state, since when, and why. The gateway is --url, else gateway.host:port of
--config, else LLMGW_URL, else http://127.0.0.1:8080.
A gateway with API keys wants an admin key: --key, or LLMGW_ADMIN_KEY. --watch follows it live:
redrawn in place on a terminal, one line a change when piped. -v (--verbose) adds, under each actor
with a reason, the whole story: the command line that failed and the last lines of its log.

keys, usage: issue, list, update, revoke and rotate API keys, and read usage totals, through the gateway's
admin API (/admin/v1/).
${adminUsage}`;

async function clusterNodes(gateway: string, values: Record<string, string>, io: DoctorIo, timeoutMs: number): Promise<number> {
  try {
    const body = await readView(gateway, 'status', { apiKey: values['--api-key'] ?? io.host.env.LLMGW_API_KEY, timeoutMs });
    io.out(clusterStatusLines(body).join('\n') + '\n');
    return 0;
  } catch (e) {
    if (!(e instanceof LlmgwError)) throw e;
    io.err(`llmgw ctl nodes: ${e.message}\n`);
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
  if (sub === 'status') return status(rest, io);
  if (sub === 'keys' || sub === 'usage') return ctlAdmin(sub, rest, io);
  if (sub !== 'nodes') {
    io.err(`llmgw ctl: unknown view ${JSON.stringify(sub)} (have nodes, status, keys, usage)\n${usage}`);
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
  const gateway = opts.values['--gateway'];
  if (gateway !== undefined) return clusterNodes(gateway, opts.values, io, timeoutMs);
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

async function status(argv: readonly string[], io: DoctorIo): Promise<number> {
  const watch = argv.includes('--watch');
  const verbose = argv.includes('-v') || argv.includes('--verbose');
  const opts = readOptions(
    argv.filter((a) => a !== '--watch' && a !== '-v' && a !== '--verbose'),
    ['--url', '--key', '--config'],
  );
  if (opts.help) {
    io.out(usage);
    return 0;
  }
  if (opts.error !== undefined) {
    io.err(`llmgw ctl status: ${opts.error}\n${usage}`);
    return 2;
  }
  let target: StatusTarget;
  try {
    target = { url: gatewayUrl(opts.values, io), key: opts.values['--key'] ?? io.host.env.LLMGW_ADMIN_KEY };
  } catch (e) {
    // A config that does not parse, a file that cannot be read, a URL that is not one.
    if (e instanceof LlmgwError || e instanceof TypeError || (e instanceof Error && 'code' in e)) {
      io.err(`llmgw ctl status: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
  const never = new AbortController().signal;
  try {
    if (!watch) {
      const { now, rows } = await fetchStatus(target, { signal: never });
      const tails = verbose ? await fetchTails(target, rows, { signal: never, lines: VERBOSE_TAIL_LINES }) : undefined;
      io.out(statusTable(rows, now ?? Date.now(), tails));
      io.out(`\n${queueTable(await fetchQueues(target, { signal: never }))}`);
      // An engine whose KV events never arrive looks ready in the table; its metrics say otherwise.
      for (const w of await kvEventWarnings(target.url.href, 10_000)) io.out(`warning: ${w}\n`);
      return 0;
    }
    // On a terminal the table is redrawn in place; piped, the table once, then a line a change.
    const tty = process.stdout.isTTY;
    await watchStatus(
      target,
      (c) => {
        if (tty) io.out(redrawFrame(statusTable(c.rows, Date.now() - c.skewMs), process.stdout.columns));
        else io.out(c.changed === undefined ? statusTable(c.rows, Date.now() - c.skewMs) : changeLine(c.changed.before, c.changed.after));
      },
      { signal: never },
    );
    return 0;
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    io.err(`llmgw ctl status: ${target.url.href}: ${why}\n`);
    return 1;
  }
}

// Enough of an engine's log to see its traceback's last frames, not a screenful per shard.
const VERBOSE_TAIL_LINES = 8;

function gatewayUrl(values: Readonly<Record<string, string>>, io: DoctorIo): URL {
  const given = values['--url'];
  if (given !== undefined) return new URL(given);
  const file = values['--config'];
  if (file === undefined) return new URL(io.host.env.LLMGW_URL || 'http://127.0.0.1:8080/');
  const gw = loadConfig(io.readFile(file), file).gateway;
  // A gateway listening on every address is reached on loopback from here.
  const host = gw.host === '0.0.0.0' || gw.host === '::' || gw.host === '' ? '127.0.0.1' : gw.host.includes(':') ? `[${gw.host}]` : gw.host;
  return new URL(`http://${host}:${gw.port}/`);
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
