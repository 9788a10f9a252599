// The charts drawn on a thread of their own: routing the shard chart's arrows takes a few hundred
// milliseconds, and on the gateway's event loop the first look at /debug/actors would hold every
// request in flight for that long. The drawings depend only on the machines' definitions, so they
// are drawn once per process and kept.
import { Worker } from 'node:worker_threads';

let drawn: Promise<Readonly<Record<string, string>>> | undefined;

/** Each machine drawn as SVG, keyed by machine id; drawn once, off the event loop. */
export function drawnCharts(): Promise<Readonly<Record<string, string>>> {
  drawn ??= draw().catch((e: unknown) => {
    // A failed drawing is not kept: the next page load tries again.
    drawn = undefined;
    throw e;
  });
  return drawn;
}

function draw(): Promise<Readonly<Record<string, string>>> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL('./chart-worker.js', import.meta.url));
    worker.once('message', (charts: Record<string, string>) => {
      resolve(charts);
      void worker.terminate();
    });
    worker.once('error', reject);
    worker.once('exit', (code) => reject(new Error(`the chart drawing thread exited with code ${code} before it answered`)));
  });
}
