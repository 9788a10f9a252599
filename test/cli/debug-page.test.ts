// The debug page on a real `llmgw serve` with a sim engine, in Debian's headless Chromium: killing the
// engine shows the shard's badge go through failed and starting back to ready, live, and a click on
// it its chart lit on the state it is in; `llmgw ctl status` reads the same picture; a screenshot is kept.
import { strict as assert } from 'node:assert';
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { chromiumContext, inkOf } from '../support/browser.js';
import { llmgwMain, loggedEvent, simConfig, startServe } from '../support/serve.js';
import { waitFor } from '../support/wait.js';
const shard = 'shard:qwen3-sim-cpu-0-r0';

void test('debug page: a killed sim engine is seen failing, starting and ready again, live', { timeout: 180_000 }, async (t) => {
  const served = await startServe(t, (p) =>
    simConfig(p, {
      count: 1,
      extra: `agent:
  state_dir: ${join(p.dir, 'state')}
  log_dir: ${join(p.dir, 'logs')}
  health_interval_ms: 200
  restart: { backoff_base_ms: 300, backoff_max_ms: 600 }
`,
    }),
  );
  const { dir, port } = served;
  assert.ok(loggedEvent(served.err(), 'serve.replica', { replica: 'qwen3-sim-cpu-0', phase: 'loading' }), 'serve says what the replica is doing while it loads');

  const ctx = await chromiumContext(t);
  const page = await ctx.newPage();
  const problems: string[] = [];
  page.on('pageerror', (e) => problems.push(e.message));
  await page.goto(`http://127.0.0.1:${port}/debug/actors`);
  const card = `[data-actor="${shard}"]`;
  await page.waitForSelector(`${card}[data-phase="ready"]`, { timeout: 30_000 });
  for (const id of ['node:local', 'replica:qwen3-sim-cpu-0', 'publisher:qwen3-sim-cpu-0']) await page.waitForSelector(`[data-actor="${id}"]`, { timeout: 10_000 });
  // Every phase the shard's card shows from now on, as the page itself changes it.
  await page.evaluate(`(() => {
    window.seen = [];
    const card = document.querySelector('${card}');
    new MutationObserver(() => window.seen.push(card.dataset.phase)).observe(card, { attributes: true, attributeFilter: ['data-phase'] });
  })()`);

  const records = readdirSync(join(dir, 'state')).filter((n) => n.endsWith('.json'));
  const record: unknown = JSON.parse(readFileSync(join(dir, 'state', records[0] ?? ''), 'utf8'));
  const pid = (record as { processes: { pid: number }[] }).processes[0]?.pid;
  assert.ok(typeof pid === 'number' && pid > 0, 'the engine is recorded with its pid');
  process.kill(pid, 'SIGKILL');

  // Polled from here: the page's security policy forbids the string evaluation waitForFunction uses.
  await waitFor(
    () =>
      page.evaluate(`(() => {
        const seen = window.seen.filter((p, i, all) => all[i - 1] !== p);
        const failed = seen.indexOf('failed');
        const starting = seen.indexOf('starting', failed);
        return failed >= 0 && starting > failed && seen.indexOf('ready', starting) > starting;
      })()`),
    { timeoutMs: 60_000, intervalMs: 100, what: 'the page to show the shard failed, starting, then ready' },
  );
  const seen: unknown = await page.evaluate('window.seen');
  // The shard's badge in the grid opens its chart, transitions and log lines.
  await page.click(card);
  const detail = `#detail[open][data-shows="${shard}"]`;
  await page.waitForSelector(`${detail} .transitions td.move`, { timeout: 10_000 });
  const moves: unknown = await page.evaluate(`[...document.querySelectorAll('${detail} .transitions td.move')].map((td) => td.textContent)`);
  assert.ok(Array.isArray(moves));
  for (const m of ['ready → failed', 'failed → starting', 'loading → ready']) assert.ok(moves.includes(m), `${m} in the recent transitions (${moves.join(', ')}; seen ${String(seen)})`);
  const why: unknown = await page.evaluate(`[...document.querySelectorAll('${detail} .transitions tr')].map((tr) => tr.textContent).find((t) => t.includes('ready → failed'))`);
  assert.match(String(why), /process\.exited/, 'the event that failed it is named');
  assert.match(String(why), /SIGKILL|signal|killed|exited/i, 'and the reason it gave');
  assert.ok(await page.$(`${detail} svg g.state.current[data-state^="running.ready"]`), 'the chart lights the state the shard is in');
  assert.ok(await page.$(`${detail} pre.tail`), 'the shard shows its last log lines');
  assert.deepEqual(problems, [], 'the page script threw nothing');

  const shot = await page.screenshot({ path: join(dir, 'debug-actors.png') });
  const ink = await inkOf(await ctx.newPage(), shot);
  assert.ok(ink.inked > 0.02 && ink.colours > 16, `the screenshot is not blank (${JSON.stringify(ink)})`);

  const { stdout } = await promisify(execFile)(process.execPath, [llmgwMain, 'ctl', 'status', '--url', `http://127.0.0.1:${port}/`], { timeout: 20_000 });
  assert.match(stdout, /^ACTOR\s+STATE\s+SINCE\s+REASON$/m);
  assert.match(stdout, new RegExp(`^\\s+${shard}\\s+ready\\s+\\d+s`, 'm'));
  assert.match(stdout, /^node:local\s+running/m);

  assert.equal(await served.stop(), 0);
});
