// What the Batch API costs and what it leaves the interactive tenant, with the sim, in one run:
//   1. throughput: the same N chat lines sent straight to the sims by workers at the batch's
//      lines_in_flight, against the same lines run as a batch through the gateway (upload, create,
//      wait for completed): lines/s each and their ratio. The batch's lines go through auth,
//      admission at the batch class, routing and the ledger, and admission keeps the batch class
//      to a share of the engines' slots, so the lines are also sent straight at that share: the
//      ratio against it is the gateway's own cost, the first ratio what a batch gives up in all.
//   2. the interactive tenant's streamed chats at a steady Poisson rate: TTFT p50 and p99 with no
//      batch, and with a large batch running (the batch's own lines/s meanwhile), and their ratios.
// Two sims (4 sequences each, the sim's default 50 tokens/s decode), a SQLite store in a temp dir,
// gateway.batch and gateway.admission at their defaults but slots_per_replica stated (4).
// Run: npm run bench:batch [-- lines (default 400)] [--seconds=N (interactive phase, default 20)]
//   (writes bench/results/batch.json)
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI, { toFile } from 'openai';
import { Registry } from 'prom-client';
import { Agent, request } from 'undici';
import { admissionDefaults } from '../src/admission/index.js';
import { batchDefaults } from '../src/batch/index.js';
import { batchesFor } from '../src/cli/batches.js';
import { percentiles } from '../src/e2e/index.js';
import { gatewayDefaults, startGateway } from '../src/gateway/index.js';
import { silentLogger } from '../src/log/index.js';
import { resolveSimOptions, startSim } from '../src/sim/index.js';
import { Store, storeDefaults } from '../src/store/index.js';
import { benchReplica } from './replicas.js';

const LINES = Number(process.argv.slice(2).find((a) => /^\d+$/.test(a)) ?? 400);
const SECONDS = Number(process.argv.find((a) => a.startsWith('--seconds='))?.slice(10) ?? 20);
const SLOTS = 4;
const MAX_TOKENS = 8;
const PROMPT_CHARS = 400;
// The interactive tenant's rate: a light load, so what moves its TTFT is the batch, not itself.
const INTERACTIVE_PER_S = 3;

const client = new Agent({ connections: 1024, keepAliveTimeout: 10_000 });
const round = (v: number, d = 1): number => Math.round(v * 10 ** d) / 10 ** d;
// A phase tag first, so no phase finds another's prompts in the sims' prefix caches.
const text = (tag: string, i: number): string => `${tag} ${i} `.padEnd(PROMPT_CHARS, 'lorem ipsum dolor sit amet ');
const lineBody = (tag: string, i: number): Record<string, unknown> => ({ model: 'm', max_tokens: MAX_TOKENS, messages: [{ role: 'user', content: text(tag, i) }] });

