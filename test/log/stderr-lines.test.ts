// The logger's stderr lines are kept while the pipe is full, the event loop still turning, and a
// process ending, by its SIGTERM handler's process.exit or by running out of work, writes them all.
import * as assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const logModule = fileURLToPath(new URL('../../src/log/index.js', import.meta.url));
// More lines than a pipe holds (64 KiB on Linux): most wait in the child's memory when it ends.
const lines = 5_000;

// A child that logs `lines` lines at once, says so on stdout, then ends as `how` says.
const childSource = (how: 'sigterm' | 'idle'): string => `
import { createLogger } from ${JSON.stringify(logModule)};
const log = createLogger({ format: 'json' });
for (let i = 0; i < ${lines}; i++) log.info({ i, pad: 'x'.repeat(40) }, 'test.line');
${how === 'sigterm' ? "process.once('SIGTERM', () => { log.info({}, 'test.stopping'); process.exit(0); }); setInterval(() => undefined, 1000);" : ''}
process.stdout.write('logged\\n');
// Its event loop still turns while nobody reads its stderr.
setTimeout(() => process.stdout.write('alive\\n'), 50);
`;

async function run(how: 'sigterm' | 'idle'): Promise<string[]> {
  const child = spawn(process.execPath, ['--input-type=module', '-e', childSource(how)], { stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = once(child, 'exit');
  // Not read until the child has logged everything: its writes back up as a slow reader's would.
  child.stderr.pause();
  const chunks: Buffer[] = [];
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the child stalled on its full stderr')), 20_000);
    child.stdout.on('data', (c: Buffer) => {
      if (c.toString().includes('alive')) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  if (how === 'sigterm') child.kill('SIGTERM');
  child.stderr.on('data', (c: Buffer) => chunks.push(c));
  child.stderr.resume();
  const kill = setTimeout(() => child.kill('SIGKILL'), 20_000);
  const [code] = (await exited) as [number | null];
  clearTimeout(kill);
  assert.equal(code, 0);
  if (!child.stderr.readableEnded) await once(child.stderr, 'end');
  return Buffer.concat(chunks).toString('utf8').split('\n').filter((l) => l !== '');
}

void test('log: a SIGTERM handler that exits still writes every line the pipe had no room for, in order', async () => {
  const out = await run('sigterm');
  assert.equal(out.length, lines + 1);
  const parsed = out.map((l) => JSON.parse(l) as { msg: string; i?: number });
  assert.deepEqual(parsed.slice(0, lines).map((o) => o.i), Array.from({ length: lines }, (_, i) => i));
  assert.equal(parsed.at(-1)?.msg, 'test.stopping');
});

void test('log: a process that runs out of work writes every line before it ends', async () => {
  const out = await run('idle');
  assert.equal(out.length, lines);
  assert.equal((JSON.parse(out.at(-1) ?? '{}') as { i: number }).i, lines - 1);
});
