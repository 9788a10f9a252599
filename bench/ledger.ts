// What the usage ledger costs and what it guarantees, on both homes (a SQLite file, a local
// PostgreSQL started for the run):
//   1. the ledger's cost on a request's path at 500 requests/s: the wait for a row's group commit
//      (what the gateway adds before an answer's last byte), p50/p99, and CPU per row, beside the
//      least any group commit waits (one turn of the event loop), measured in the same run, with
//      store.durable_commit off (the default) and on;
//   2. twenty kill -9 rounds under traffic: completed answers missing from the ledger (want 0);
//   3. two gateways on one PostgreSQL and one key with a day budget: the overdraw when it runs out,
//      beside its bound (what the requests in flight then used beyond their holds).
// The machine's load average is printed with each cost: on a shared 2-core box, other processes'
// load, not the ledger, decides a round trip to PostgreSQL (0.3 ms idle, several ms at load 10).
// Prints a table and writes bench-ledger.json. Needs PostgreSQL installed (Debian's postgresql).
import { writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { silentLogger } from '../src/log/index.js';
import { openPostgres, openSqlite, Store, storeDefaults, type KeyRecord, type StoreConfig, type UsageRow } from '../src/store/index.js';
import { startFakeEngine } from '../test/gateway/fake-engine.js';
import { killRound } from '../test/support/kill-loop.js';
import { overdrawRun } from '../test/support/overdraw.js';
import { startPostgres } from '../test/support/postgres.js';

const rate = 500;
const seconds = Number(process.env.LEDGER_BENCH_SECONDS ?? 10);
const kills = Number(process.env.LEDGER_BENCH_KILLS ?? 20);

function quantile(xs: readonly number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? NaN;
}

const round3 = (x: number): number => Math.round(x * 1000) / 1000;

function row(k: KeyRecord, i: number): UsageRow {
  return {
    requestId: `bench-${i}`,
    at: Date.now(),
    keyId: k.id,
    keyName: k.name,
    team: k.team,
    model: 'm',
    endpoint: 'chat',
    replica: 'r0',
    tier: 'precise',
    status: 200,
    promptTokens: 500,
    cachedTokens: 256,
    completionTokens: 100,
    usageReported: true,
    ttftMs: 20,
    totalMs: 400,
  };
}

// Open loop at `rate`: each arrival records one row and times the wait for its commit.
async function openLoop(record: (i: number) => Promise<void>): Promise<{ p50Ms: number; p99Ms: number; cpuUsPerRow: number; rows: number }> {
  const waits: number[] = [];
  const pending: Promise<void>[] = [];
  const total = rate * seconds;
  const start = performance.now();
  const cpu0 = process.cpuUsage();
  for (let i = 0; i < total; i++) {
    const due = start + (i * 1000) / rate;
    const ahead = due - performance.now();
    if (ahead > 0) await new Promise((r) => setTimeout(r, ahead));
    const t0 = performance.now();
    pending.push(record(i).then(() => void waits.push(performance.now() - t0)));
  }
  await Promise.all(pending);
  const cpu = process.cpuUsage(cpu0);
  return { p50Ms: round3(quantile(waits, 0.5)), p99Ms: round3(quantile(waits, 0.99)), cpuUsPerRow: round3((cpu.user + cpu.system) / total), rows: total };
}

async function ledgerCost(name: string, config: StoreConfig): Promise<Record<string, unknown>> {
  const store = await Store.open(config, { stateDir: tmpdir(), configKeys: [], defaultGatewayId: 'bench', log: silentLogger });
  try {
    await store.createKey({ name: 'bench', tokens_per_day: 1e12 });
    const k = store.keys.get('bench');
    if (k === undefined) throw new Error('no key');
    const base = await openLoop(() => new Promise((r) => setImmediate(r)));
    const ledger = await openLoop((i) => store.record(row(k, i)));
    return {
      home: name,
      rate,
      seconds,
      ledger,
      baseline: base,
      addedP50Ms: round3(ledger.p50Ms - base.p50Ms),
      addedP99Ms: round3(ledger.p99Ms - base.p99Ms),
      addedCpuUsPerRow: round3(ledger.cpuUsPerRow - base.cpuUsPerRow),
      load1: round3(loadavg()[0] ?? NaN),
    };
  } finally {
    await store.close();
  }
}

// Two gateways (two stores, each with its own pools) on one PostgreSQL spend one key's day budget
// until it refuses them all: the overdraw beside its bound (test/support/overdraw.ts states it),
// with every request within its hold, then with every fourth reporting more prompt than it held.
async function overdraw(url: string): Promise<Record<string, unknown>[]> {
  const budget = 20_000;
  const open = (id: string): Promise<Store> => Store.open({ ...storeDefaults, url }, { stateDir: tmpdir(), configKeys: [], defaultGatewayId: id, log: silentLogger });
  const a = await open('gw-a');
  const b = await open('gw-b');
  try {
    await a.createKey({ name: 'shared', tokens_per_day: budget });
    await b.keys.refresh();
    const out: Record<string, unknown>[] = [];
    for (const overEvery of [0, 4]) {
      await a.db.run('DELETE FROM spend');
      out.push({ overEvery, ...(await overdrawRun({ stores: [a, b], keyName: 'shared', budget, clientsPerStore: 8, overEvery })) });
    }
    return out;
  } finally {
    await a.close();
    await b.close();
  }
}

const dir = mkdtempSync(join(tmpdir(), 'llmgw-bench-ledger-'));
const pg = await startPostgres();
const engine = await startFakeEngine({ id: 'r0' });
try {
  const cost: Record<string, unknown>[] = [];
  for (const durableCommit of [false, true]) {
    cost.push(await ledgerCost(`sqlite${durableCommit ? ' durable_commit' : ''}`, { ...storeDefaults, path: join(dir, `cost-${durableCommit}.db`), durableCommit }));
    cost.push(await ledgerCost(`postgres${durableCommit ? ' durable_commit' : ''}`, { ...storeDefaults, url: pg.database(), durableCommit }));
  }
  const rounds: Record<string, unknown>[] = [];
  for (const home of ['sqlite', 'postgres'] as const) {
    const path = join(dir, 'kill.db');
    const url = home === 'postgres' ? pg.database() : '';
    for (let i = 0; i < kills; i++) {
      const r = await killRound({
        store: home === 'sqlite' ? { ...storeDefaults, path } : { ...storeDefaults, url },
        engine: engine.url,
        clients: 16,
        killAfter: 200 + ((i * 53) % 200),
        openDb: () => (home === 'sqlite' ? openSqlite({ path, busyTimeoutMs: 1_000 }) : openPostgres({ url, timeoutMs: 2_000, maxConnections: 1, onIdleError: () => undefined })),
      });
      rounds.push({ home, round: i, ...r });
    }
  }
  const od = await overdraw(pg.database());
  const out = { cost, kills: rounds, overdraw: od };
  for (const c of cost) process.stdout.write(`${JSON.stringify(c)}\n`);
  for (const home of ['sqlite', 'postgres']) {
    const rs = rounds.filter((r) => r.home === home);
    process.stdout.write(`kill -9 ${home}: ${rs.length} rounds, completed ${rs.reduce((n, r) => n + Number(r.completed), 0)}, missing ${rs.reduce((n, r) => n + Number(r.missing), 0)}\n`);
  }
  for (const o of od) process.stdout.write(`overdraw: ${JSON.stringify(o)}\n`);
  writeFileSync('bench-ledger.json', JSON.stringify(out, null, 2));
} finally {
  await engine.close();
  pg.close();
  rmSync(dir, { recursive: true, force: true });
}
