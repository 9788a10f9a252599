// A gateway with a store and the Batch API in a process of its own, for the batch tests' kill -9:
// argv[2] is JSON { path: the SQLite file, engine: URL, sha256: the client key's, batch?: the
// gateway.batch settings }; the SQLite file's directory is its state dir. It prints its URL on
// stdout once it listens.
import { dirname } from 'node:path';
import { Registry } from 'prom-client';
import { batchesFor } from '../../src/cli/batches.js';
import { gatewayDefaults, startGateway } from '../../src/gateway/index.js';
import { silentLogger } from '../../src/log/index.js';
import type { ReplicaView } from '../../src/routing/index.js';
import { Store, storeDefaults } from '../../src/store/index.js';

const o = JSON.parse(process.argv[2] ?? '{}') as { path: string; engine: string; sha256: string; batch?: { max_file_bytes?: number; max_pause_ms?: number } };
const view: ReplicaView = {
  id: 'r0',
  node: 'local',
  model: 'm',
  adapters: [],
  url: new URL(o.engine),
  apiKey: undefined,
  generation: 1,
  kvEvents: false,
  blockSizeTokens: 16,
  hashSeed: '0',
  dataParallelSize: 1,
};
const apiKeys = [{ name: 'team-a', sha256: o.sha256, requestsPerMinute: 0, tokensPerMinute: 0, admin: true }];
const store = await Store.open({ ...storeDefaults, path: o.path, refreshMs: 100 }, { stateDir: dirname(o.path), configKeys: apiKeys, defaultGatewayId: `child-${process.pid}`, log: silentLogger });
const batches = batchesFor(store, { runnerId: `child-${process.pid}`, log: silentLogger, pollMs: 50, leaseMs: 500, maxFileBytes: o.batch?.max_file_bytes, maxPauseMs: o.batch?.max_pause_ms });
const gw = await startGateway({
  config: { ...gatewayDefaults, port: 0, apiKeys, router: { ...gatewayDefaults.router, loadPollIntervalMs: 0 } },
  directory: { ready: (m: string) => (m === 'm' ? [view] : []), models: () => ['m'] },
  registry: new Registry(),
  store,
  batches: batches.service,
  innerKeyOf: batches.innerKeyOf,
});
batches.start(gw.url);
process.stdout.write(`${gw.url.href}\n`);
process.on('SIGTERM', () => void batches.close().then(() => gw.close()).then(() => store.close()).then(() => process.exit(0)));