// Two sims, a store in a temp dir, and a gateway with the Batch API over them; two keys.
async function start() {
  const sims = await Promise.all(
    [0, 1].map(async () => {
      const sim = await startSim(resolveSimOptions({ model: 'm', host: '127.0.0.1', port: 0, tokenizer: 'bytes', hashSeed: '0', maxNumSeqs: SLOTS, prefillTokensPerS: 20_000, schedulingPolicy: 'priority' }));
      await sim.ready;
      return sim;
    }),
  );
  const simUrls = sims.map((s) => new URL(s.url));
  const views = simUrls.map((u, i) => benchReplica(`s${i}`, 'm', u, { kvEvents: false, schedulesByPriority: true, prefillTokensPerS: 20_000 }));
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-bench-batch-'));
  const store = await Store.open({ ...storeDefaults, path: join(dir, 'llmgw.db') }, { stateDir: dir, configKeys: [], defaultGatewayId: 'bench', log: silentLogger });
  const chatKey = (await store.keys.create({ name: 'chat', priority: 'interactive' })).key;
  const etlKey = (await store.keys.create({ name: 'etl', priority: 'standard' })).key;
  const batches = batchesFor(store, { runnerId: 'bench', log: silentLogger, config: batchDefaults });
  const gw = await startGateway({
    config: {
      ...gatewayDefaults,
      port: 0,
      router: { ...gatewayDefaults.router, loadPollIntervalMs: 200 },
      upstream: { ...gatewayDefaults.upstream, connections: 1024 },
      admission: { ...admissionDefaults, slotsPerReplica: SLOTS },
    },
    directory: { ready: (m) => (m === 'm' ? views : []), models: () => ['m'] },
    registry: new Registry(),
    store,
    batches: batches.service,
    innerKeyOf: batches.innerKeyOf,
    closeGraceMs: 500,
  });
  batches.start(gw.url);
  const etl = new OpenAI({ apiKey: etlKey, baseURL: new URL('/v1', gw.url).href, maxRetries: 0 });
  return {
    sims,
    simUrls,
    gw,
    etl,
    chatKey,
    close: async (): Promise<void> => {
      await batches.close();
      await gw.close();
      await store.close();
      await Promise.all(sims.map((s) => s.close()));
      await client.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function main(): Promise<void> {
  const { sims, simUrls, gw, etl, chatKey, close } = await start();
  const inFlight = batchDefaults.linesInFlight;
  try {
    // 1a. The lines straight to the sims, round robin, `n` at once: at the batch's lines_in_flight,
    // and at what admission lets the batch class run, to tell the share given up from the gateway's
    // own cost. Per replica that is the fewer of its slots less two classes' reserve and its
    // waiting requests less two classes' reserve (at least 1): a line is not streamed, so it counts
    // as waiting for its first token until its whole answer is back.
    const direct = async (tag: string, n: number): Promise<number> => {
      let next = 0;
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: n }, async () => {
          for (let i = next++; i < LINES; i = next++) {
            const r = await request(new URL('/v1/chat/completions', simUrls[i % simUrls.length]), { method: 'POST', dispatcher: client, headers: { 'content-type': 'application/json' }, body: JSON.stringify(lineBody(tag, i)) });
            await r.body.text();
            if (r.statusCode !== 200) throw new Error(`the sim answered line ${i} with ${r.statusCode}`);
          }
        }),
      );
      return LINES / ((performance.now() - t0) / 1000);
    };
    const a = admissionDefaults;
    const batchShare = Math.min(Math.max(1, SLOTS - 2 * a.reservedSlotsPerClass), Math.max(1, a.maxWaitingPerReplica - 2 * a.reservedPerClass)) * sims.length;
    const directLinesPerS = await direct('direct', inFlight);
    const shareLinesPerS = await direct('share', batchShare);

    // 1b. The same lines as one batch through the gateway, from create to completed.
    const run = async (tag: string, n: number): Promise<{ id: string; t0: number }> => {
      const jsonl = Array.from({ length: n }, (_, i) => JSON.stringify({ custom_id: `${tag}-${i}`, method: 'POST', url: '/v1/chat/completions', body: lineBody(tag, i) })).join('\n');
      const f = await etl.files.create({ file: await toFile(Buffer.from(jsonl), `${tag}.jsonl`), purpose: 'batch' });
      const at = performance.now();
      const b = await etl.batches.create({ input_file_id: f.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
      return { id: b.id, t0: at };
    };
    const one = await run('gateway', LINES);
    let done = await etl.batches.retrieve(one.id);
    while (done.status !== 'completed' && done.status !== 'failed') {
      await new Promise((r) => setTimeout(r, 20));
      done = await etl.batches.retrieve(one.id);
    }
    const batchLinesPerS = LINES / ((performance.now() - one.t0) / 1000);
    if (done.request_counts?.completed !== LINES) {
      const first = done.error_file_id == null ? '' : (await (await etl.files.content(done.error_file_id)).text()).split('\n')[0];
      throw new Error(`the batch ended ${done.status} with ${JSON.stringify(done.request_counts)}: ${first?.slice(0, 400) ?? ''}`);
    }

    // 2. The interactive tenant alone, then beside a batch too large to end within the phase.
    const alone = await interactive(gw.url, chatKey, 'alone');
    const big = await run('beside', 5_000);
    await waitFor(async () => ((await etl.batches.retrieve(big.id)).request_counts?.completed ?? 0) > 0);
    const before = (await etl.batches.retrieve(big.id)).request_counts?.completed ?? 0;
    const tb = performance.now();
    const beside = await interactive(gw.url, chatKey, 'beside');
    const besideLinesPerS = (((await etl.batches.retrieve(big.id)).request_counts?.completed ?? 0) - before) / ((performance.now() - tb) / 1000);
    await etl.batches.cancel(big.id);

    const result = {
      bench: 'batch',
      at: new Date().toISOString(),
      loadavg: loadavg().map((v) => round(v, 2)),
      cpus: availableParallelism(),
      sims: { count: sims.length, maxNumSeqs: SLOTS, maxTokens: MAX_TOKENS, promptChars: PROMPT_CHARS },
      linesInFlight: inFlight,
      throughput: {
        lines: LINES,
        directLinesPerS: round(directLinesPerS),
        batchLinesPerS: round(batchLinesPerS),
        ratio: round(batchLinesPerS / directLinesPerS, 2),
        batchShareInFlight: batchShare,
        directAtShareLinesPerS: round(shareLinesPerS),
        ratioAtShare: round(batchLinesPerS / shareLinesPerS, 2),
      },
      interactive: {
        perS: INTERACTIVE_PER_S,
        seconds: SECONDS,
        alone,
        beside,
        besideBatchLinesPerS: round(besideLinesPerS),
        p50Ratio: round(beside.ttftP50Ms / alone.ttftP50Ms, 2),
        p99Ratio: round(beside.ttftP99Ms / alone.ttftP99Ms, 2),
      },
    };
    console.log(`loadavg ${result.loadavg.join(' ')} (${result.cpus} cpus)`);
    console.log(`throughput, ${LINES} lines, ${inFlight} in flight: direct to the sims ${result.throughput.directLinesPerS} lines/s, as a batch through the gateway ${result.throughput.batchLinesPerS} lines/s, ratio ${result.throughput.ratio}`);
    console.log(`  direct at what admission lets the batch class run (${batchShare} in flight) ${result.throughput.directAtShareLinesPerS} lines/s, ratio ${result.throughput.ratioAtShare}`);
    console.log(`interactive TTFT at ${INTERACTIVE_PER_S}/s for ${SECONDS} s: alone p50 ${alone.ttftP50Ms} ms p99 ${alone.ttftP99Ms} ms (${alone.ok}/${alone.sent} ok)`);
    console.log(`  beside a batch (${result.interactive.besideBatchLinesPerS} lines/s): p50 ${beside.ttftP50Ms} ms p99 ${beside.ttftP99Ms} ms (${beside.ok}/${beside.sent} ok); ratio p50 ${result.interactive.p50Ratio}, p99 ${result.interactive.p99Ratio}`);
    mkdirSync('bench/results', { recursive: true });
    writeFileSync('bench/results/batch.json', JSON.stringify(result, null, 2) + '\n');
  } finally {
    await close();
  }
}

async function waitFor(ok: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const end = performance.now() + timeoutMs;
  while (!(await ok())) {
    if (performance.now() > end) throw new Error(`not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

// Streamed chats as Poisson arrivals for SECONDS; TTFT is the time to the first byte of the body.
async function interactive(url: URL, key: string, tag: string): Promise<{ sent: number; ok: number; ttftP50Ms: number; ttftP99Ms: number }> {
  const out: Promise<number | undefined>[] = [];
  const end = performance.now() + SECONDS * 1000;
  let at = performance.now();
  for (let i = 0; at < end; i++) {
    const wait = at - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    out.push(chat(url, key, `chat-${tag}`, i));
    at += (-Math.log(1 - Math.random()) * 1000) / INTERACTIVE_PER_S;
  }
  const ttfts = (await Promise.all(out)).filter((v): v is number => v !== undefined);
  const p = percentiles(ttfts);
  return { sent: out.length, ok: ttfts.length, ttftP50Ms: round(p.p50), ttftP99Ms: round(p.p99) };
}

async function chat(url: URL, key: string, tag: string, i: number): Promise<number | undefined> {
  const t0 = performance.now();
  const res = await request(new URL('/v1/chat/completions', url), {
    method: 'POST',
    dispatcher: client,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, 'x-llmgw-priority': 'interactive' },
    body: JSON.stringify({ ...lineBody(tag, i), stream: true }),
  });
  if (res.statusCode !== 200) {
    await res.body.text();
    return undefined;
  }
  let ttft: number | undefined;
  for await (const chunk of res.body) {
    ttft ??= performance.now() - t0;
    void chunk;
  }
  return ttft;
}

await main();
