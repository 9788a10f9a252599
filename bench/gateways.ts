// Several gateways against one: the precise tier's cached tokens as a share of the oracle's, with 1,
// 2 and 3 gateways in front of the same engines, on the e2e bench's shapes, in one run. One
// PostgreSQL (the placer lease), one agent with the sim replicas, three `llmgw serve` joined by it,
// and haproxy in front of the first 1, 2 or 3 of them (round robin: consecutive requests, turns of
// one conversation too, land on different gateways). The engines' caches are reset before each run.
// Beside it, the decision cost: the gateways' own routing time per request (their histogram), with
// 1 gateway and with 3, measured in the same run, and what the load tier's cache-room tie-break
// (routing/cache-room.ts) adds to a decision and to an index write, with it and without in process. Goal: at 3 gateways >= 0.98 of 1 gateway's share.
// Prints a table and writes bench/results/gateways.json. Needs PostgreSQL and haproxy (Debian).
// --requests: each request's decision printed after its run.
// --quick: tiny workloads, a smoke run of the whole path in about a minute, not a measurement.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { distinctBlocks, driveTrace, generateTrace, oracle, shapes, summarise, traceTokens, workloadDefaults, type Shape, type WorkloadOptions } from '../src/e2e/index.js';
import { gatewayDefaults } from '../src/gateway/index.js';
import { ClusterIndex, IndexWriter } from '../src/kv/index.js';
import { loggedEvents } from '../src/log/index.js';
import { cachedBlocksOf, LoadBook, loadTier, PrefixTree, Router, SlotCounts, type ReplicaView, type RouteFacts } from '../src/routing/index.js';
import { main, makeKeys } from '../test/link/cluster-harness.js';
import { startPostgres } from '../test/support/postgres.js';
import { freePort, freePortRange, waitFor } from '../test/support/wait.js';

const quick = process.argv.includes('--quick');
const perRequest = process.argv.includes('--requests');
const replicas = 2;
const capacityBlocks = quick ? 256 : 1_024;
const blockSizeTokens = 16;
const gatewayCounts = [1, 2, 3] as const;
// Smaller than `llmgw bench e2e`'s full workloads, so the nine runs fit a shared 2-core machine; the
// working set still exceeds the two caches, where where a request lands matters.
const sizes: Readonly<Record<Shape, Partial<WorkloadOptions>>> = quick
  ? {
      'shared-prefix': { groups: 4, perGroup: 3, prefixTokens: 800, questionTokens: 40, ratePerS: 20, outputTokens: 4 },
      'multi-turn': { groups: 3, perGroup: 3, prefixTokens: 200, questionTokens: 60, answerTokens: 40, ratePerS: 20, outputTokens: 4 },
      'long-doc': { groups: 2, perGroup: 3, prefixTokens: 1_500, questionTokens: 40, ratePerS: 20, outputTokens: 4 },
    }
  : {
      'shared-prefix': { groups: 8, perGroup: 12, prefixTokens: 3_000, ratePerS: 12, outputTokens: 8 },
      'multi-turn': { groups: 12, perGroup: 4, prefixTokens: 600, questionTokens: 200, answerTokens: 150, ratePerS: 8, outputTokens: 8 },
      'long-doc': { groups: 4, perGroup: 3, prefixTokens: 8_000, questionTokens: 60, ratePerS: 2, outputTokens: 8 },
    };

