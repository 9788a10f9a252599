// A sim engine publishing KV events to a bound stream on 127.0.0.1, as the agent starts one: for
// tests that need a real engine's events end to end. Closed when the test ends.
import type { TestContext } from 'node:test';
import type { ReplicaView } from '../../src/routing/index.js';
import { replicaView } from '../gateway/replica-view.js';
import { parseKvEventsConfig, resolveSimOptions, startSim, type SimHandle, type SimOptions } from '../../src/sim/index.js';

/** Starts a ready sim (byte tokenizer, seed "0") publishing to `events` and replaying on `replay`. */
export async function eventSim(
  t: TestContext,
  o: { model: string; events: number; replay: number; topic: string; faults?: SimOptions['faults'] },
): Promise<SimHandle> {
  const sim = await startSim(
    resolveSimOptions({
      model: o.model,
      host: '127.0.0.1',
      port: 0,
      hashAlgo: 'sha256_cbor',
      hashSeed: '0',
      tokenizer: 'bytes',
      kvEvents: parseKvEventsConfig(
        JSON.stringify({ enable_kv_cache_events: true, publisher: 'zmq', endpoint: `tcp://127.0.0.1:${o.events}`, replay_endpoint: `tcp://*:${o.replay}`, topic: o.topic }),
      ),
      ...(o.faults === undefined ? {} : { faults: o.faults }),
    }),
  );
  t.after(() => sim.close());
  await sim.ready;
  return sim;
}

/** The gateway's view of such a sim as replica `id` of `model` on node "local" (blocks of 16, seed "0"). */
export const eventSimView = (url: string, id = 'a', model = 'qwen3'): ReplicaView => replicaView(id, { model, url: new URL(url) });
