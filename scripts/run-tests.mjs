// Runs the compiled suite with node's test runner, then proves no process it started outlives it.
// Every child of the suite inherits LLMGW_TEST_RUN (engines get the host environment they were given,
// which is this one), so a survivor is found by that marker in /proc, reported, and killed.
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

const marker = randomUUID();
// Node 20 runs every .js file of a directory it is given, helpers and child-process scripts
// included, so the suite is the *.test.js files found here.
function testFiles(path) {
  if (!statSync(path).isDirectory()) return [path];
  return readdirSync(path)
    .sort()
    .flatMap((name) => {
      const p = join(path, name);
      if (statSync(p).isDirectory()) return testFiles(p);
      return p.endsWith('.test.js') ? [p] : [];
    });
}
const roots = process.argv.slice(2);
const files = (roots.length > 0 ? roots : ['dist/test']).flatMap(testFiles);
const args = ['--test', '--test-concurrency=2', ...files];
const child = spawn(process.execPath, args, {
  stdio: 'inherit',
  env: { ...process.env, LLMGW_TEST_RUN: marker },
});
const code = await new Promise((resolve) => child.on('exit', (c, signal) => resolve(c ?? (signal ? 1 : 0))));

function survivors() {
  const found = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    let environ;
    try {
      environ = readFileSync(`/proc/${name}/environ`, 'latin1');
    } catch {
      continue; // the process ended while we looked, or is not ours to read
    }
    if (!environ.split('\0').includes(`LLMGW_TEST_RUN=${marker}`)) continue;
    let cmd = '';
    try {
      cmd = readFileSync(`/proc/${name}/cmdline`, 'latin1').split('\0').join(' ').trim();
    } catch {
      // it ended between the two reads: no longer a survivor
      continue;
    }
    found.push({ pid: Number(name), cmd });
  }
  return found;
}

// A process killed at the very end of a test may still be exiting: give the kernel a moment, bounded.
let left = survivors();
for (let i = 0; i < 20 && left.length > 0; i++) {
  await new Promise((r) => setTimeout(r, 100));
  left = survivors();
}
if (left.length > 0) {
  console.error(`# ${left.length} process(es) outlived the test suite:`);
  for (const p of left) {
    console.error(`#   pid ${p.pid}: ${p.cmd}`);
    try {
      process.kill(p.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  process.exit(1);
}
console.log('# no process outlived the suite');
process.exit(code);
