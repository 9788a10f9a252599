// Worker side of the shared-index concurrency test: reads the index while the main thread writes,
// and reports any answer that is not allowed. A miss (torn or moved) is allowed; a slot that was
// never given a key is not. Run as a plain file (the test runner loads every file under test/), it
// does nothing.
import { parentPort, workerData } from 'node:worker_threads';
import { IndexReader } from '../../src/kv/index.js';

interface Job {
  buffer: SharedArrayBuffer;
  stable: bigint[];
  stableMask: bigint;
  churn: bigint[];
  churnMask: bigint;
  stop: Int32Array;
}

if (parentPort !== null) {
  const job = workerData as Job;
  const reader = new IndexReader(job.buffer);
  let checks = 0;
  let misses = 0;
  let wrong = 0;
  const note: string[] = [];
  // Slot 1 of `stop` tells the writer the reader is running, so the writes overlap the reads.
  Atomics.store(job.stop, 1, 1);
  while (Atomics.load(job.stop, 0) === 0 || checks === 0) {
    for (const k of job.stable) {
      const m = reader.holds(k);
      checks++;
      if (m === 0n) misses++;
      else if (m !== job.stableMask) {
        wrong++;
        if (note.length < 5) note.push(`stable ${k}: ${m}`);
      }
    }
    for (const k of job.churn) {
      const m = reader.holds(k);
      checks++;
      if ((m & ~job.churnMask) !== 0n) {
        wrong++;
        if (note.length < 5) note.push(`churn ${k}: ${m}`);
      }
    }
  }
  parentPort.postMessage({ checks, misses, wrong, note });
}
