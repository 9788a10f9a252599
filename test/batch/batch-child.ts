// A gateway with a store and the Batch API in a process of its own, for the batch tests' kill -9:
// argv[2] is JSON { path: the SQLite file, engine: URL, sha256: the client key's, batch?: the
// gateway.batch settings }; the SQLite file's directory is its state dir. It prints its URL on
// stdout once it listens.
import { dirname } from 'node:path';
import { Registry } from 'prom-client';
import { batchesFor } from '../../src/cli/batches.js';
import { parseGatewaySection, startGateway } from '../../src/gateway/index.js';
import { silentLogger } from '../../src/log/index.js';
import type { ReplicaView } from '../../src/routing/index.js';
import { Store, storeDefaults } from '../../src/store/index.js';

const o = JSON.parse(process.argv[2] ?? '{}') as { path: string; engine: string; sha256: string; batch?: Record<string, unknown> };
// The batch section read as llmgw.yaml's is, with a quick pace so tests see a lease run out soon.
const issues: { path: string; message: string }[] = [];
const config = parseGatewaySection({ port: 0, router: { load_poll_interval_ms: 0 }, batch: { poll_interval_ms: 50, lease_ms: 500, ...o.batch } }, 'gateway', issues);
if (issues.length > 0) throw new Error(`gateway config: ${JSON.stringify(issues)}`);
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
const batches = batchesFor(store, { runnerId: `child-${process.pid}`, log: silentLogger, config: config.batch });
const gw = await startGateway({
  config: { ...config, apiKeys },
  directory: { ready: (m: string) => (m === 'm' ? [view] : []), models: () => ['m'] },
  registry: new Registry(),
  store,
  batches: batches.service,
  innerKeyOf: batches.innerKeyOf,
});
batches.start(gw.url);
process.stdout.write(`${gw.url.href}\n`);
process.on('SIGTERM', () => void batches.close().then(() => gw.close()).then(() => store.close()).then(() => process.exit(0)));
