// Debian's headless Chromium driven by playwright-core, for the tests that look at a page: launched
// with a fresh profile directory, closed (and the directory removed) when the test ends.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { chromium, type BrowserContext, type Page } from 'playwright-core';

/** A Chromium context on a fresh --user-data-dir; nothing it does reaches the network but loopback. */
export async function chromiumContext(t: TestContext, viewport = { width: 1400, height: 1000 }): Promise<BrowserContext> {
  const profile = mkdtempSync(join(tmpdir(), 'llmgw-chromium-'));
  const ctx = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    viewport,
    timeout: 60_000,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  // One hook, in this order: node:test runs after-hooks first-in first-out, and a profile removed
  // while Chromium still writes to it fails the test with ENOTEMPTY. Chromium's helpers may still
  // flush a file just after close, hence the retries.
  t.after(async () => {
    await closeWithin(ctx, profile, 15_000);
    rmSync(profile, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 });
  });
  return ctx;
}

/**
 * How much a PNG shows: the share of pixels unlike its most common colour, and how many colours it
 * has, counted by drawing it on a canvas in `page`. A blank screenshot is one colour.
 */
export async function inkOf(page: Page, png: Buffer): Promise<{ inked: number; colours: number }> {
  await page.setContent('<canvas></canvas>');
  // A string, evaluated in the page: this project compiles without the DOM's types.
  const measured: unknown = await page.evaluate(`(async () => {
    const img = new Image();
    img.src = 'data:image/png;base64,${png.toString('base64')}';
    await img.decode();
    const canvas = document.querySelector('canvas');
    canvas.width = img.width;
    canvas.height = img.height;
    const g = canvas.getContext('2d');
    g.drawImage(img, 0, 0);
    const data = g.getImageData(0, 0, img.width, img.height).data;
    const counts = new Map();
    for (let i = 0; i < data.length; i += 4) {
      const key = (data[i] << 16) | (data[i + 1] << 8) | data[i + 2];
      counts.set(key, (counts.get(key) || 0) + 1);
    }
    const total = data.length / 4;
    return { inked: (total - Math.max(...counts.values())) / total, colours: counts.size };
  })()`);
  if (typeof measured !== 'object' || measured === null || !('inked' in measured) || !('colours' in measured)) throw new Error('the page measured nothing');
  const { inked, colours } = measured;
  if (typeof inked !== 'number' || typeof colours !== 'number') throw new Error('the page measured nothing');
  return { inked, colours };
}

// A Chromium that stops answering (seen once on a box loaded far past its cores) would hold close()
// and with it the whole suite: after `ms`, its processes, found by their profile directory, are killed.
async function closeWithin(ctx: BrowserContext, profile: string, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => {
    timer = setTimeout(() => resolve('late'), ms);
  });
  try {
    if ((await Promise.race([ctx.close().then(() => 'closed' as const), late])) === 'closed') return;
  } finally {
    clearTimeout(timer);
  }
  for (const pid of readdirSync('/proc').filter((n) => /^\d+$/.test(n))) {
    let cmd: string;
    try {
      cmd = readFileSync(`/proc/${pid}/cmdline`, 'latin1');
    } catch {
      continue; // it ended while we looked
    }
    if (cmd.includes(profile)) {
      try {
        process.kill(Number(pid), 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }
}
