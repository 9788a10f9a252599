// Shard logs rotate by size while the engine keeps writing to them: the engine holds its own
// O_APPEND descriptor (it outlives agent restarts), so the log is copied and emptied in place, and
// the engine's next line lands at the start of the emptied file, not past a hole.
import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { parseAgentConfig } from '../../src/actors/index.js';
import { rotateLog } from '../../src/actors/processes.js';
import { waitFor } from '../support/wait.js';

void test('rotateLog: past the limit the log is copied to .1 and emptied while a process keeps appending; copies beyond keep are dropped', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-logs-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'shard.log');
  const fd = openSync(path, 'a');
  // A writer that is not us, as an engine is: one 100-byte line every 5 ms on its inherited descriptor.
  const writer = spawn(process.execPath, ['-e', "setInterval(() => process.stdout.write('y'.repeat(99) + '\\n'), 5)"], { stdio: ['ignore', fd, 'inherit'] });
  closeSync(fd);
  t.after(async () => {
    if (writer.exitCode !== null) return;
    const exited = once(writer, 'exit');
    writer.kill('SIGKILL');
    await exited;
  });
  assert.equal(rotateLog(join(dir, 'missing.log'), { maxBytes: 10, keep: 2 }), false, 'a log not there yet is left alone');
  await waitFor(() => statSync(path).size > 0, { what: 'the writer started' });
  assert.equal(rotateLog(path, { maxBytes: 1 << 20, keep: 2 }), false, 'under the limit: nothing happens');
  for (let round = 1; round <= 3; round++) {
    await waitFor(() => statSync(path).size > 2_000, { what: `round ${round}: the log past 2000 bytes` });
    assert.equal(rotateLog(path, { maxBytes: 2_000, keep: 2 }), true);
    assert.ok(statSync(`${path}.1`).size > 2_000, `round ${round}: .1 holds what the log held`);
  }
  assert.ok(existsSync(`${path}.2`), 'the previous copy moved to .2');
  assert.ok(!existsSync(`${path}.3`), 'keep: 2 drops the third');
  // The writer went on into the emptied file from its start: whole lines, no zero bytes of a hole.
  await waitFor(() => statSync(path).size > 500, { what: 'the writer writing after the rotation' });
  const text = readFileSync(path, 'latin1');
  assert.ok(!text.includes('\0'), 'no hole where the old content was');
  assert.match(text.split('\n').slice(1, -1).join('\n'), /^(y{99}\n)*y{99}$/);
});

void test('agent.log_max_bytes and agent.log_keep are read from the config, 64 MiB and 3 by default', () => {
  assert.deepEqual([parseAgentConfig(undefined).logMaxBytes, parseAgentConfig(undefined).logKeep], [64 * 1024 * 1024, 3]);
  const c = parseAgentConfig({ log_max_bytes: 1_000_000, log_keep: 5 });
  assert.deepEqual([c.logMaxBytes, c.logKeep], [1_000_000, 5]);
});
