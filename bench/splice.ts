// What recording a stream for migration costs on the hot path: pipeEvents over the same SSE body
// with and without a StreamSplice (migrations on and off), alternating, best of five each, for an
// answer of 2k events (kept unparsed, as any answer under 1 MiB) and one of 20k (parsed in 1 MiB
// batches as it streams).
// Run: npx tsc -p . && node dist/bench/splice.js   (writes bench/results/splice.json)
import { mkdirSync, writeFileSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { availableParallelism, loadavg } from 'node:os';
import { Readable } from 'node:stream';
import { pipeEvents, StreamSplice, type UpstreamResponse } from '../src/upstream/index.js';

const event = (i: number): string =>
  `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" w${i}"},"logprobs":null,"finish_reason":null}]}\n\n`;

async function once(chunks: readonly string[], events: number, spliced: boolean): Promise<number> {
  const res = { destroyed: false, write: () => true, on: () => res, off: () => res } as unknown as ServerResponse;
  const up = { status: 200, contentType: 'text/event-stream', body: Readable.from(chunks) } as unknown as UpstreamResponse;
  const splice = spliced ? new StreamSplice('chat', { model: 'm', messages: [], max_tokens: events + 10 }, 2) : undefined;
  const t0 = performance.now();
  await pipeEvents(up, res, { replica: 'r0', maxEventChars: 1 << 20, hideUsage: false, onFirstByte: () => undefined, splice });
  return performance.now() - t0;
}

const results = [];
console.log(`host ${availableParallelism()} cores, load ${loadavg().map((l) => l.toFixed(1)).join(' ')}; events of ${event(0).length} bytes, best of 5`);
for (const events of [2_000, 20_000]) {
  const body = Array.from({ length: events }, (_, i) => event(i)).join('');
  // Socket-sized reads, as an engine's answer arrives.
  const chunks = Array.from({ length: Math.ceil(body.length / 16_384) }, (_, i) => body.slice(i * 16_384, (i + 1) * 16_384));
  const best = { plain: Infinity, spliced: Infinity };
  for (let r = 0; r < 5; r++) {
    best.plain = Math.min(best.plain, await once(chunks, events, false));
    best.spliced = Math.min(best.spliced, await once(chunks, events, true));
  }
  const perEvent = (ms: number): number => (ms * 1000) / events;
  results.push({ events, plainUsPerEvent: perEvent(best.plain), splicedUsPerEvent: perEvent(best.spliced), ratio: best.spliced / best.plain });
  console.log(`${events} events: pipeEvents without splice ${perEvent(best.plain).toFixed(2)} us/event, with ${perEvent(best.spliced).toFixed(2)} us/event: ${(best.spliced / best.plain).toFixed(2)}x`);
}
mkdirSync(new URL('../../bench/results/', import.meta.url), { recursive: true });
writeFileSync(new URL('../../bench/results/splice.json', import.meta.url), JSON.stringify({ at: new Date().toISOString(), results }, null, 2) + '\n');
