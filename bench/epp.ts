// llmgw as an endpoint picker, measured two ways on the same sims in one run.
// 1. Decision time: a gRPC client playing Envoy sends a chat's headers and body over ext_proc and
//    waits for the header answer (the destination), against the same decision asked of the EPP's
//    Picker in-process (what serve's routing call does, without gRPC, framing and the body sent
//    back). A 100k-token turn of one conversation and short chats, alternating, p50/p99 and ratios.
// 2. Hit rate: the multi-turn e2e workload (src/e2e's trace, oracle and driver) through `llmgw
//    serve` (precise, the sims as external endpoints) and through the EPP behind a small Envoy
//    stand-in (HTTP in, ext_proc for the destination, the request forwarded, the answer streamed
//    back through ext_proc as Envoy's full duplex mode does), each against the oracle.
// Run: npm run build && node dist/bench/epp.js [--quick]   (writes bench/results/epp.json)
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import { request } from 'undici';
import { parse } from 'yaml';
import { driveTrace, generateTrace, oracle, percentiles, summarise, traceTokens, workloadDefaults, type RunSummary, type WorkloadOptions } from '../src/e2e/index.js';
import { extProcDefinition, fileDiscovery, parseEppConfig, startEpp, type Epp } from '../src/epp/index.js';
import { loggedEvents } from '../src/log/index.js';

const quick = process.argv.includes('--quick');
const REPLICAS = quick ? 2 : 4;
const CAPACITY_BLOCKS = quick ? 512 : 2_048;
const BLOCK = 16;
const LONG_TOKENS = quick ? 20_000 : 100_000;
const LONG_RUNS = quick ? 6 : 40;
const SHORT_RUNS = quick ? 20 : 300;
const workload: WorkloadOptions = quick
  ? { ...workloadDefaults('multi-turn'), groups: 3, perGroup: 3, prefixTokens: 200, questionTokens: 60, answerTokens: 40, ratePerS: 20, outputTokens: 4 }
  : { ...workloadDefaults('multi-turn'), groups: 12, perGroup: 4 };
const main = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));
const signal = AbortSignal.timeout(170_000);

interface Sim {
  readonly name: string;
  readonly port: number;
  readonly kvPort: number;
  readonly replayPort: number;
  readonly proc: ChildProcess;
}

async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address() as AddressInfo;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

