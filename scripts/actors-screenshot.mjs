// Draws docs/img/actors-grid.png, the /debug/actors page of 8 nodes x 8 replicas at 1280x800 as the
// README and docs/actors.md show it, from the same cluster the page's browser test uses (the gateway's
// real actor board, fed what the nodes would report). Run `npm run build` first, then
// `node scripts/actors-screenshot.mjs [out.png]`; it needs Debian's /usr/bin/chromium.
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { actorCluster, debugGateway } from '../dist/test/support/actor-cluster.js';

const out = process.argv[2] ?? 'docs/img/actors-grid.png';
const gw = await debugGateway(actorCluster({ nodes: 8, replicasPerNode: 8, silentLast: true }));
const profile = mkdtempSync(join(tmpdir(), 'llmgw-chromium-'));
try {
  const ctx = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    viewport: { width: 1280, height: 800 },
    timeout: 60_000,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  try {
    const page = await ctx.newPage();
    await page.goto(`${gw.url.origin}/debug/actors`, { timeout: 30_000 });
    await page.waitForSelector('#grid .row[data-node="node:gpu-h"] .badge[data-kind=replica]', { timeout: 30_000 });
    // A badge in trouble hovered, as an operator's pointer would be: the page at rest otherwise.
    await page.hover('[data-actor="shard:llama3-8b-13-r0"]');
    await page.screenshot({ path: out });
  } finally {
    await ctx.close();
  }
} finally {
  rmSync(profile, { recursive: true, force: true });
  await gw.close();
}
console.log(`wrote ${out} (${statSync(out).size} bytes)`);
