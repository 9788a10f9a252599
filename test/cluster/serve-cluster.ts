// Several `llmgw serve` gateways in front of one cluster, as real processes, for the tests of this
// folder: a real PostgreSQL shared by all of them (the placer lease, keys, budgets, the admission
// board), each gateway on its own loopback address with its own ports and state directory, and one
// agent on 127.0.0.2 running sim replicas joined to every gateway. haproxy, when a test puts it in
// front, checks GET /ready and retries what never reached a gateway, as docs/cluster.md configures it.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { request } from 'undici';
import { cluster, run, type Proc } from '../link/cluster-harness.js';
import { startPostgres } from '../support/postgres.js';
import { loggedEvent } from '../support/serve.js';
import { freePort, waitFor } from '../support/wait.js';

/** Where Debian's haproxy package puts it. */
export const haproxyBin = '/usr/sbin/haproxy';

/** Every gateway's placer lease; a takeover's bound is reckoned from it. */
export const leaseTtlMs = 2_000;

/** One running gateway. */
export interface ServeGateway {
  readonly name: string;
  readonly addr: string;
  readonly port: number;
  /** Its HTTP root, e.g. http://127.0.0.11:PORT */
  readonly url: string;
  readonly proc: Proc;
}

/** The running cluster: the database every gateway shares, the gateways, the agent. */
export interface ServeCluster {
  readonly dbUrl: string;
  readonly dir: string;
  readonly gateways: readonly ServeGateway[];
  readonly agent: Proc;
}

/** How the cluster is made; `gatewayYaml` lines go under every gateway's `gateway:` (indented two spaces). */
export interface ServeClusterOptions {
  readonly gateways: number;
  readonly replicas: number;
  readonly simArgs?: readonly string[];
  readonly gatewayYaml?: string;
  /** Keys of the `store:` flow mapping besides url and gateway_id, e.g. `refresh_ms: 200`. */
  readonly store?: string;
}

/** Starts PostgreSQL, the agent and `o.gateways` serves, and waits until each serves every replica. */
export async function serveCluster(t: TestContext, o: ServeClusterOptions): Promise<ServeCluster> {
  const pg = await startPostgres();
  t.after(() => pg.close());
  const dbUrl = pg.database();
  const c = await cluster(t, ['a']);
  const [a] = c.nodes;
  if (a === undefined) throw new Error('one node');
  const places: { name: string; addr: string; port: number; link: string }[] = [];
  for (let i = 1; i <= o.gateways; i++) places.push({ name: `gw${i}`, addr: `127.0.0.${10 + i}`, port: await freePort(), link: `tcp://127.0.0.${10 + i}:${await freePort()}` });
  const gatewaysYaml = `[${places.map((g) => g.link).join(', ')}]`;
  const args = ['--tokenizer', 'bytes', ...(o.simArgs ?? [])].map((s) => JSON.stringify(s)).join(', ');
  const catalog = `models:
  qwen3:
    profiles:
      - { name: one, engine: sim, gpu_class: t4, tp: 1, model_path: qwen3, kv_events: true, args: [${args}] }
replicas:
  - { model: qwen3, profile: one, count: ${o.replicas} }`;

  // The agent first: it keeps reconnecting to each gateway until that one is up.
  const agentFile = join(a.dir, 'agent.yaml');
  const devices = Array.from({ length: o.replicas }, (_, i) => `    - { index: ${i}, name: fake, uuid: GPU-a${i}, class: t4 }`).join('\n');
  writeFileSync(
    agentFile,
    `engines:
  sim: { bin: "" }
kv_events: { hash_seed: "0", hash_algo: sha256_cbor }
node:
  name: a
  addr: ${a.addr}
  devices:
${devices}
  ports: { http_base: ${a.httpBase}, kv_events_base: ${a.kvBase} }
agent:
  state_dir: ${join(a.dir, 'state')}
  log_dir: ${join(a.dir, 'logs')}
cluster:
  gateways: ${gatewaysYaml}
  key_file: ${a.key.file}
  gateway_key: "${c.gatewayKey.publicKey}"
  heartbeat_ms: 100
  silent_after_ms: 1000
`,
  );
  const agent = run(t, ['agent', '--config', agentFile], a.dir);
  const gateways: ServeGateway[] = [];
  for (const g of places) {
    const dir = join(c.dir, g.name);
    mkdirSync(dir);
    const file = join(dir, 'llmgw.yaml');
    writeFileSync(
      file,
      `engines:
  sim: { bin: "" }
kv_events: { hash_seed: "0", hash_algo: sha256_cbor }
node: { name: ${g.name}, addr: ${g.addr} }
${catalog}
gateway:
  host: ${g.addr}
  port: ${g.port}
  router: { prediction_ttl_ms: 0 }
${o.gatewayYaml ?? ''}
agent: { state_dir: ${join(dir, 'state')} }
store: { url: "${dbUrl}", gateway_id: ${g.name}${o.store === undefined ? '' : `, ${o.store}`} }
cluster:
  link: ${g.link}
  gateways: ${gatewaysYaml}
  key_file: ${c.gatewayKey.file}
  heartbeat_ms: 100
  silent_after_ms: 1000
  lease_ttl_ms: ${leaseTtlMs}
  nodes:
    - { name: a, public_key: "${a.key.publicKey}" }
`,
    );
    gateways.push({ ...g, url: `http://${g.addr}:${g.port}`, proc: run(t, ['serve', '--config', file], dir) });
  }
  for (const g of gateways) {
    await waitFor(() => loggedEvent(g.proc.err, 'serve.ready', { replicas: o.replicas }) ?? (g.proc.child.exitCode !== null ? 'exited' : undefined), {
      timeoutMs: 90_000,
      what: `${g.name} ready (stderr: ${g.proc.err.slice(-1200)}; agent: ${agent.err.slice(-800)})`,
    });
    if (g.proc.child.exitCode !== null) throw new Error(`${g.name} exited: ${g.proc.err.slice(-1500)}`);
  }
  return { dbUrl, dir: c.dir, gateways, agent };
}