async function until(pred: () => Promise<boolean> | boolean, what: string, ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    try {
      if (await pred()) return;
    } catch {
      // Not up yet: the next poll asks again, until the bound.
    }
    if (Date.now() > end) throw new Error(`bench/epp: ${what} not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function startSim(i: number): Promise<Sim> {
  const [port, kvPort, replayPort] = [await freePort(), await freePort(), await freePort()];
  const kv = JSON.stringify({ enable_kv_cache_events: true, publisher: 'zmq', endpoint: `tcp://127.0.0.1:${kvPort}`, replay_endpoint: `tcp://127.0.0.1:${replayPort}`, topic: '' });
  const args = ['sim', 'serve', 'bench', '--host', '127.0.0.1', '--port', String(port), '--tokenizer', 'bytes', '--block-size', String(BLOCK), '--prefix-caching-hash-algo', 'sha256_cbor'];
  args.push('--kv-events-config', kv, '--kv-capacity-blocks', String(CAPACITY_BLOCKS), '--prefill-tokens-per-s', '20000', '--decode-tokens-per-s', quick ? '2000' : '200');
  const proc = spawn(process.execPath, [main, ...args], { env: { ...process.env, PYTHONHASHSEED: '0' }, stdio: ['ignore', 'ignore', 'ignore'] });
  await until(async () => (await request(`http://127.0.0.1:${port}/health`)).statusCode === 200, `sim-${i} healthy`);
  return { name: `sim-${i}`, port, kvPort, replayPort, proc };
}

async function stop(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = once(proc, 'exit');
  proc.kill('SIGTERM');
  const timer = setTimeout(() => proc.kill('SIGKILL'), 15_000);
  await exited;
  clearTimeout(timer);
}

async function resetCaches(sims: readonly Sim[]): Promise<void> {
  for (const s of sims) await (await request(`http://127.0.0.1:${s.port}/reset_prefix_cache`, { method: 'POST' })).body.dump();
}

// --- Envoy's side of ext_proc: a stream whose answers are read in order.

interface Answer {
  request_headers?: { response?: Common };
  request_body?: { response?: Common };
  response_headers?: { response?: Common };
  response_body?: { response?: Common };
  immediate_response?: { status?: { code?: string }; body?: Buffer };
}
interface Common {
  header_mutation?: { set_headers?: { header?: { key?: string; raw_value?: Buffer } }[] };
  body_mutation?: { streamed_response?: { body?: Buffer; end_of_stream?: boolean } };
}
type ExtProcClient = grpc.Client & { Process(): grpc.ClientDuplexStream<unknown, Answer> };

class Exchange {
  readonly call: grpc.ClientDuplexStream<unknown, Answer>;
  readonly #got: Answer[] = [];
  #wake: (() => void) | undefined;
  #ended = false;

  constructor(c: ExtProcClient) {
    this.call = c.Process();
    this.call.on('data', (a: Answer) => {
      this.#got.push(a);
      this.#wake?.();
    });
    const end = (): void => {
      this.#ended = true;
      this.#wake?.();
    };
    this.call.on('end', end);
    this.call.on('error', end);
  }

  async next(): Promise<Answer> {
    for (;;) {
      const a = this.#got.shift();
      if (a !== undefined) return a;
      if (this.#ended) throw new Error('ext_proc stream ended early');
      await new Promise<void>((r) => (this.#wake = r));
      this.#wake = undefined;
    }
  }
}

const hv = (key: string, value: string) => ({ key, raw_value: Buffer.from(value) });
const full = { request_body_mode: 'FULL_DUPLEX_STREAMED', response_body_mode: 'FULL_DUPLEX_STREAMED' };
const destinationOf = (a: Answer): string | undefined => {
  const h = a.request_headers?.response?.header_mutation?.set_headers?.find((x) => x.header?.key === 'x-gateway-destination-endpoint');
  return h?.header?.raw_value?.toString();
};

// Headers, then the body in Envoy's chunks; resolves with the header answer.
function ask(x: Exchange, path: string, body: Buffer): Promise<Answer> {
  x.call.write({ request_headers: { headers: { headers: [hv(':method', 'POST'), hv(':path', path), hv('content-type', 'application/json')] }, end_of_stream: false }, protocol_config: full });
  for (let at = 0; at < body.length; at += 62_000) x.call.write({ request_body: { body: body.subarray(at, at + 62_000), end_of_stream: at + 62_000 >= body.length } });
  return x.next();
}

async function bodyBack(x: Exchange): Promise<Buffer> {
  const parts: Buffer[] = [];
  for (;;) {
    const s = (await x.next()).request_body?.response?.body_mutation?.streamed_response;
    parts.push(s?.body ?? Buffer.alloc(0));
    if (s?.end_of_stream === true) return Buffer.concat(parts);
  }
}

// The Envoy stand-in: each HTTP request asks the EPP, goes to the first endpoint named, and its
// answer passes back through the EPP's response phase.
function envoy(c: ExtProcClient): Promise<{ url: URL; close: () => Promise<void> }> {
  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const chunks: Buffer[] = [];
    for await (const ch of req) chunks.push(ch as Buffer);
    const x = new Exchange(c);
    const first = await ask(x, req.url ?? '/', Buffer.concat(chunks));
    if (first.immediate_response !== undefined) {
      res.writeHead(503).end(first.immediate_response.body);
      x.call.end();
      return;
    }
    const dest = (destinationOf(first) ?? '').split(',')[0] ?? '';
    const forwarded = await bodyBack(x);
    const up = await request(`http://${dest}${req.url ?? '/'}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: forwarded });
    const type = String(up.headers['content-type'] ?? 'application/json');
    x.call.write({
      response_headers: { headers: { headers: [hv(':status', String(up.statusCode)), hv('content-type', type)] } },
      metadata_context: { filter_metadata: { 'envoy.lb': { fields: { 'x-gateway-destination-endpoint-served': { stringValue: dest } } } } },
    });
    await x.next();
    res.writeHead(up.statusCode, { 'content-type': type, 'x-llmgw-replica': dest });
    const back = (async () => {
      for (;;) {
        const s = (await x.next()).response_body?.response?.body_mutation?.streamed_response;
        if (s?.body !== undefined && s.body.length > 0) res.write(s.body);
        if (s?.end_of_stream === true) return;
      }
    })();
    for await (const ch of up.body) x.call.write({ response_body: { body: ch as Buffer, end_of_stream: false } });
    x.call.write({ response_body: { body: Buffer.alloc(0), end_of_stream: true } });
    await back;
    x.call.end();
    res.end();
  };
  const srv = createServer((req, res) => {
    handle(req, res).catch((e: unknown) => {
      if (!res.headersSent) res.writeHead(502);
      res.end(String(e));
    });
  });
  return new Promise((resolve) =>
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as AddressInfo;
      resolve({ url: new URL(`http://127.0.0.1:${port}/`), close: () => new Promise((r) => srv.close(() => r())) });
    }),
  );
}

// --- the runs

async function serveRun(sims: readonly Sim[], tokens: number[][], oracleCached: number, dir: string): Promise<RunSummary> {
  const endpoints = sims.map((s) => `  - { model: bench, endpoint: { name: ${s.name}, url: "http://127.0.0.1:${s.port}/", kv_events: "tcp://127.0.0.1:${s.kvPort}", replay: "tcp://127.0.0.1:${s.replayPort}", hash_seed: "0", block_size: ${BLOCK}, capacity_blocks: ${CAPACITY_BLOCKS} } }`);
  const file = join(dir, 'serve.yaml');
  writeFileSync(file, `node: { name: bench, addr: 127.0.0.1 }\nreplicas:\n${endpoints.join('\n')}\ngateway:\n  host: 127.0.0.1\n  port: 0\n  router: { policy: precise }\n`);
  const proc = spawn(process.execPath, [main, 'serve', '--config', file], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  proc.stderr?.setEncoding('utf8').on('data', (d: string) => (err += d));
  try {
    let url: string | undefined;
    await until(() => {
      const e = loggedEvents(err, 'serve.ready').find((r) => r.replicas === sims.length);
      url = typeof e?.url === 'string' ? e.url : undefined;
      return url !== undefined;
    }, 'serve ready with every sim');
    const trace = generateTrace(workload);
    const { results, wallMs } = await driveTrace(trace, new URL(url ?? ''), { model: 'bench', timeoutMs: 60_000, signal });
    return summarise({ policy: 'serve precise', shape: workload.shape, results, wallMs, routingMsMean: NaN }, tokens.map((t) => t.length), oracleCached);
  } finally {
    await stop(proc);
  }
}

async function eppRun(epp: Epp, tokens: number[][], oracleCached: number): Promise<RunSummary> {
  const c = new (grpc.makeGenericClientConstructor(extProcDefinition(), 'ExternalProcessor'))(`127.0.0.1:${epp.extProcPort}`, grpc.credentials.createInsecure()) as unknown as ExtProcClient;
  const front = await envoy(c);
  try {
    const trace = generateTrace(workload);
    const { results, wallMs } = await driveTrace(trace, front.url, { model: 'bench', timeoutMs: 60_000, signal });
    return summarise({ policy: 'epp', shape: workload.shape, results, wallMs, routingMsMean: NaN }, tokens.map((t) => t.length), oracleCached);
  } finally {
    await front.close();
    c.close();
  }
}

const filler = (n: number, tag: string): string => {
  const words = `${tag} `;
  let s = words;
  for (let i = 0; s.length < n; i++) s += `w${i % 997} `;
  return s.slice(0, n);
};

async function decisionSeconds(epp: Epp): Promise<{ sum: number; count: number }> {
  const values = (await epp.registry.getSingleMetric('llmgw_epp_decision_seconds')?.get())?.values ?? [];
  const of = (suffix: string): number => values.filter((v) => (v as { metricName?: string }).metricName === `llmgw_epp_decision_seconds_${suffix}`).reduce((n, v) => n + v.value, 0);
  return { sum: of('sum'), count: of('count') };
}

const rounded = (p: ReturnType<typeof percentiles>): ReturnType<typeof percentiles> => ({ p50: round2(p.p50), p90: round2(p.p90), p99: round2(p.p99), mean: round2(p.mean) });
const round2 = (x: number): number => Math.round(x * 100) / 100;

async function decisions(
  epp: Epp,
): Promise<Record<string, { extProcMs: ReturnType<typeof percentiles>; inProcessMs: ReturnType<typeof percentiles>; ratioP50: number; ratioP99: number; eppSideMeanMs: number; runs: number }>> {
  const c = new (grpc.makeGenericClientConstructor(extProcDefinition(), 'ExternalProcessor'))(`127.0.0.1:${epp.extProcPort}`, grpc.credentials.createInsecure()) as unknown as ExtProcClient;
  const history = filler(LONG_TOKENS, 'long-conversation');
  const shapes = {
    [`${LONG_TOKENS / 1000}k-token turn`]: { runs: LONG_RUNS, body: (i: number) => JSON.stringify({ model: 'bench', messages: [{ role: 'system', content: history }, { role: 'user', content: `turn ${i}: and then?` }], max_tokens: 16 }) },
    'short chat': { runs: SHORT_RUNS, body: (i: number) => JSON.stringify({ model: 'bench', messages: [{ role: 'user', content: filler(400, `short ${i}`) }], max_tokens: 16 }) },
  };
  const out: Awaited<ReturnType<typeof decisions>> = {};
  try {
    for (const [name, s] of Object.entries(shapes)) {
      const ext: number[] = [];
      const inproc: number[] = [];
      const before = await decisionSeconds(epp);
      // One of each, alternating, so both see the same machine; the first two are warm-up.
      for (let i = -2; i < s.runs; i++) {
        const body = Buffer.from(s.body(i));
        const x = new Exchange(c);
        const t0 = performance.now();
        const a = await ask(x, '/v1/chat/completions', body);
        const t1 = performance.now();
        if (destinationOf(a) === undefined) throw new Error(`bench/epp: no destination (${JSON.stringify(a.immediate_response?.body?.toString())})`);
        await bodyBack(x);
        x.call.end();
        const body2 = Buffer.from(s.body(i + 100_000));
        const t2 = performance.now();
        const p = await epp.picker.pick({ path: '/v1/chat/completions', headers: { ':path': '/v1/chat/completions', 'content-type': 'application/json' }, body: body2, subset: undefined, signal });
        const t3 = performance.now();
        p.routed?.ticket.done();
        if (i >= 0) {
          ext.push(t1 - t0);
          inproc.push(t3 - t2);
        }
      }
      const after = await decisionSeconds(epp);
      const e = rounded(percentiles(ext));
      const n = rounded(percentiles(inproc));
      const r = (a: number, b: number): number => Math.round((a / b) * 100) / 100;
      // The EPP's own clock, from a stream's first message to its header answer: what of the ext_proc
      // figure is spent inside the EPP rather than in gRPC and the client.
      const serverMeanMs = round2(((after.sum - before.sum) * 1000) / Math.max(1, after.count - before.count));
      out[name] = { extProcMs: e, inProcessMs: n, ratioP50: r(e.p50, n.p50), ratioP99: r(e.p99, n.p99), eppSideMeanMs: serverMeanMs, runs: s.runs };
    }
  } finally {
    c.close();
  }
  return out;
}

// The ext_proc round trip with nothing to decide: a GET's headers, answered with any ready
// endpoint. What every decision through ext_proc pays before routing's own time.
async function transportFloor(epp: Epp): Promise<ReturnType<typeof percentiles>> {
  const c = new (grpc.makeGenericClientConstructor(extProcDefinition(), 'ExternalProcessor'))(`127.0.0.1:${epp.extProcPort}`, grpc.credentials.createInsecure()) as unknown as ExtProcClient;
  const times: number[] = [];
  try {
    for (let i = -2; i < SHORT_RUNS; i++) {
      const x = new Exchange(c);
      const t0 = performance.now();
      x.call.write({ request_headers: { headers: { headers: [hv(':method', 'GET'), hv(':path', '/v1/models')] }, end_of_stream: true }, protocol_config: full });
      const a = await x.next();
      const t1 = performance.now();
      x.call.end();
      if (destinationOf(a) === undefined) throw new Error('bench/epp: a GET got no destination');
      if (i >= 0) times.push(t1 - t0);
    }
  } finally {
    c.close();
  }
  return rounded(percentiles(times));
}

async function run(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-bench-epp-'));
  const sims: Sim[] = [];
  let epp: Epp | undefined;
  try {
    for (let i = 0; i < REPLICAS; i++) sims.push(await startSim(i));
    const trace = generateTrace(workload);
    const tokens = await traceTokens(trace);
    const best = oracle(tokens.map((t) => ({ tokens: t, outputTokens: workload.outputTokens })), { replicas: REPLICAS, capacityBlocks: CAPACITY_BLOCKS, blockSizeTokens: BLOCK });
    const oracleHit = Math.round((best.totalCachedTokens / Math.max(1, best.totalPromptTokens)) * 1000) / 1000;
    console.log(`oracle ${workload.shape}: ${trace.requests.length} requests on ${REPLICAS} sims, hit rate ${oracleHit}`);
    const serve = await serveRun(sims, tokens, best.totalCachedTokens, dir);
    console.log(`serve precise: hit ${serve.hitRate}, share of oracle ${serve.oracleShare}, TTFT p50 ${serve.ttftMs.p50} ms, failed ${serve.failed}`);
    await resetCaches(sims);
    const endpoints = join(dir, 'endpoints.yaml');
    writeFileSync(endpoints, `endpoints:\n${sims.map((s) => `  - { name: ${s.name}, address: 127.0.0.1, port: ${s.port}, labels: { kv: "${s.kvPort}", replay: "${s.replayPort}" } }`).join('\n')}\n`);
    const config = parseEppConfig(
      parse(`
discovery: { file: ${JSON.stringify(endpoints)} }
pool: { models: [bench], kv_events: "tcp://{address}:{labels.kv}", replay: "tcp://{address}:{labels.replay}", hash_seed: "0", block_size: ${BLOCK}, capacity_blocks: ${CAPACITY_BLOCKS}, tokenizer: bytes, health_interval_ms: 200 }
listen: { host: 127.0.0.1, ext_proc_port: 0, health_port: 0, metrics_port: 0 }
gateway: { max_body_bytes: 4000000 }
`),
    );
    const started = await startEpp(config, fileDiscovery({ path: endpoints, pollMs: 1000 }));
    epp = started;
    await started.whenReady();
    await until(() => started.pool.ready('bench').length === REPLICAS, 'every sim ready in the EPP');
    const viaEpp = await eppRun(started, tokens, best.totalCachedTokens);
    console.log(`epp (ext_proc): hit ${viaEpp.hitRate}, share of oracle ${viaEpp.oracleShare}, TTFT p50 ${viaEpp.ttftMs.p50} ms, failed ${viaEpp.failed}`);
    const timed = await decisions(started);
    for (const [name, d] of Object.entries(timed)) {
      console.log(`decision, ${name}: ext_proc p50 ${d.extProcMs.p50} ms p99 ${d.extProcMs.p99} ms; in-process p50 ${d.inProcessMs.p50} ms p99 ${d.inProcessMs.p99} ms; ratio p50 ${d.ratioP50}x p99 ${d.ratioP99}x; inside the EPP (its histogram) mean ${d.eppSideMeanMs} ms (${d.runs} each)`);
    }
    const floor = await transportFloor(started);
    console.log(`ext_proc round trip with nothing to decide (a GET): p50 ${floor.p50} ms p99 ${floor.p99} ms (${SHORT_RUNS})`);
    const out = {
      bench: 'epp',
      quick,
      machine: { cpus: availableParallelism(), loadavg1: Math.round((loadavg()[0] ?? 0) * 100) / 100 },
      decision: timed,
      extProcFloorMs: floor,
      hitRate: {
        shape: workload.shape,
        replicas: REPLICAS,
        requests: trace.requests.length,
        oracle: oracleHit,
        serve: { hitRate: serve.hitRate, oracleShare: serve.oracleShare, ttftP50Ms: serve.ttftMs.p50, failed: serve.failed },
        epp: { hitRate: viaEpp.hitRate, oracleShare: viaEpp.oracleShare, ttftP50Ms: viaEpp.ttftMs.p50, failed: viaEpp.failed },
      },
    };
    mkdirSync(new URL('../../bench/results/', import.meta.url), { recursive: true });
    writeFileSync(new URL(`../../bench/results/${quick ? 'epp-quick.json' : 'epp.json'}`, import.meta.url), JSON.stringify(out, null, 2) + '\n');
  } finally {
    await epp?.close();
    for (const s of sims) await stop(s.proc);
    rmSync(dir, { recursive: true, force: true });
  }
}

await run();
