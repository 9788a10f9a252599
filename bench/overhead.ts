// What the gateway costs beside a plain reverse proxy. Two `llmgw sim serve` engines with KV
// events; the gateway in its own process as `serve` builds it (shared index, worker pool, one
// event stream per engine, local tokenization verified against /tokenize), and the same gateway
// again with precise routing off (the load tier alone: no events, no tokenizing), so the run
// itself says what precise routing costs; nginx from Debian (one worker, keep-alive to the same
// two sims, round robin); a bare Node.js proxy (node:http and the gateway's own upstream client,
// round robin, nothing else: the floor of the transport llmgw is built on); a raw one
// (bench/raw-proxy.ts: TCP sockets and no HTTP library, the floor of the runtime itself); and one
// sim straight. wrk sends distinct short chat prompts to each in turn, the same engines behind
// all of them, and we compare requests per second, latency percentiles and the CPU each proxy
// spends per request (bench/proc-cpu.ts). Each path is run twice, alternating, and the better run
// kept, so a burst of other work on the machine does not decide the ratio. Then nginx and llmgw
// again over one connection, where nothing queues: the latency each path adds by itself.
// Run: npm run build && node dist/bench/overhead.js [--quick] [--cpu-prof]   (writes bench/results/overhead.json)
import { execFile, fork, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { createServer } from 'node:net';
import { availableParallelism, cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Registry } from 'prom-client';
import { request } from 'undici';
import { gatewayDefaults, startGateway, poolOptionsOf } from '../src/gateway/index.js';
import { type ReplicaView } from '../src/routing/index.js';
import { UpstreamPool } from '../src/upstream/index.js';
import { ClusterIndex, EngineEventStream, MAX_SLOTS, type KvDelta } from '../src/kv/index.js';
import { HashPool } from '../src/workers/index.js';
import { cpuOf, machineBusyMs, perRequest, type CpuUse } from './proc-cpu.js';
import { rawProxy } from './raw-proxy.js';
import { benchReplica } from './replicas.js';

const quick = process.argv.includes('--quick');
// --cpu-prof: llmgw's process (precise routing) writes a V8 CPU profile per thread to
// bench/results/overhead-profile/ when it stops, to see where its CPU a request goes.
const profileArgs = process.argv.includes('--cpu-prof') ? ['--cpu-prof', '--cpu-prof-dir', fileURLToPath(new URL('../../bench/results/overhead-profile/', import.meta.url))] : [];
const SECONDS = quick ? 2 : 10;
const CONNECTIONS = 16;
const NGINX = '/usr/sbin/nginx';
const WRK = '/usr/bin/wrk';
const main = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));
const run = promisify(execFile);
const children: ChildProcess[] = [];

// Ports below Linux's ephemeral range (32768 and up), each checked free: a port the kernel picked
// for a listener a moment ago can be handed to an outgoing connection (wrk's, a test's running
// beside this bench) before our process binds it.
const takenHere = new Set<number>();
async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    if (takenHere.has(port)) continue;
    const srv = createServer();
    const ok = await new Promise<boolean>((resolve) => {
      srv.once('error', () => resolve(false));
      srv.listen(port, '127.0.0.1', () => resolve(true));
    });
    if (!ok) continue;
    await new Promise<void>((r) => srv.close(() => r()));
    takenHere.add(port);
    return port;
  }
  throw new Error('no free port between 20000 and 32000 after 200 tries');
}

async function waitUntil(what: string, ok: () => Promise<boolean>, timeoutMs = 90_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await ok().catch(() => false))) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const chatOk = async (url: string): Promise<boolean> => {
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'qwen3', max_tokens: 1, messages: [{ role: 'user', content: 'ready?' }] }),
    signal: AbortSignal.timeout(5_000),
  });
  await res.body.dump();
  return res.statusCode === 200;
};

// wrk prints latencies as 1.23ms, 456.78us or 1.02s.
function ms(v: string | undefined): number {
  const m = /^([\d.]+)(us|ms|s)$/.exec(v ?? '');
  if (m === null) return NaN;
  const n = Number(m[1]);
  return m[2] === 'us' ? n / 1000 : m[2] === 's' ? n * 1000 : n;
}

