// What the gateway costs beside a plain reverse proxy. `llmgw serve` as `npm start` runs it (its
// own process, its agent starting two sim engines with KV events, the qwen3 tokenizer, local
// tokenization verified against /tokenize, its request log on stderr), and over the same two sims:
// the gateway in another process with precise routing off (the load tier alone: no events, no
// tokenizing), so the run itself says what precise routing costs; nginx from Debian (one worker, keep-alive to the same
// two sims, round robin); a bare Node.js proxy (node:http and the gateway's own upstream client,
// round robin, nothing else: the floor of the transport llmgw is built on); a raw one
// (bench/raw-proxy.ts: TCP sockets and no HTTP library, the floor of the runtime itself); and one
// sim straight. wrk sends distinct short chat prompts to each in turn, the same engines behind
// all of them, and we compare requests per second, latency percentiles and the CPU each proxy
// spends per request (bench/proc-cpu.ts). Each path is run twice, alternating, and the better run
// kept, so a burst of other work on the machine does not decide the ratio. Then nginx and llmgw
// again over one connection, with the bare proxy and one engine straight, where nothing queues: the
// latency each path adds by itself. llmgw's runs also read its llmgw_gateway_request_stage_seconds
// before and after, for where its time a request went by stage.
// Run: npm run build && node dist/bench/overhead.js [--quick] [--cpu-prof]   (writes bench/results/overhead.json)
import { execFile, fork, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
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
import { ClusterIndex, MAX_SLOTS } from '../src/kv/index.js';
import { HashPool } from '../src/workers/index.js';
import { childrenOf, cpuOf, machineBusyMs, perRequest, type CpuUse } from './proc-cpu.js';
import { rawProxy } from './raw-proxy.js';
import { benchReplica } from './replicas.js';

const quick = process.argv.includes('--quick');
// --cpu-prof: `llmgw serve` writes a V8 CPU profile per thread to
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

// A run of `width` consecutive free ports: `llmgw serve` gives its sims ports counted from a base.
async function freeRun(width: number): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const base = 20_000 + Math.floor(Math.random() * 12_000);
    const ports = Array.from({ length: width }, (_, i) => base + i);
    if (ports.some((p) => takenHere.has(p))) continue;
    const free = await Promise.all(
      ports.map(async (p) => {
        const srv = createServer();
        const ok = await new Promise<boolean>((resolve) => {
          srv.once('error', () => resolve(false));
          srv.listen(p, '127.0.0.1', () => resolve(true));
        });
        if (ok) await new Promise<void>((r) => srv.close(() => r()));
        return ok;
      }),
    );
    if (free.every(Boolean)) {
      for (const p of ports) takenHere.add(p);
      return base;
    }
  }
  throw new Error(`no run of ${width} free ports between 20000 and 32000 after 200 tries`);
}

// `npm start`'s shape: the built-in default's two sim replicas of qwen3 with KV events, answering
// at once (prefill and decode at millions of tokens a second), as bench/conversation runs it.
const serveYaml = (port: number, httpBase: number, kvBase: number): string => `engines:
  sim: { bin: "" }
kv_events: { hash_seed: "0", hash_algo: sha256_cbor }
node:
  name: local
  addr: 127.0.0.1
  devices: []
  ports: { http_base: ${httpBase}, kv_events_base: ${kvBase} }
models:
  qwen3:
    served_model_name: qwen3
    profiles:
      - name: sim-cpu
        engine: sim
        gpu_class: cpu
        tp: 1
        model_path: qwen3
        kv_events: true
        args: [--prefill-tokens-per-s, "100000000", --decode-tokens-per-s, "1000000"]
replicas:
  - { model: qwen3, profile: sim-cpu, count: 2 }
gateway:
  host: 127.0.0.1
  port: ${port}
`;

// The key (VLLM_API_KEY) of the engine `llmgw serve` started on `port`, from its environment: a
// child of serve whose command line names that port.
function simKeyOf(servePid: number, port: number): string {
  for (const pid of childrenOf(servePid)) {
    const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    if (argv[argv.indexOf('--port') + 1] !== String(port)) continue;
    const env = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
    const key = env.find((e) => e.startsWith('VLLM_API_KEY='))?.slice('VLLM_API_KEY='.length);
    if (key !== undefined) return key;
  }
  throw new Error(`no engine of llmgw serve (pid ${servePid}) on port ${port} with a VLLM_API_KEY`);
}

