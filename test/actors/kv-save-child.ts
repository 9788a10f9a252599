// A process that saves a replica's KV stream twice in a state directory and SIGKILLs itself at one
// step of the second save (kv-save-crash.test.ts): argv is the directory and the step.
import { StateDir, type DurableWriteStep } from '../../src/actors/index.js';
import { after, before } from './kv-save-states.js';

const [dir, step] = process.argv.slice(2);
if (dir === undefined || step === undefined) throw new Error('usage: kv-save-child DIR STEP');
new StateDir(dir).writeKv('a', before);
const crashing = new StateDir(dir, {
  onWriteStep: (s: DurableWriteStep) => {
    if (s === step) process.kill(process.pid, 'SIGKILL');
  },
});
crashing.writeKv('a', after);