/**
 * haproxy in front of `gateways` on 127.0.0.1:`port`, as docs/cluster.md sets it up: health checks
 * on /ready, retries of requests whose connection failed or got no answer at all, redispatched to
 * another server. Each answer names the gateway that gave it in `x-served-by`.
 */
export function haproxyConfig(port: number, gateways: readonly { name: string; addr: string; port: number }[]): string {
  return `global
  maxconn 512
defaults
  mode http
  timeout connect 1s
  timeout client 30s
  timeout server 30s
  timeout check 1s
  retries 3
  option redispatch
  retry-on conn-failure empty-response
frontend llmgw
  bind 127.0.0.1:${port}
  default_backend gateways
backend gateways
  balance roundrobin
  option httpchk GET /ready
  http-check expect status 200
  default-server inter 200ms fall 2 rise 2
  http-response set-header x-served-by %[srv_name]
${gateways.map((g) => `  server ${g.name} ${g.addr}:${g.port} check`).join('\n')}
`;
}

/** Runs haproxy on `haproxyConfig(port, gateways)` until the test ends; its URL. */
export async function startHaproxy(t: TestContext, dir: string, gateways: readonly { name: string; addr: string; port: number }[]): Promise<string> {
  const port = await freePort();
  const file = join(dir, 'haproxy.cfg');
  writeFileSync(file, haproxyConfig(port, gateways));
  const child = spawn(haproxyBin, ['-db', '-f', file], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
  const exited = once(child, 'exit');
  t.after(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    await exited;
  });
  const url = `http://127.0.0.1:${port}`;
  const passed = async (): Promise<boolean> => {
    const r = await request(`${url}/ready`);
    await r.body.dump();
    return r.statusCode === 200;
  };
  await waitFor(async () => child.exitCode !== null || (await passed()), { timeoutMs: 20_000, what: 'haproxy to pass /ready to a gateway' });
  if (child.exitCode !== null) throw new Error(`haproxy exited with ${child.exitCode}: ${err}`);
  return url;
}
