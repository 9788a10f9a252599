// Three `llmgw serve` gateways in front of one cluster, as real processes: a real PostgreSQL (the
// placer lease, keys, ledger), each gateway on its own loopback address with its own ports and state
// directory, one agent on 127.0.0.2 with two sim replicas joined to all three, and haproxy in front
// (health checks on /ready, retries of requests that never reached a gateway). A conversation
// alternating between the gateways is routed precise on every turn after the first; kill -9 the
// placer: another takes the lease and places within the bound docs/cluster.md states, the engines
// keep their pids, and no request through haproxy fails.
import { strict as assert } from 'node:assert';
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { request } from 'undici';
import { loggedEvent } from '../support/serve.js';
import { startPostgres } from '../support/postgres.js';
import { freePort, waitFor } from '../support/wait.js';
import { cluster, run, type Proc } from '../link/cluster-harness.js';

const haproxyBin = '/usr/sbin/haproxy';
const leaseTtlMs = 2_000;
// docs/cluster.md: the lease lapses at most lease_ttl_ms after the placer's last renewal, and a
// follower claims every quarter of it; the rest is the claim's round trip and a loaded machine.
const takeoverBoundMs = leaseTtlMs + leaseTtlMs / 4 + 1_000;

const catalog = `models:
  qwen3:
    profiles:
      - { name: one, engine: sim, gpu_class: t4, tp: 1, model_path: qwen3, kv_events: true, args: [--tokenizer, bytes] }
replicas:
  - { model: qwen3, profile: one, count: 2 }`;

interface Gw {
  readonly name: string;
  readonly addr: string;
  readonly port: number;
  readonly link: string;
  proc: Proc | undefined;
}

/** The gateway's placer view from /llmgw/status. */
async function placerOf(g: Gw): Promise<{ placing: boolean; epoch: number }> {
  const r = await request(`http://${g.addr}:${g.port}/llmgw/status`);
  const body = (await r.body.json()) as { placer?: { placing: boolean; epoch: number } };
  if (body.placer === undefined) throw new Error(`no placer in ${JSON.stringify(body)}`);
  return body.placer;
}

/** One chat turn; where it went and how it was routed. */
async function turn(at: string, messages: readonly { role: string; content: string }[]): Promise<{ status: number; route: string; replica: string; receipt: string; reply: string }> {
  const r = await request(`${at}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'qwen3', max_tokens: 4, messages }),
  });
  const text = await r.body.text();
  let reply = '';
  if (r.statusCode === 200) reply = ((JSON.parse(text) as { choices: { message: { content: string } }[] }).choices[0]?.message.content ?? '');
  return { status: r.statusCode, route: String(r.headers['x-llmgw-route']), replica: String(r.headers['x-llmgw-replica']), receipt: String(r.headers['x-llmgw-receipt']), reply };
}

/** The engines the agent runs: its child processes' pids. */
function childPids(pid: number): number[] {
  const out = execFileSync('ps', ['-o', 'pid=', '--ppid', String(pid)], { encoding: 'utf8' });
  return out.split('\n').map((l) => Number(l.trim())).filter((n) => n > 0).sort();
}

function haproxyConfig(port: number, gws: readonly Gw[]): string {
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
${gws.map((g) => `  server ${g.name} ${g.addr}:${g.port} check`).join('\n')}
`;
}

function startHaproxy(t: TestContext, file: string): void {
  const child = spawn(haproxyBin, ['-db', '-f', file], { stdio: ['ignore', 'ignore', 'pipe'] });
  const exited = once(child, 'exit');
  t.after(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    await exited;
  });
}