const children: ChildProcess[] = [];
function start(cmd: string, args: readonly string[], cwd: string): { child: ChildProcess; err: () => string } {
  const child = spawn(cmd, [...args], { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
  children.push(child);
  let err = '';
  child.stderr?.setEncoding('utf8').on('data', (d: string) => (err = (err + d).slice(-2_000_000)));
  return { child, err: () => err };
}

async function stopAll(): Promise<void> {
  for (const c of children.reverse()) {
    if (c.exitCode !== null || c.signalCode !== null) continue;
    const exited = once(c, 'exit');
    c.kill('SIGTERM');
    const timer = setTimeout(() => c.kill('SIGKILL'), 20_000);
    await exited;
    clearTimeout(timer);
  }
}

async function routingTime(addr: string, port: number): Promise<{ seconds: number; count: number }> {
  const text = await (await request(`http://${addr}:${port}/metrics`)).body.text();
  let seconds = 0;
  let count = 0;
  for (const line of text.split('\n')) {
    const v = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (line.startsWith('llmgw_gateway_routing_duration_seconds_sum')) seconds += v;
    else if (line.startsWith('llmgw_gateway_routing_duration_seconds_count')) count += v;
  }
  return { seconds, count };
}

// The cache-room tie-break's cost, in this process on the same inputs with it and without (the
// gateways have no switch for it: their routing time above is with it). Decision: the load fact and
// the load tier over two replicas whose caches hold 1 000 blocks each. Events: one 500-block delta
// stored then evicted, through the writer with the counts beside the index and without. Rounds
// alternate so drift in the machine's load falls on both; the median round is kept.
function roomCost(): { decideUs: { with: number; without: number }; eventUs: { with: number; without: number } } {
  const views: ReplicaView[] = ['r0', 'r1'].map((id) => ({ id, node: 'a', model: 'bench', adapters: [], url: new URL('http://127.0.0.1:1/'), apiKey: undefined, generation: 1, kvEvents: true, blockSizeTokens, hashSeed: '0', dataParallelSize: 1 }));
  const keys = (from: number, n: number): bigint[] => Array.from({ length: n }, (_, i) => BigInt(from + i) * 0x9e3779b97f4a7c15n + 1n);
  const side = (counted: boolean) => {
    const index = new ClusterIndex({ capacityBlocks: 100_000 });
    const counts = counted ? new SlotCounts(index) : undefined;
    const writer = new IndexWriter({ index: counts ?? index, slotCount: 64, ownerOf: () => 'a', predictionTtlMs: 3_000, sweepIntervalMs: 0 });
    for (const [i, v] of views.entries()) writer.apply('a', v.id, { added: keys(i * 1_000_000, 1_000), removed: [] });
    const router = new Router({
      config: gatewayDefaults.router,
      tokens: { tokens: () => Promise.resolve({ ok: false, reason: 'unused' }) },
      scorer: undefined,
      slots: writer,
      tree: new PrefixTree({ chunkChars: 256, maxChunks: 16 }),
      load: new LoadBook(),
      cachedBlocks: counts === undefined ? undefined : (id) => cachedBlocksOf(writer.slotsOf(id), counts),
    });
    return { router, writer };
  };
  const sides = { with: side(true), without: side(false) };
  const facts: RouteFacts = { promptTokens: 8_000, precise: undefined, approximate: undefined, ttftBudgetMs: 2_000, boundedLoadFactor: 1.5, turn: 0 };
  const delta = keys(5_000_000, 500);
  const rounds = { decide: { with: [] as number[], without: [] as number[] }, event: { with: [] as number[], without: [] as number[] } };
  for (let round = 0; round < 11; round++) {
    for (const which of ['with', 'without'] as const) {
      const { router, writer } = sides[which];
      const decisions = 20_000;
      let t0 = performance.now();
      for (let i = 0; i < decisions; i++) loadTier({ ...facts, turn: i }, router.loadFacts(views));
      rounds.decide[which].push(((performance.now() - t0) * 1000) / decisions);
      const events = 200;
      t0 = performance.now();
      for (let i = 0; i < events; i++) {
        writer.apply('a', 'r0', { added: delta, removed: [] });
        writer.apply('a', 'r0', { added: [], removed: delta });
      }
      rounds.event[which].push(((performance.now() - t0) * 1000) / events);
    }
  }
  const median = (xs: number[]): number => Math.round(([...xs].sort((a, b) => a - b)[xs.length >> 1] ?? NaN) * 1000) / 1000;
  return {
    decideUs: { with: median(rounds.decide.with), without: median(rounds.decide.without) },
    eventUs: { with: median(rounds.event.with), without: median(rounds.event.without) },
  };
}

async function run(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-bench-gateways-'));
  const pg = await startPostgres();
  try {
    const url = pg.database();
    const gatewayKey = makeKeys(dir, 'gateway');
    const nodeKey = makeKeys(dir, 'a');
    const httpBase = await freePortRange(replicas + 2);
    const kvBase = await freePortRange(2 * replicas + 2);
    const gws: { name: string; addr: string; port: number; link: string }[] = [];
    for (const i of [1, 2, 3]) gws.push({ name: `gw${i}`, addr: `127.0.0.${10 + i}`, port: await freePort(), link: `tcp://127.0.0.${10 + i}:${await freePort()}` });
    const list = `[${gws.map((g) => g.link).join(', ')}]`;
    const simArgs = JSON.stringify(['--tokenizer', 'bytes', '--kv-capacity-blocks', String(capacityBlocks), '--prefill-tokens-per-s', '200000', '--decode-tokens-per-s', '2000']);
    const catalog = `models:
  bench:
    served_model_name: bench
    profiles:
      - { name: sim, engine: sim, gpu_class: cpu, tp: 1, model_path: bench, kv_events: true, args: ${simArgs} }
replicas:
  - { model: bench, profile: sim, count: ${replicas} }`;
    const common = `engines:
  sim: { bin: "", block_size: ${blockSizeTokens} }
kv_events: { hash_seed: "0", hash_algo: sha256_cbor }
`;
    mkdirSync(join(dir, 'a'));
    writeFileSync(
      join(dir, 'a', 'agent.yaml'),
      `${common}node:
  name: a
  addr: 127.0.0.2
  devices: []
  ports: { http_base: ${httpBase}, kv_events_base: ${kvBase} }
agent: { state_dir: ${join(dir, 'a', 'state')}, log_dir: ${join(dir, 'a', 'logs')} }
cluster:
  gateways: ${list}
  key_file: ${nodeKey.file}
  gateway_key: "${gatewayKey.publicKey}"
`,
    );
    start(process.execPath, [main, 'agent', '--config', join(dir, 'a', 'agent.yaml')], join(dir, 'a'));
    const served = gws.map((g) => {
      const d = join(dir, g.name);
      mkdirSync(d);
      writeFileSync(
        join(d, 'llmgw.yaml'),
        `${common}node: { name: ${g.name}, addr: ${g.addr} }
${catalog}
gateway: { host: ${g.addr}, port: ${g.port}, router: { policy: precise } }
agent: { state_dir: ${join(d, 'state')} }
store: { url: "${url}", gateway_id: ${g.name} }
cluster:
  link: ${g.link}
  gateways: ${list}
  key_file: ${gatewayKey.file}
  nodes:
    - { name: a, public_key: "${nodeKey.publicKey}", cpu_replicas: ${replicas} }
`,
      );
      return start(process.execPath, [main, 'serve', '--config', join(d, 'llmgw.yaml')], d);
    });
    for (const [i, s] of served.entries()) {
      await waitFor(() => loggedEvents(s.err(), 'serve.ready').length > 0, { timeoutMs: 120_000, what: `${gws[i]?.name ?? ''} ready: ${s.err().slice(-800)}` });
    }
    // One haproxy per gateway count, each over the first N gateways.
    const fronts = new Map<number, URL>();
    for (const n of gatewayCounts) {
      const port = await freePort();
      const file = join(dir, `haproxy-${n}.cfg`);
      writeFileSync(
        file,
        `defaults
  mode http
  timeout connect 1s
  timeout client 300s
  timeout server 300s
  retries 3
  option redispatch
  retry-on conn-failure empty-response
frontend bench
  bind 127.0.0.1:${port}
  default_backend gateways
backend gateways
  balance roundrobin
  option httpchk GET /ready
${gws
  .slice(0, n)
  .map((g) => `  server ${g.name} ${g.addr}:${g.port} check inter 500ms`)
  .join('\n')}
`,
      );
      start('/usr/sbin/haproxy', ['-db', '-f', file], dir);
      fronts.set(n, new URL(`http://127.0.0.1:${port}/`));
    }
    const engines = Array.from({ length: replicas }, (_, i) => new URL(`http://127.0.0.2:${httpBase + i}/`));
    const rows: Record<string, unknown>[] = [];
    const signal = new AbortController().signal;
    for (const shape of shapes) {
      const w = { ...workloadDefaults(shape), ...sizes[shape] };
      const trace = generateTrace(w);
      const tokens = await traceTokens(trace);
      const best = oracle(tokens.map((t) => ({ tokens: t, outputTokens: w.outputTokens })), { replicas, capacityBlocks, blockSizeTokens });
      const workingSet = Math.round((distinctBlocks(tokens, blockSizeTokens) / capacityBlocks) * 100) / 100;
      for (const n of gatewayCounts) {
        const front = fronts.get(n);
        if (front === undefined) continue;
        for (const e of engines) {
          const res = await request(new URL('/reset_prefix_cache', e), { method: 'POST' });
          await res.body.dump();
          if (res.statusCode !== 200) throw new Error(`engine ${e.href} did not reset its cache (status ${res.statusCode})`);
        }
        await waitFor(async () => (await request(new URL('/ready', front))).statusCode === 200, { timeoutMs: 20_000, what: 'haproxy to pass' });
        const used = gws.slice(0, n);
        const before = await Promise.all(used.map((g) => routingTime(g.addr, g.port)));
        const { results, wallMs } = await driveTrace(trace, front, { model: 'bench', timeoutMs: 300_000, signal });
        const after = await Promise.all(used.map((g) => routingTime(g.addr, g.port)));
        const seconds = after.reduce((s, a, i) => s + a.seconds - (before[i]?.seconds ?? 0), 0);
        const count = after.reduce((s, a, i) => s + a.count - (before[i]?.count ?? 0), 0);
        const s = summarise({ policy: `precise x${n}`, shape, results, wallMs, routingMsMean: count > 0 ? (seconds * 1000) / count : NaN }, tokens.map((t) => t.length), best.totalCachedTokens);
        const perGateway = Object.fromEntries(used.map((g, i) => [g.name, (after[i]?.count ?? 0) - (before[i]?.count ?? 0)]));
        process.stdout.write(
          `${shape.padEnd(13)} ${n} gateway${n > 1 ? 's' : ' '}  share of oracle ${s.oracleShare.toFixed(3)}  hit ${s.hitRate.toFixed(3)}  routing ${s.routingMsMean} ms/request  failed ${s.failed}  decided ${JSON.stringify(perGateway)}  tiers ${JSON.stringify(s.tiers)}\n`,
        );
        // Which tier decided each request, where it went and what it hit: the misses' story (issue 48).
        if (perRequest) {
          for (const r of results) {
            const q = trace.requests[r.id];
            process.stdout.write(`  #${String(r.id).padStart(3)} group ${q?.group ?? '?'} sent ${Math.round(r.sentMs)} ms  ${r.route.padEnd(11)} ${r.replica}  cached ${r.cachedTokens}/${r.promptTokens ?? '?'}  ${r.receipt ?? ''}\n`);
          }
        }
        rows.push({ shape, gateways: n, oracleShare: s.oracleShare, hitRate: s.hitRate, oracleHitRate: Math.round((best.totalCachedTokens / Math.max(1, best.totalPromptTokens)) * 1000) / 1000, workingSetCaches: workingSet, routingMsMean: s.routingMsMean, failed: s.failed, requests: s.requests, perGateway, tiers: s.tiers, ttftMs: s.ttftMs });
      }
    }
    const ratios: Record<string, { threeOverOne: number; routingMsThreeMinusOne: number }> = {};
    for (const shape of shapes) {
      const one = rows.find((r) => r.shape === shape && r.gateways === 1);
      const three = rows.find((r) => r.shape === shape && r.gateways === 3);
      if (one === undefined || three === undefined) continue;
      const r3 = (x: number): number => Math.round(x * 1000) / 1000;
      ratios[shape] = {
        threeOverOne: r3(Number(three.oracleShare) / Math.max(1e-9, Number(one.oracleShare))),
        routingMsThreeMinusOne: r3(Number(three.routingMsMean) - Number(one.routingMsMean)),
      };
      process.stdout.write(`${shape.padEnd(13)} 3 gateways / 1: ${ratios[shape].threeOverOne} of the share of oracle (goal >= 0.98); routing ${ratios[shape].routingMsThreeMinusOne >= 0 ? '+' : ''}${ratios[shape].routingMsThreeMinusOne} ms/request\n`);
    }
    const room = roomCost();
    const added = Math.round((room.decideUs.with - room.decideUs.without) * 1000) / 1000;
    process.stdout.write(
      `cache-room tie-break, in process: decision (load fact + load tier, 2 replicas) ${room.decideUs.with} us with, ${room.decideUs.without} us without (${added >= 0 ? '+' : ''}${added} us); a 500-block store+evict through the writer ${room.eventUs.with} us with, ${room.eventUs.without} us without\n`,
    );
    const load = loadavg()[0] ?? 0;
    process.stdout.write(`load average ${load.toFixed(1)}${quick ? ' (quick: not a measurement)' : ''}\n`);
    mkdirSync('bench/results', { recursive: true });
    writeFileSync(
      'bench/results/gateways.json',
      `${JSON.stringify({ bench: 'gateways', quick, replicas, capacityBlocks, blockSizeTokens, loadAverage: Math.round(load * 10) / 10, runs: rows, threeOverOne: ratios, cacheRoomCost: room }, null, 2)}\n`,
    );
  } finally {
    await stopAll();
    pg.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

await run();
