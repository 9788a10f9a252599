// The agent's KV stream save survives a kill -9 at every step of a save: a process SIGKILLed at each
// step of writeDurably leaves a file that reads back whole, the last save before the rename and this
// one from the rename on, never torn and never dropped.
import * as assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { durableWriteSteps, StateDir } from '../../src/actors/index.js';
import { after, before } from './kv-save-states.js';

const child = fileURLToPath(new URL('./kv-save-child.js', import.meta.url));

// Up to the rename the new bytes are only in the temporary file; from the rename on they are the file.
const expected = { opened: before, 'half-written': before, written: before, synced: before, renamed: after, 'dir-synced': after } as const;

for (const step of durableWriteSteps) {
  void test(`a kill -9 after the save's "${step}" step leaves the ${expected[step] === before ? 'last' : 'new'} save whole`, async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-kv-crash-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const p = spawn(process.execPath, [child, dir, step], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    p.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
    const [code, signal] = (await once(p, 'exit', { signal: AbortSignal.timeout(20_000) })) as [number | null, string | null];
    assert.equal(signal, 'SIGKILL', `the child crashed at "${step}" (exit ${String(code)}: ${err})`);
    assert.deepEqual(new StateDir(dir).readKv('a'), expected[step]);
  });
}

void test('a save that completes replaces the last one, and the next save after a crash mid-write replaces the torn temporary file', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-kv-crash-'));
  try {
    const sd = new StateDir(dir);
    sd.writeKv('a', before);
    assert.throws(() =>
      new StateDir(dir, {
        onWriteStep: (s) => {
          if (s === 'half-written') throw new Error('crash');
        },
      }).writeKv('a', after),
    );
    assert.deepEqual(sd.readKv('a'), before, 'the torn temporary file is not read');
    sd.writeKv('a', after);
    assert.deepEqual(sd.readKv('a'), after);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
