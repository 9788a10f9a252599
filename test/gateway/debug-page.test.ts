// The debug page with 8 nodes of 8 replicas, in Debian's headless Chromium at 1280x800: it opens on
// the cluster at a glance (every replica a badge in the grid, the page a bounded height), filters by
// text and by state, shows an actor's chart on a click, and its text is legible at 100% zoom.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import type { Page } from 'playwright-core';
import { actorCluster, debugGateway } from '../support/actor-cluster.js';
import { chromiumContext } from '../support/browser.js';
import { waitFor } from '../support/wait.js';

const viewport = { width: 1280, height: 800 };

// Evaluated in the page as strings: this project compiles without the DOM's types, and the page's
// security policy forbids the string evaluation waitForFunction uses.
const visible = (selector: string): string => `[...document.querySelectorAll(${JSON.stringify(selector)})].filter((e) => e.checkVisibility()).map((e) => e.dataset.actor)`;

async function visibleActors(page: Page, selector: string): Promise<string[]> {
  const ids: unknown = await page.evaluate(visible(selector));
  assert.ok(Array.isArray(ids));
  return ids.map(String);
}

void test('debug page: 8 nodes x 8 replicas at a glance, filtered by node and by state, a chart one click away, text of 12 px or more', { timeout: 120_000 }, async (t) => {
  const gw = await debugGateway(actorCluster({ nodes: 8, replicasPerNode: 8, silentLast: true }));
  t.after(() => gw.close());
  const ctx = await chromiumContext(t, viewport);
  const page = await ctx.newPage();
  const problems: string[] = [];
  page.on('pageerror', (e) => problems.push(e.message));
  await page.goto(new URL('/debug/actors', gw.url).href, { timeout: 30_000 });
  await waitFor(async () => (await visibleActors(page, '.badge[data-kind=replica]')).length === 64, { timeoutMs: 30_000, intervalMs: 100, what: '64 replica badges on the page' });

  const replicas = await visibleActors(page, '#grid > .row .cell > .badge[data-kind=replica]');
  assert.equal(new Set(replicas).size, 64, 'every replica is a badge of its own in the grid');
  assert.equal((await visibleActors(page, '#grid .badge')).length, 8 + 64 * 3, 'and so is every node, shard and publisher');
  const rows: unknown = await page.evaluate(`[...document.querySelectorAll('#grid > .row')].map((r) => [r.dataset.node, r.querySelectorAll('.badge[data-kind=replica]').length])`);
  assert.deepEqual(rows, ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'].map((n) => [`node:gpu-${n}`, 8]), 'one row per node, its eight replicas in it');

  // The grid is what the page opens on: it starts right under the header, and the whole page stays
  // within two screens at 1280 px (the eight nodes' rows take one screen when every replica is
  // well; a reason adds a line to its cell), where the charts stacked in full took 5,000 px for two.
  const geometry: unknown = await page.evaluate(`({
    gridTop: document.getElementById('grid').getBoundingClientRect().top,
    header: document.querySelector('header').getBoundingClientRect().bottom,
    height: document.documentElement.scrollHeight,
    width: document.documentElement.scrollWidth,
  })`);
  const { gridTop, header, height, width } = geometry as { gridTop: number; header: number; height: number; width: number };
  t.diagnostic(`page height at 8x8, 1280x800: ${height} px`);
  assert.ok(gridTop - header < 20, `the grid starts under the header (grid at ${gridTop} px, header ends at ${header} px)`);
  assert.ok(height <= 2 * viewport.height, `the page is ${height} px tall, within two screens of ${viewport.height} px`);
  assert.ok(width <= viewport.width, `nothing runs off the side (${width} px wide)`);

  const sizes: unknown = await page.evaluate(`[...document.querySelectorAll('#grid .badge, #grid .badge *')].map((e) => parseFloat(getComputedStyle(e).fontSize))`);
  assert.ok(Array.isArray(sizes) && sizes.length > 0);
  assert.ok(Math.min(...sizes.map(Number)) >= 12, `badge text is 12 px or more (smallest: ${Math.min(...sizes.map(Number))} px)`);
  const failed = '[data-actor="shard:llama3-8b-13-r0"]';
  assert.match(String(await page.textContent(failed)), /failed.*vllm exited with code 1/s, 'a badge shows its state and its short reason');

  await page.fill('#filter', 'gpu-c');
  const ofNodeC = await visibleActors(page, '#grid .badge[data-kind=replica]');
  assert.equal(ofNodeC.length, 8, `a node's name shows its replicas alone (${ofNodeC.join(', ')})`);
  assert.deepEqual(await visibleActors(page, '#grid .badge[data-kind=node]'), ['node:gpu-c']);
  await page.fill('#filter', '');
  assert.equal((await visibleActors(page, '#grid .badge[data-kind=replica]')).length, 64, 'an empty filter shows everything again');

  await page.click('#states button[data-state=not-ready]');
  const notReady = await visibleActors(page, '#grid .badge[data-kind=replica]');
  // Five replicas in trouble, and the eight of the silent node, which no longer route.
  assert.equal(notReady.length, 13, `"not ready" shows the replicas in trouble (${notReady.join(', ')})`);
  for (const id of ['replica:llama3-8b-13', 'replica:qwen3-8b-20', 'replica:qwen3-8b-30', 'replica:llama3-8b-41', 'replica:llama3-8b-47', 'replica:qwen3-8b-56']) assert.ok(notReady.includes(id), `${id} is not ready`);
  await page.click('#states button[data-state=failed]');
  assert.deepEqual(await visibleActors(page, '#grid .badge[data-kind=replica]'), ['replica:llama3-8b-13'], 'one state alone');
  await page.click('#states button[data-state=all]');

  assert.equal(await page.isVisible('#detail'), false, 'no chart is open until one is asked for');
  await page.click(failed);
  await page.waitForSelector('#detail[open][data-shows="shard:llama3-8b-13-r0"] svg[data-machine=shard]', { state: 'visible', timeout: 10_000 });
  assert.match(String(await page.textContent('#detail .head')), /failed.*CUDA out of memory/s, 'the chart comes with the state and the reason');
  // The size text has on the screen: its font size in the drawing times the scale the drawing is shown at.
  const chartText: unknown = await page.evaluate(`(() => {
    const svg = document.querySelector('#detail svg');
    const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
    return [...svg.querySelectorAll('text')].map((e) => parseFloat(getComputedStyle(e).fontSize) * scale);
  })()`);
  assert.ok(Array.isArray(chartText) && chartText.length > 0);
  const smallest = Math.min(...chartText.map(Number));
  assert.ok(smallest >= 12 - 0.01, `every text of the chart, event labels included, is 12 px or more on the screen (smallest: ${smallest} px)`);
  await page.waitForSelector('#detail pre.tail:has-text("model loaded")', { timeout: 10_000 });
  await page.keyboard.press('Escape');
  await page.waitForSelector('#detail', { state: 'hidden', timeout: 10_000 });
  await page.click('[data-actor="replica:qwen3-8b-20"]');
  await page.waitForSelector('#detail[open][data-shows="replica:qwen3-8b-20"] svg[data-machine=replica]', { state: 'visible', timeout: 10_000 });
  assert.deepEqual(problems, [], 'the page script threw nothing');
});
