// A gateway and node agents as separate processes on one machine, each agent on its own loopback
// address (Linux routes all of 127/8 to lo) with its own ports and state directory.
import { spawn, spawnSync, type ChildProcessByStdio } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import type { TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { freePort, waitFor } from '../support/wait.js';

/** The llmgw entry point the processes run. */
export const main = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));

/** A running llmgw process with what it printed so far. */
export interface Proc {
  readonly child: ChildProcessByStdio<null, Readable, Readable>;
  out: string;
  err: string;
  stop(signal?: NodeJS.Signals): Promise<void>;
}

/** Starts `llmgw args…` and stops it (TERM, then KILL) when the test ends. */
export function run(t: TestContext, args: readonly string[], cwd: string): Proc {
  const child = spawn(process.execPath, [main, ...args], { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = once(child, 'exit');
  const p: Proc = {
    child,
    out: '',
    err: '',
    stop: async (signal = 'SIGTERM') => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill(signal);
      await Promise.race([exited, new Promise((r) => setTimeout(r, 20_000))]);
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGKILL');
        await exited;
      }
    },
  };
  child.stdout.setEncoding('utf8').on('data', (d: string) => (p.out += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (p.err += d));
  t.after(() => p.stop());
  return p;
}

/** A keypair made by `llmgw keys`, with its public line. */
export function makeKeys(dir: string, name: string): { file: string; publicKey: string } {
  const file = join(dir, `${name}.key`);
  const r = spawnSync(process.execPath, [main, 'keys', '--out', file], { encoding: 'utf8' });
  const publicKey = /^public (\S{40})$/m.exec(r.stdout)?.[1];
  if (r.status !== 0 || publicKey === undefined) throw new Error(`llmgw keys failed: ${r.stderr}`);
  return { file, publicKey };
}

/** One node of the test cluster. */
export interface NodeSpec {
  readonly name: string;
  readonly addr: string;
  readonly key: { file: string; publicKey: string };
  readonly httpBase: number;
  readonly kvBase: number;
  readonly dir: string;
}

/** The test cluster's files: a directory, the gateway's key and config, and each node's. */
export interface Cluster {
  readonly dir: string;
  readonly linkPort: number;
  readonly gatewayPort: number;
  readonly gatewayKey: { file: string; publicKey: string };
  readonly nodes: NodeSpec[];
  gatewayConfig(catalog: string, listed?: readonly NodeSpec[]): string;
  agentConfig(n: NodeSpec, o?: { keyFile?: string }): string;
}

/** Makes keys, ports and directories for a gateway and `names` nodes on 127.0.0.2, .3, … */
export async function cluster(t: TestContext, names: readonly string[]): Promise<Cluster> {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-cluster-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const gatewayKey = makeKeys(dir, 'gateway');
  const nodes: NodeSpec[] = [];
  for (const [i, name] of names.entries()) {
    const nodeDir = join(dir, name);
    mkdirSync(nodeDir);
    // Ports on the node's own address; a free port on 127.0.0.1 is free on 127.0.0.x too in practice,
    // and each node's two ranges are apart by more than it uses.
    nodes.push({ name, addr: `127.0.0.${i + 2}`, key: makeKeys(dir, name), httpBase: await freePort(), kvBase: await freePort(), dir: nodeDir });
  }
  const linkPort = await freePort();
  const gatewayPort = await freePort();
  const c: Cluster = {
    dir,
    linkPort,
    gatewayPort,
    gatewayKey,
    nodes,
    gatewayConfig: (catalog, listed = nodes) => {
      const file = join(dir, 'gateway.yaml');
      writeFileSync(
        file,
        `engines:
  sim: { bin: "" }
kv_events: { hash_seed: "0", hash_algo: sha256_cbor }
node: { name: gateway, addr: 127.0.0.1 }
${catalog}
gateway:
  host: 127.0.0.1
  port: ${gatewayPort}
  router: { prediction_ttl_ms: 0 }
cluster:
  link: tcp://127.0.0.1:${linkPort}
  key_file: ${gatewayKey.file}
  heartbeat_ms: 100
  silent_after_ms: 1000
  nodes:
${listed.map((n) => `    - { name: ${n.name}, public_key: "${n.key.publicKey}" }`).join('\n')}
`,
      );
      return file;
    },
    agentConfig: (n, o = {}) => {
      const file = join(n.dir, 'agent.yaml');
      writeFileSync(
        file,
        `engines:
  sim: { bin: "" }
kv_events: { hash_seed: "0", hash_algo: sha256_cbor }
node:
  name: ${n.name}
  addr: ${n.addr}
  devices:
    - { index: 0, name: fake, uuid: GPU-${n.name}, class: t4 }
  ports: { http_base: ${n.httpBase}, kv_events_base: ${n.kvBase} }
agent:
  state_dir: ${join(n.dir, 'state')}
  log_dir: ${join(n.dir, 'logs')}
cluster:
  link: tcp://127.0.0.1:${linkPort}
  key_file: ${o.keyFile ?? n.key.file}
  gateway_key: "${gatewayKey.publicKey}"
  heartbeat_ms: 100
  silent_after_ms: 1000
`,
      );
      return file;
    },
  };
  return c;
}

/** The gateway's node view. */
export async function nodesView(port: number): Promise<Map<string, { state: string; ready: string[]; phases: Map<string, string> }>> {
  const r = await request(`http://127.0.0.1:${port}/llmgw/nodes`);
  const body: unknown = await r.body.json();
  if (!Array.isArray(body)) throw new Error(`/llmgw/nodes answered ${JSON.stringify(body)}`);
  const out = new Map<string, { state: string; ready: string[]; phases: Map<string, string> }>();
  for (const n of body) {
    if (typeof n !== 'object' || n === null || !('name' in n) || !('state' in n) || !('ready' in n) || !Array.isArray(n.ready)) continue;
    const phases = new Map<string, string>();
    const actors: unknown = 'actors' in n ? n.actors : [];
    for (const a of Array.isArray(actors) ? actors : []) {
      if (typeof a === 'object' && a !== null && 'actor' in a && 'phase' in a) phases.set(String(a.actor), String(a.phase));
    }
    out.set(String(n.name), { state: String(n.state), ready: n.ready.map(String), phases });
  }
  return out;
}

/** Sends a chat request; the replica and route headers the gateway answered with. */
export async function ask(port: number, content: string, model = 'qwen3'): Promise<{ status: number; replica: string; route: string; receipt: string }> {
  const r = await request(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, max_tokens: 2, messages: [{ role: 'user', content }] }),
  });
  await r.body.dump();
  return {
    status: r.statusCode,
    replica: String(r.headers['x-llmgw-replica']),
    route: String(r.headers['x-llmgw-route']),
    // Why routing chose it, for a failing assertion to show.
    receipt: String(r.headers['x-llmgw-receipt']),
  };
}

/** A metric's value from the gateway's /metrics (0 when absent). */
export async function metric(port: number, line: RegExp): Promise<number> {
  const r = await request(`http://127.0.0.1:${port}/metrics`);
  return Number(line.exec(await r.body.text())?.[1] ?? 0);
}

/** Waits until a precise decision lands on `replica` for a prompt first sent to it. */
export async function routedPrecise(port: number, what: string, prompt: string): Promise<{ replica: string; route: string }> {
  const first = await ask(port, prompt);
  return waitFor(
    async () => {
      const again = await ask(port, prompt);
      return again.route.startsWith('precise') && again.replica === first.replica ? again : undefined;
    },
    { timeoutMs: 15_000, intervalMs: 100, what },
  );
}