void test('several gateways: precise on every turn across gateways, and kill -9 of the placer hands placement on within the bound with nothing restarted and no request lost', { timeout: 300_000, skip: existsSync(haproxyBin) ? false : 'haproxy is not installed (apt-get install haproxy)' }, async (t) => {
  const pg = await startPostgres();
  t.after(() => pg.close());
  const url = pg.database();
  const c = await cluster(t, ['a']);
  const [a] = c.nodes;
  if (a === undefined) throw new Error('one node');
  const gws: Gw[] = [];
  for (const i of [1, 2, 3]) gws.push({ name: `gw${i}`, addr: `127.0.0.${10 + i}`, port: await freePort(), link: `tcp://127.0.0.${10 + i}:${await freePort()}`, proc: undefined });
  const gatewaysYaml = `[${gws.map((g) => g.link).join(', ')}]`;

  // The agent first: it keeps reconnecting to each gateway until that one is up.
  const agentFile = join(a.dir, 'agent.yaml');
  writeFileSync(
    agentFile,
    `engines:
  sim: { bin: "" }
kv_events: { hash_seed: "0", hash_algo: sha256_cbor }
node:
  name: a
  addr: ${a.addr}
  devices:
    - { index: 0, name: fake, uuid: GPU-a0, class: t4 }
    - { index: 1, name: fake, uuid: GPU-a1, class: t4 }
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
  for (const g of gws) {
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
agent: { state_dir: ${join(dir, 'state')} }
store: { url: "${url}", gateway_id: ${g.name} }
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
    g.proc = run(t, ['serve', '--config', file], dir);
  }
  for (const g of gws) {
    await waitFor(() => loggedEvent(g.proc?.err ?? '', 'serve.ready', { replicas: 2 }) ?? (g.proc?.child.exitCode !== null ? 'exited' : undefined), {
      timeoutMs: 90_000,
      what: `${g.name} ready (stderr: ${g.proc?.err.slice(-1200)}; agent: ${agent.err.slice(-800)})`,
    });
    assert.equal(g.proc?.child.exitCode, null, `${g.name} exited: ${g.proc?.err.slice(-1500)}`);
  }
  const placers = await Promise.all(gws.map(placerOf));
  assert.equal(placers.filter((p) => p.placing).length, 1, `exactly one placer: ${JSON.stringify(placers)}`);

  const hap = await freePort();
  const hapFile = join(c.dir, 'haproxy.cfg');
  writeFileSync(hapFile, haproxyConfig(hap, gws));
  startHaproxy(t, hapFile);
  const front = `http://127.0.0.1:${hap}`;
  await waitFor(async () => (await turn(front, [{ role: 'user', content: 'hello' }])).status === 200, { timeoutMs: 20_000, what: 'haproxy to pass a request' });

  // Every gateway holds the same index, from the same engines' events: equal block counts.
  const caughtUp = async (live: readonly Gw[]): Promise<number | undefined> => {
    const counts = await Promise.all(live.map((g) => request(`http://${g.addr}:${g.port}/metrics`).then((r) => r.body.text()).then((s) => Number(/^llmgw_gateway_index_blocks (\S+)$/m.exec(s)?.[1] ?? -1))));
    const first = counts[0] ?? -1;
    return first > 0 && counts.every((n) => n === first) ? first : undefined;
  };

  // A conversation whose turns go to gw1, gw2, gw3, gw1, …: each turn after the first is precise.
  const messages: { role: string; content: string }[] = [];
  const routes: string[] = [];
  for (let i = 0; i < 6; i++) {
    const g = gws[i % gws.length];
    if (g === undefined) throw new Error('gateway');
    messages.push({ role: 'user', content: `turn ${i}: tell me more about gateways sharing one index. `.repeat(8) });
    if (i > 0) await waitFor(() => caughtUp(gws), { timeoutMs: 15_000, what: `every gateway's index to hold turn ${i - 1}'s blocks` });
    const r = await turn(`http://${g.addr}:${g.port}`, messages);
    assert.equal(r.status, 200);
    routes.push(`${g.name}:${r.route}`);
    if (i > 0) assert.match(r.route, /^precise/, `turn ${i} on ${g.name}: ${r.route} (${r.receipt}); so far ${routes.join(', ')}`);
    messages.push({ role: 'assistant', content: r.reply });
  }
  t.diagnostic(`routes: ${routes.join(', ')}`);

  // Kill the placer while requests flow through haproxy.
  const placer = gws.find((_, i) => placers[i]?.placing === true);
  if (placer?.proc === undefined) throw new Error('a placer');
  const before = placers.find((p) => p.placing)?.epoch ?? 0;
  const engines = childPids(agent.child.pid ?? 0);
  assert.equal(engines.length, 2, `two engines under the agent: ${engines.join(', ')}`);
  let stop = false;
  const failures: string[] = [];
  let sent = 0;
  const load = async (): Promise<void> => {
    for (let n = 0; !stop; n++) {
      sent++;
      try {
        const r = await turn(front, [{ role: 'user', content: `load ${n}: a short question about leases. ` }]);
        if (r.status !== 200) failures.push(`status ${r.status}`);
      } catch (e) {
        failures.push(e instanceof Error ? e.message : String(e));
      }
    }
  };
  const loops = [load(), load(), load()];
  await waitFor(() => sent > 20, { timeoutMs: 20_000, what: 'load to flow' });
  const killedAt = Date.now();
  placer.proc.child.kill('SIGKILL');
  const live = gws.filter((g) => g !== placer);
  const next = await waitFor(
    async () => {
      for (const g of live) {
        const p = await placerOf(g);
        if (p.placing) return { g, p };
      }
      return undefined;
    },
    { timeoutMs: takeoverBoundMs * 3, intervalMs: 50, what: 'another gateway to take the placer lease' },
  );
  const tookMs = Date.now() - killedAt;
  t.diagnostic(`takeover: ${next.g.name} places under epoch ${next.p.epoch} ${tookMs} ms after the kill (bound ${takeoverBoundMs} ms)`);
  assert.ok(next.p.epoch > before, `a higher epoch: ${next.p.epoch} after ${before}`);
  // The new placer sent the node its assignment under its epoch, and the node took it.
  await waitFor(() => loggedEvent(agent.err, 'agent.assigned', { placerEpoch: next.p.epoch }), { timeoutMs: 10_000, what: `the agent to take epoch ${next.p.epoch}'s assignment` });
  await waitFor(() => sent > 60, { timeoutMs: 30_000, what: 'load to go on after the kill' });
  stop = true;
  await Promise.all(loops);
  assert.deepEqual(childPids(agent.child.pid ?? 0), engines, 'the engines were not restarted');
  assert.deepEqual(failures, [], `${failures.length} of ${sent} requests failed`);
  assert.equal(agent.err.includes('agent.assign.stale') ? 'stale seen' : 'none', 'none');
  // The survivors still route precise.
  const survivor = live[0];
  if (survivor === undefined) throw new Error('a survivor');
  messages.push({ role: 'user', content: 'and after the kill? '.repeat(8) });
  await waitFor(() => caughtUp(live), { timeoutMs: 15_000, what: 'the survivors to agree' });
  const after = await turn(`http://${survivor.addr}:${survivor.port}`, messages);
  assert.match(after.route, /^precise/, after.receipt);
});