interface Load {
  readonly perS: number;
  readonly requests: number;
  readonly p50Ms: number;
  readonly p90Ms: number;
  readonly p99Ms: number;
  readonly errors: number;
  /** CPU per request of the proxy's processes (none when straight to the engine), of the engines, and of the whole machine. */
  readonly cpuMs?: { readonly proxy: CpuUse | undefined; readonly engines: CpuUse | undefined; readonly machine: number | undefined };
}

// Figures are kept to the microsecond (ms with three decimals), ratios to three decimals.
const thousandths = (v: number): number => Math.round(v * 1000) / 1000;
// A run's proxy CPU a request, all its threads (none when straight to the engine).
const proxyCpu = (x: Load): number | undefined => {
  const c = x.cpuMs?.proxy;
  return c === undefined ? undefined : thousandths(c.mainMs + c.otherMs);
};

// The proxy CPU a request that `share` of the reference proxy's rate leaves room for, on a machine
// as busy as in the reference run: each request may then take the machine's CPU a request over
// `share`, and the engines, wrk and the kernel take what they took beside the reference proxy. At
// the reference's higher rate the engines batch more, so this is the most a slower proxy could get.
function proxyCpuAllowed(reference: Load, share: number): number | undefined {
  const machine = reference.cpuMs?.machine;
  const proxy = proxyCpu(reference);
  if (machine === undefined || proxy === undefined) return undefined;
  return thousandths(machine / share - (machine - proxy));
}
const ratioOf = (a: number | undefined, b: number | undefined): number | undefined => (a === undefined || b === undefined || b <= 0 ? undefined : thousandths(a / b));

async function wrk(url: string, script: string, connections = CONNECTIONS): Promise<Load> {
  const { stdout } = await run(WRK, ['-t1', `-c${connections}`, `-d${SECONDS}s`, '--latency', '-s', script, `${url}/v1/chat/completions`], { timeout: (SECONDS + 30) * 1000 });
  const perS = Number(/Requests\/sec:\s+([\d.]+)/.exec(stdout)?.[1] ?? NaN);
  const requests = Number(/(\d+) requests in/.exec(stdout)?.[1] ?? 0);
  const at = (p: string): number => ms(new RegExp(`^\\s+${p}%\\s+(\\S+)`, 'm').exec(stdout)?.[1]);
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(stdout)?.[1] ?? 0);
  const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(stdout);
  const errors = non2xx + (sock === null ? 0 : sock.slice(1).reduce((n, v) => n + Number(v), 0));
  return { perS, requests, p50Ms: at('50'), p90Ms: at('90'), p99Ms: at('99'), errors };
}

