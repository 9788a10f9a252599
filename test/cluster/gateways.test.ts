// Three `llmgw serve` gateways in front of one cluster, as real processes: a real PostgreSQL (the
// placer lease, keys, ledger), each gateway on its own loopback address with its own ports and state
// directory, one agent on 127.0.0.2 with two sim replicas joined to all three, and haproxy in front
// (health checks on /ready, retries of requests that never reached a gateway). A conversation
// alternating between the gateways is routed precise on every turn after the first; kill -9 the
// placer: another takes the lease and places within the bound docs/cluster.md states, the engines
// keep their pids, and no request through haproxy fails.
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import { request } from 'undici';
import { loggedEvent } from '../support/serve.js';
import { waitFor } from '../support/wait.js';
import { haproxyBin, leaseTtlMs, serveCluster, startHaproxy, type ServeGateway } from './serve-cluster.js';

// docs/cluster.md: the lease lapses at most lease_ttl_ms after the placer's last renewal, and a
// follower claims every quarter of it; the rest is the claim's round trip and a loaded machine.
const takeoverBoundMs = leaseTtlMs + leaseTtlMs / 4 + 1_000;

/** The gateway's placer view from /llmgw/status. */
async function placerOf(g: ServeGateway): Promise<{ placing: boolean; epoch: number }> {
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

void test('several gateways: precise on every turn across gateways, and kill -9 of the placer hands placement on within the bound with nothing restarted and no request lost', { timeout: 300_000, skip: existsSync(haproxyBin) ? false : 'haproxy is not installed (apt-get install haproxy)' }, async (t) => {
  const { gateways: gws, agent, dir } = await serveCluster(t, { gateways: 3, replicas: 2 });
  const placers = await Promise.all(gws.map(placerOf));
  assert.equal(placers.filter((p) => p.placing).length, 1, `exactly one placer: ${JSON.stringify(placers)}`);

  const front = await startHaproxy(t, dir, gws);
  await waitFor(async () => (await turn(front, [{ role: 'user', content: 'hello' }])).status === 200, { timeoutMs: 20_000, what: 'haproxy to pass a request' });

  // Every gateway holds the same index, from the same engines' events: equal block counts.
  const caughtUp = async (live: readonly ServeGateway[]): Promise<number | undefined> => {
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
  if (placer === undefined) throw new Error('a placer');
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