// The sums of llmgw_gateway_request_stage_seconds by stage (seconds).
async function stageSums(url: string): Promise<Map<string, number>> {
  const res = await request(`${url}/metrics`, { signal: AbortSignal.timeout(10_000) });
  const text = await res.body.text();
  return new Map([...text.matchAll(/^llmgw_gateway_request_stage_seconds_sum\{stage="([a-z]+)"\} (\S+)$/gm)].map((m) => [m[1] ?? '', Number(m[2])]));
}

async function waitUntil(what: string, ok: () => Promise<boolean>, timeoutMs = 90_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await ok().catch(() => false))) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const chatOk = async (url: string, key?: string): Promise<boolean> => {
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key === undefined ? {} : { authorization: `Bearer ${key}` }) },
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
  /** llmgw's time a request in each stage of its request path (ms), from its own histogram. */
  readonly stagesMs?: Readonly<Record<string, number>>;
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
    const gwPort = await freePort();
    const httpBase = await freeRun(2);
    const kvBase = await freeRun(8);
    const cfg = join(dir, 'llmgw.yaml');
    writeFileSync(cfg, serveYaml(gwPort, httpBase, kvBase));
    const gateway = spawn(process.execPath, [...profileArgs, main, 'serve', '--config', cfg], { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, LLMGW_LOG_FORMAT: 'json' } });
    children.push(gateway);
    // Its request log is read as a terminal would read it, and only its last lines kept for a failure.
    let log = '';
    gateway.stderr?.on('data', (c: Buffer) => {
      log = (log + c.toString('utf8')).slice(-8_000);
    });
    gateway.once('exit', (code) => {
      if (code !== 0 && code !== null) process.stderr.write(`llmgw serve exited with ${code}:\n${log}`);
    });
    const ready = async (): Promise<boolean> => {
      const res = await request(`http://127.0.0.1:${gwPort}/ready`, { signal: AbortSignal.timeout(2_000) });
      await res.body.dump();
      return res.statusCode === 200;
    };
    await waitUntil('llmgw serve /ready', ready, 180_000);
    const sims = [httpBase, httpBase + 1];
    // Each engine demands the key serve's agent gave it; the other paths send it as the gateway does.
    const keys = sims.map((p) => simKeyOf(gateway.pid ?? 0, p));
    for (const [i, p] of sims.entries()) await waitUntil(`sim on ${p}`, () => chatOk(`http://127.0.0.1:${p}`, keys[i]));
    const loadPort = await freePort();
    const loadOnly = fork(fileURLToPath(import.meta.url), ['--gateway-load', String(loadPort), JSON.stringify(sims), JSON.stringify(keys)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
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
  ${sims.map((p, i) => `upstream sim${i} { server 127.0.0.1:${p}; keepalive 32; }`).join('\n  ')}
  # Each engine has its own key: the request picks its engine first, then gets that engine's key.
  split_clients "\${request_id}" $sim { 50% sim0; * sim1; }
  map $sim $simkey { ${keys.map((k, i) => `sim${i} "Bearer ${k}";`).join(' ')} }
  server {
    listen 127.0.0.1:${nginxPort};
    location / { proxy_pass http://$sim; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_set_header Authorization $simkey; proxy_buffering off; }
  }
}
`,
    );
    const barePort = await freePort();
    const bare = fork(fileURLToPath(import.meta.url), ['--bare', String(barePort), JSON.stringify(sims), JSON.stringify(keys)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    children.push(bare);
    await waitUntil('the bare proxy', () => chatOk(`http://127.0.0.1:${barePort}`));
    const rawPort = await freePort();
    const raw = fork(fileURLToPath(import.meta.url), ['--raw', String(rawPort), JSON.stringify(sims), JSON.stringify(keys)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    children.push(raw);
    await waitUntil('the raw proxy', () => chatOk(`http://127.0.0.1:${rawPort}`));
    const nginx = spawn(NGINX, ['-p', dir, '-c', join(dir, 'nginx.conf')], { stdio: 'ignore' });
    children.push(nginx);
    await waitUntil('nginx', () => chatOk(`http://127.0.0.1:${nginxPort}`));

    // Distinct prompts: every request misses every cache, as new users do.
    const scriptOf = (name: string, authorization?: string): string => {
      const file = join(dir, name);
      const auth = authorization === undefined ? '' : `, ["Authorization"] = "${authorization}"`;
      writeFileSync(
        file,
        `local n = 0
math.randomseed(os.time())
request = function()
  n = n + 1
  local body = '{"model":"qwen3","max_tokens":1,"messages":[{"role":"user","content":"distinct short question ' .. n .. '-' .. math.random(1000000000) .. '"}]}'
  return wrk.format("POST", nil, { ["Content-Type"] = "application/json"${auth} }, body)
end
`,
      );
      return file;
    };
    const script = scriptOf('post.lua');
    // Straight to the first engine, with the key serve's agent gave it.
    const directScript = scriptOf('direct.lua', `Bearer ${keys[0] ?? ''}`);
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
    // The engines are `llmgw serve`'s children: counted as engines, apart from the gateway's CPU.
    const engines = gateway.pid === undefined ? [] : childrenOf(gateway.pid);
    const cpuText = (c: CpuUse | undefined): string => (c === undefined ? 'n/a' : `${(c.mainMs + c.otherMs).toFixed(3)} (main thread ${c.mainMs.toFixed(3)})`);
    for (let round = 0; round < 2; round++) {
      for (const name of ['nginx', 'llmgw', 'llmgwLoad', 'bare', 'raw', 'direct'] as const) {
        const s0 = name === 'llmgw' ? await stageSums(targets.llmgw) : undefined;
        const [p0, e0, m0] = [cpuOf(proxies[name], engines), cpuOf(engines), machineBusyMs()];
        const load = await wrk(targets[name], name === 'direct' ? directScript : script);
        const [p1, e1, m1] = [cpuOf(proxies[name], engines), cpuOf(engines), machineBusyMs()];
        const s1 = s0 === undefined ? undefined : await stageSums(targets.llmgw);
        const machine = m0 === undefined || m1 === undefined ? undefined : ratioOf(m1 - m0, load.requests);
        const stagesMs = s0 === undefined || s1 === undefined ? {} : { stagesMs: Object.fromEntries([...s1].map(([k, v]) => [k, thousandths(((v - (s0.get(k) ?? 0)) * 1000) / Math.max(1, load.requests))])) };
        const r: Load = { ...load, cpuMs: { proxy: proxies[name].length === 0 ? undefined : perRequest(p0, p1, load.requests), engines: perRequest(e0, e1, load.requests), machine }, ...stagesMs };
        results[name].push(r);
        console.log(
          `  ${name.padEnd(9)} round ${round + 1}: ${r.perS.toFixed(0)} req/s, p50 ${r.p50Ms.toFixed(2)} ms, p99 ${r.p99Ms.toFixed(2)} ms, errors ${r.errors}; ` +
            `CPU ms a request: proxy ${cpuText(r.cpuMs?.proxy)}, engines ${cpuText(r.cpuMs?.engines)}`,
        );
      }
    }
    // One connection: nothing queues anywhere, so the p50 is each path's own latency. Under the
    // 16 connections above the p50 is mostly queueing, and a proxy slower in CPU queues longer.
    // The bare proxy and the engine straight as well: what of llmgw's added latency is the
    // transport it is built on, and what its own work (its stages, read around its runs).
    const unqueuedRuns: Record<'nginx' | 'llmgw' | 'bare' | 'direct', Load[]> = { nginx: [], llmgw: [], bare: [], direct: [] };
    for (let round = 0; round < 2; round++) {
      for (const name of ['nginx', 'llmgw', 'bare', 'direct'] as const) {
        const s0 = name === 'llmgw' ? await stageSums(targets.llmgw) : undefined;
        const load = await wrk(targets[name], name === 'direct' ? directScript : script, 1);
        const s1 = s0 === undefined ? undefined : await stageSums(targets.llmgw);
        const stagesMs = s0 === undefined || s1 === undefined ? {} : { stagesMs: Object.fromEntries([...s1].map(([k, v]) => [k, thousandths(((v - (s0.get(k) ?? 0)) * 1000) / Math.max(1, load.requests))])) };
        const r: Load = { ...load, ...stagesMs };
        unqueuedRuns[name].push(r);
        console.log(`  ${name.padEnd(9)} one connection, round ${round + 1}: ${r.perS.toFixed(0)} req/s, p50 ${r.p50Ms.toFixed(3)} ms, p99 ${r.p99Ms.toFixed(2)} ms, errors ${r.errors}`);
      }
    }
    const fastest = (runs: readonly Load[]): Load => runs.reduce((a, b) => (b.p50Ms < a.p50Ms ? b : a));
    const [un, ug, ub, ud] = [fastest(unqueuedRuns.nginx), fastest(unqueuedRuns.llmgw), fastest(unqueuedRuns.bare), fastest(unqueuedRuns.direct)];
    const unqueued = {
      connections: 1,
      nginx: un,
      llmgw: ug,
      bare: ub,
      direct: ud,
      llmgwMinusNginxP50Ms: thousandths(ug.p50Ms - un.p50Ms),
      bareMinusNginxP50Ms: thousandths(ub.p50Ms - un.p50Ms),
      nginxMinusDirectP50Ms: thousandths(un.p50Ms - ud.p50Ms),
    };
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
      // Where llmgw's time a request went in its better run, by stage of its request path (ms).
      llmgwStagesMs: g.stagesMs,
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
      `one connection, nothing queued: llmgw p50 ${ug.p50Ms.toFixed(3)} ms vs nginx ${un.p50Ms.toFixed(3)} ms: +${unqueued.llmgwMinusNginxP50Ms} ms (under ${CONNECTIONS} connections: +${summary.llmgwMinusNginxP50Ms} ms); ` +
        `the bare proxy ${ub.p50Ms.toFixed(3)} ms (${unqueued.bareMinusNginxP50Ms} over nginx), the engine straight ${ud.p50Ms.toFixed(3)} ms (nginx adds ${unqueued.nginxMinusDirectP50Ms})`,
    );
    console.log(`llmgw's time a request by stage (one connection, its fastest run): ${Object.entries(ug.stagesMs ?? {}).map(([k, v]) => `${k} ${v}`).join(', ')} ms`);
    console.log(`llmgw's time a request by stage (16 connections, its better run): ${Object.entries(g.stagesMs ?? {}).map(([k, v]) => `${k} ${v}`).join(', ')} ms`);
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

// The gateway routing by load alone in its own process, built as `llmgw serve` builds its parts,
// in front of the same two sims: no KV events, nothing tokenized.
async function loadOnlyProcess(port: number, sims: readonly number[], keys: readonly string[]): Promise<void> {
  const index = new ClusterIndex({ capacityBlocks: 200_000 });
  const config = { ...gatewayDefaults, port, router: { ...gatewayDefaults.router, loadPollIntervalMs: 0, prefillTokensPerS: 100_000_000, localTokenize: false } };
  const pool = new HashPool({ indexBuffer: index.buffer, ...poolOptionsOf(config) });
  const views: ReplicaView[] = sims.map((p, i) => ({ ...benchReplica(`sim${i}`, 'qwen3', new URL(`http://127.0.0.1:${p}/`), { tokenizer: 'bytes', kvEvents: false }), apiKey: keys[i] }));
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
  const stop = async (): Promise<void> => {
    await gw.close();
    await pool.close();
    process.exit(0);
  };
  process.once('SIGTERM', () => void stop());
}

// The floor: what node:http and the gateway's own upstream client (UpstreamPool, which reaches
// every http:// engine) cost passing the same requests through, round robin, with no routing,
// metrics or limits at all.
async function bareProcess(port: number, sims: readonly number[], keys: readonly string[]): Promise<void> {
  const upstream = new UpstreamPool({ connections: 64 });
  const origins = sims.map((p, i) => ({ url: new URL(`http://127.0.0.1:${p}/`), authorization: `Bearer ${keys[i] ?? ''}` }));
  let turn = 0;
  const server = createHttpServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const to = origins[turn++ % origins.length] ?? { url: new URL('http://127.0.0.1:9/'), authorization: '' };
      const body = Buffer.concat(chunks);
      upstream
        .request({ origin: to.url, path: req.url ?? '/', headers: { 'content-type': 'application/json', authorization: to.authorization }, body, signal: new AbortController().signal, headersTimeoutMs: 30_000, bodyTimeoutMs: 30_000 })
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
const portsArg = JSON.parse(b ?? '[]') as number[];
const keysArg = JSON.parse(c ?? '[]') as string[];
if (mode === '--gateway-load') await loadOnlyProcess(Number(a), portsArg, keysArg);
else if (mode === '--bare') await bareProcess(Number(a), portsArg, keysArg);
else if (mode === '--raw') {
  const proxy = await rawProxy(Number(a), portsArg, keysArg);
  process.once('SIGTERM', () => {
    proxy.close();
    process.exit(0);
  });
}
else await bench();