async function bench(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-overhead-'));
  try {
    const nginxPort = await freePort();
    const sims = [await freePort(), await freePort()];
    const events = [await freePort(), await freePort(), await freePort(), await freePort()];
    for (const [i, port] of sims.entries()) {
      const kv = { enable_kv_cache_events: true, publisher: 'zmq', endpoint: `tcp://127.0.0.1:${events[2 * i] ?? 0}`, replay_endpoint: `tcp://*:${events[2 * i + 1] ?? 0}`, topic: 'kv-events' };
      const args = [main, 'sim', 'serve', 'qwen3', '--served-model-name', 'qwen3', '--host', '127.0.0.1', '--port', String(port), '--tokenizer', 'bytes'];
      args.push('--decode-tokens-per-s', '1000000', '--prefill-tokens-per-s', '100000000', '--prefix-caching-hash-algo', 'sha256_cbor', '--kv-events-config', JSON.stringify(kv));
      const sim = spawn(process.execPath, args, { stdio: 'ignore', env: { ...process.env, PYTHONHASHSEED: '0' } });
      children.push(sim);
    }
    for (const p of sims) await waitUntil(`sim on ${p}`, () => chatOk(`http://127.0.0.1:${p}`));
    const gwPort = await freePort();
    const gateway = fork(fileURLToPath(import.meta.url), ['--gateway', String(gwPort), JSON.stringify(sims), JSON.stringify(events)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], execArgv: profileArgs });
    children.push(gateway);
    await waitUntil('the gateway', () => chatOk(`http://127.0.0.1:${gwPort}`));
    const loadPort = await freePort();
    const loadOnly = fork(fileURLToPath(import.meta.url), ['--gateway-load', String(loadPort), JSON.stringify(sims)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    children.push(loadOnly);
    await waitUntil('the load-only gateway', () => chatOk(`http://127.0.0.1:${loadPort}`));

    for (const sub of ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) mkdirSync(join(dir, sub));
    writeFileSync(
      join(dir, 'nginx.conf'),
      `worker_processes 1;
daemon off;
pid ${join(dir, 'nginx.pid')};
error_log ${join(dir, 'nginx-error.log')} warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${join(dir, 'client_body')};
  proxy_temp_path ${join(dir, 'proxy')};
  fastcgi_temp_path ${join(dir, 'fastcgi')};
  uwsgi_temp_path ${join(dir, 'uwsgi')};
  scgi_temp_path ${join(dir, 'scgi')};
  upstream sims { ${sims.map((p) => `server 127.0.0.1:${p};`).join(' ')} keepalive 64; }
  server {
    listen 127.0.0.1:${nginxPort};
    location / { proxy_pass http://sims; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; }
  }
}
`,
    );
    const barePort = await freePort();
    const bare = fork(fileURLToPath(import.meta.url), ['--bare', String(barePort), JSON.stringify(sims)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    children.push(bare);
    await waitUntil('the bare proxy', () => chatOk(`http://127.0.0.1:${barePort}`));
    const rawPort = await freePort();
    const raw = fork(fileURLToPath(import.meta.url), ['--raw', String(rawPort), JSON.stringify(sims)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    children.push(raw);
    await waitUntil('the raw proxy', () => chatOk(`http://127.0.0.1:${rawPort}`));
    const nginx = spawn(NGINX, ['-p', dir, '-c', join(dir, 'nginx.conf')], { stdio: 'ignore' });
    children.push(nginx);
    await waitUntil('nginx', () => chatOk(`http://127.0.0.1:${nginxPort}`));

    // Distinct prompts: every request misses every cache, as new users do.
    const script = join(dir, 'post.lua');
    writeFileSync(
      script,
      `local n = 0
math.randomseed(os.time())
request = function()
  n = n + 1
  local body = '{"model":"qwen3","max_tokens":1,"messages":[{"role":"user","content":"distinct short question ' .. n .. '-' .. math.random(1000000000) .. '"}]}'
  return wrk.format("POST", nil, { ["Content-Type"] = "application/json" }, body)
end
`,
    );
    const targets = {
      llmgw: `http://127.0.0.1:${gwPort}`,
      llmgwLoad: `http://127.0.0.1:${loadPort}`,
      nginx: `http://127.0.0.1:${nginxPort}`,
      bare: `http://127.0.0.1:${barePort}`,
      raw: `http://127.0.0.1:${rawPort}`,
      direct: `http://127.0.0.1:${sims[0] ?? 0}`,
    } as const;
    const results: Record<keyof typeof targets, Load[]> = { llmgw: [], llmgwLoad: [], nginx: [], bare: [], raw: [], direct: [] };
    console.log(`wrk -t1 -c${CONNECTIONS} -d${SECONDS}s per run; the machine is shared with other work: read the ratios, not the absolute figures`);
    const pidsOf = (c: ChildProcess | undefined): number[] => (c?.pid === undefined ? [] : [c.pid]);
    const proxies: Record<keyof typeof targets, number[]> = { llmgw: pidsOf(gateway), llmgwLoad: pidsOf(loadOnly), nginx: pidsOf(nginx), bare: pidsOf(bare), raw: pidsOf(raw), direct: [] };
    const engines = children.slice(0, sims.length).flatMap(pidsOf);
    const cpuText = (c: CpuUse | undefined): string => (c === undefined ? 'n/a' : `${(c.mainMs + c.otherMs).toFixed(3)} (main thread ${c.mainMs.toFixed(3)})`);
    for (let round = 0; round < 2; round++) {
      for (const name of ['nginx', 'llmgw', 'llmgwLoad', 'bare', 'raw', 'direct'] as const) {
        const [p0, e0, m0] = [cpuOf(proxies[name]), cpuOf(engines), machineBusyMs()];
        const load = await wrk(targets[name], script);
        const [p1, e1, m1] = [cpuOf(proxies[name]), cpuOf(engines), machineBusyMs()];
        const machine = m0 === undefined || m1 === undefined ? undefined : ratioOf(m1 - m0, load.requests);
        const r: Load = { ...load, cpuMs: { proxy: proxies[name].length === 0 ? undefined : perRequest(p0, p1, load.requests), engines: perRequest(e0, e1, load.requests), machine } };
        results[name].push(r);
        console.log(
          `  ${name.padEnd(9)} round ${round + 1}: ${r.perS.toFixed(0)} req/s, p50 ${r.p50Ms.toFixed(2)} ms, p99 ${r.p99Ms.toFixed(2)} ms, errors ${r.errors}; ` +
            `CPU ms a request: proxy ${cpuText(r.cpuMs?.proxy)}, engines ${cpuText(r.cpuMs?.engines)}`,
        );
      }
    }
    // One connection: nothing queues anywhere, so the p50 is each path's own latency. Under the
    // 16 connections above the p50 is mostly queueing, and a proxy slower in CPU queues longer.
    const unqueuedRuns: Record<'nginx' | 'llmgw', Load[]> = { nginx: [], llmgw: [] };
    for (let round = 0; round < 2; round++) {
      for (const name of ['nginx', 'llmgw'] as const) {
        const r = await wrk(targets[name], script, 1);
        unqueuedRuns[name].push(r);
        console.log(`  ${name.padEnd(9)} one connection, round ${round + 1}: ${r.perS.toFixed(0)} req/s, p50 ${r.p50Ms.toFixed(3)} ms, p99 ${r.p99Ms.toFixed(2)} ms, errors ${r.errors}`);
      }
    }
    const fastest = (runs: readonly Load[]): Load => runs.reduce((a, b) => (b.p50Ms < a.p50Ms ? b : a));
    const [un, ug] = [fastest(unqueuedRuns.nginx), fastest(unqueuedRuns.llmgw)];
    const unqueued = { connections: 1, nginx: un, llmgw: ug, llmgwMinusNginxP50Ms: thousandths(ug.p50Ms - un.p50Ms) };
    // How the gateway decided: the tier and where its token ids came from, from its own /metrics.
    const scrape = await request(`${targets.llmgw}/metrics`, { signal: AbortSignal.timeout(5_000) });
    const text = await scrape.body.text();
    const routing: Record<string, number> = {};
    for (const m of text.matchAll(/^(llmgw_prefix_decisions_total|llmgw_gateway_tokenize_duration_seconds_count|llmgw_gateway_routing_fallbacks_total)\{([^}]*)\} (\S+)$/gm)) {
      routing[`${m[1] ?? ''}{${m[2] ?? ''}}`] = Number(m[3]);
    }
    console.log(`  gateway routing: ${JSON.stringify(routing)}`);
    const best = (name: keyof typeof targets): Load => results[name].reduce((a, b) => (b.perS > a.perS ? b : a));
    const [g, l, n, b, w, d] = [best('llmgw'), best('llmgwLoad'), best('nginx'), best('bare'), best('raw'), best('direct')];
    const cpuDiff = (x: Load, y: Load): number | undefined => {
      const [cx, cy] = [proxyCpu(x), proxyCpu(y)];
      return cx === undefined || cy === undefined ? undefined : thousandths(cx - cy);
    };
    const summary = {
      llmgw: g,
      llmgwLoad: l,
      nginx: n,
      bare: b,
      raw: w,
      direct: d,
      llmgwOverNginxRps: ratioOf(g.perS, n.perS),
      llmgwMinusNginxP50Ms: thousandths(g.p50Ms - n.p50Ms),
      bareOverNginxRps: ratioOf(b.perS, n.perS),
      llmgwOverBareRps: ratioOf(g.perS, b.perS),
      llmgwLoadOverNginxRps: ratioOf(l.perS, n.perS),
      // Where llmgw's CPU a request goes, from the better runs: the transport (the bare proxy), the
      // gateway's own work with routing by load alone, and what precise routing adds to that.
      cpuBudgetMs: { transport: proxyCpu(b), gateway: cpuDiff(l, b), preciseRouting: cpuDiff(g, l) },
      rawOverNginxRps: ratioOf(w.perS, n.perS),
      proxyCpuAllowedMs: proxyCpuAllowed(n, 0.7),
      unqueued,
      // Each path's proxy CPU per request (all its threads) in its better run, beside the bare proxy's.
      llmgwOverBareCpu: ratioOf(proxyCpu(g), proxyCpu(b)),
      nginxOverBareCpu: ratioOf(proxyCpu(n), proxyCpu(b)),
      rawOverBareCpu: ratioOf(proxyCpu(w), proxyCpu(b)),
      targets: { llmgwOverNginxRps: 0.7, llmgwMinusNginxP50Ms: 1 },
    };
    console.log(
      `llmgw ${g.perS.toFixed(0)} req/s = ${summary.llmgwOverNginxRps}x nginx's ${n.perS.toFixed(0)} (target >= 0.7); ` +
        `p50 ${g.p50Ms.toFixed(2)} ms vs nginx ${n.p50Ms.toFixed(2)} ms: +${summary.llmgwMinusNginxP50Ms} ms (target <= 1); ` +
        `a bare Node.js proxy ${b.perS.toFixed(0)} req/s = ${summary.bareOverNginxRps}x nginx, p50 ${b.p50Ms.toFixed(2)} ms (llmgw = ${summary.llmgwOverBareRps}x it); a raw-socket Node.js proxy ${w.perS.toFixed(0)} req/s = ${summary.rawOverNginxRps}x nginx; one engine straight ${d.perS.toFixed(0)} req/s`,
    );
    const result = {
      bench: 'overhead',
      quick,
      when: new Date().toISOString(),
      machine: { cpus: availableParallelism(), model: cpus()[0]?.model ?? 'unknown', loadavg: loadavg().map((v) => Math.round(v * 100) / 100), shared: true },
      node: process.version,
      wrk: { threads: 1, connections: CONNECTIONS, seconds: SECONDS },
      runs: results,
      routing,
      ...summary,
    };
    mkdirSync(new URL('../../bench/results/', import.meta.url), { recursive: true });
    const file = quick ? 'overhead-quick.json' : 'overhead.json';
    writeFileSync(new URL(`../../bench/results/${file}`, import.meta.url), JSON.stringify(result, null, 2) + '\n');
    console.log(
      `llmgw's CPU a request, from the runs above: ${summary.cpuBudgetMs.transport ?? 'n/a'} ms the transport (the bare proxy's), ` +
        `${summary.cpuBudgetMs.gateway ?? 'n/a'} ms more for the gateway routing by load (${l.perS.toFixed(0)} req/s = ${summary.llmgwLoadOverNginxRps}x nginx), ` +
        `${summary.cpuBudgetMs.preciseRouting ?? 'n/a'} ms more for precise routing (tokenizing, scoring, the index and its events)`,
    );
    console.log(
      `proxy CPU a request, all threads: llmgw ${cpuText(g.cpuMs?.proxy)} ms, a bare Node.js proxy ${cpuText(b.cpuMs?.proxy)} ms, the raw one ${cpuText(w.cpuMs?.proxy)} ms, nginx ${cpuText(n.cpuMs?.proxy)} ms ` +
        `(llmgw = ${summary.llmgwOverBareCpu}x the bare proxy's; the engines ${cpuText(g.cpuMs?.engines)} ms behind llmgw, ${cpuText(n.cpuMs?.engines)} ms behind nginx)`,
    );
    console.log(
      `what 0.7x nginx's rate allows: ${summary.proxyCpuAllowedMs ?? 'n/a'} ms of proxy CPU a request (the machine spent ${n.cpuMs?.machine ?? 'n/a'} ms a request in nginx's run, ` +
        `${proxyCpu(n) ?? 'n/a'} of it nginx's); the bare transport alone takes ${proxyCpu(b) ?? 'n/a'}, llmgw ${proxyCpu(g) ?? 'n/a'}`,
    );
    console.log(
      `one connection, nothing queued: llmgw p50 ${ug.p50Ms.toFixed(3)} ms vs nginx ${un.p50Ms.toFixed(3)} ms: +${unqueued.llmgwMinusNginxP50Ms} ms (under ${CONNECTIONS} connections: +${summary.llmgwMinusNginxP50Ms} ms)`,
    );
    console.log(`wrote bench/results/${file}`);
  } finally {
    for (const c of children.reverse()) {
      if (c.exitCode !== null || c.signalCode !== null) continue;
      c.kill('SIGTERM');
      const exited = once(c, 'exit');
      const timer = setTimeout(() => c.kill('SIGKILL'), 20_000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(dir, { recursive: true, force: true });
  }
}

// The gateway's own process, built as `llmgw serve` builds it, in front of the two sims; without
// `events`, routing by load alone (engines without KV events, nothing tokenized).
async function gatewayProcess(port: number, sims: readonly number[], events: readonly number[] | undefined): Promise<void> {
  const precise = events !== undefined;
  const index = new ClusterIndex({ capacityBlocks: 200_000 });
  const config = { ...gatewayDefaults, port, router: { ...gatewayDefaults.router, loadPollIntervalMs: 0, prefillTokensPerS: 100_000_000, localTokenize: precise } };
  const pool = new HashPool({ indexBuffer: index.buffer, ...poolOptionsOf(config) });
  let apply: (id: string, d: KvDelta) => void = () => undefined;
  const views: ReplicaView[] = [];
  const streams: EngineEventStream[] = [];
  for (const [i, p] of sims.entries()) {
    const id = `sim${i}`;
    if (events !== undefined) {
      const stream = new EngineEventStream({
        engineId: id,
        port: events[2 * i] ?? 0,
        replayPort: events[2 * i + 1] ?? 0,
        blockSizeTokens: 16,
        seed: '0',
        topic: 'kv-events',
        capacityBlocks: 4096,
        onDelta: (d) => apply(id, d),
      });
      await stream.start();
      streams.push(stream);
    }
    views.push(benchReplica(id, 'qwen3', new URL(`http://127.0.0.1:${p}/`), { tokenizer: 'bytes', kvEvents: precise }));
  }
  const gw = await startGateway({
    config,
    registry: new Registry(),
    directory: { ready: () => views, models: () => ['qwen3'] },
    index: { index, slotCount: MAX_SLOTS },
    scorer: pool,
    parsePool: pool,
    tokenizePool: pool,
    tokenizerOf: () => 'bytes',
    ownerOf: () => 'local',
  });
  apply = (id, d) => void gw.writer?.apply('local', id, d);
  const stop = async (): Promise<void> => {
    await gw.close();
    for (const s of streams) await s.close();
    await pool.close();
    process.exit(0);
  };
  process.once('SIGTERM', () => void stop());
}

// The floor: what node:http and the gateway's own upstream client (UpstreamPool, which reaches
// every http:// engine) cost passing the same requests through, round robin, with no routing,
// metrics or limits at all.
async function bareProcess(port: number, sims: readonly number[]): Promise<void> {
  const upstream = new UpstreamPool({ connections: 64 });
  const origins = sims.map((p) => new URL(`http://127.0.0.1:${p}/`));
  let turn = 0;
  const server = createHttpServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const origin = origins[turn++ % origins.length] ?? new URL('http://127.0.0.1:9/');
      const body = Buffer.concat(chunks);
      upstream
        .request({ origin, path: req.url ?? '/', headers: { 'content-type': 'application/json' }, body, signal: new AbortController().signal, headersTimeoutMs: 30_000, bodyTimeoutMs: 30_000 })
        .then(async (up) => {
          res.writeHead(up.status, { 'content-type': up.headers['content-type'] ?? 'application/json' });
          for await (const chunk of up.body) res.write(chunk);
          res.end();
        })
        .catch(() => {
          // The bench counts a failed request through wrk's non-2xx and socket errors.
          if (!res.headersSent) res.writeHead(502);
          res.end();
        });
    });
  });
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  process.once('SIGTERM', () => {
    server.close();
    void upstream.close().then(() => process.exit(0));
  });
}

const [mode, a, b, c] = process.argv.slice(2);
if (mode === '--gateway') await gatewayProcess(Number(a), JSON.parse(b ?? '[]') as number[], JSON.parse(c ?? '[]') as number[]);
else if (mode === '--gateway-load') await gatewayProcess(Number(a), JSON.parse(b ?? '[]') as number[], undefined);
else if (mode === '--bare') await bareProcess(Number(a), JSON.parse(b ?? '[]') as number[]);
else if (mode === '--raw') {
  const proxy = await rawProxy(Number(a), JSON.parse(b ?? '[]') as number[]);
  process.once('SIGTERM', () => {
    proxy.close();
    process.exit(0);
  });
}
else await bench();
