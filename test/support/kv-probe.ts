// Waiting for a bound stream to hear a publisher: PUB drops what it sends before the subscription
// reaches it, so a test probes with a batch that changes nothing until one arrives.
import { blockRemoved, type EngineEventStream, type KvEventPublisher } from '../../src/kv/index.js';
import { waitFor } from './wait.js';

/** Publishes a removal of a block never stored (a no-op for the mirror) until `stream` has applied one. */
export async function probeUntilHeard(pub: KvEventPublisher, stream: EngineEventStream): Promise<void> {
  await waitFor(
    async () => {
      await pub.publish([blockRemoved({ blockHashes: [1n] })]);
      return stream.stats().ranks[0]?.lastSeq !== null;
    },
    { what: 'the stream to hear the publisher' },
  );
}
