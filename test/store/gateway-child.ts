// A gateway with a store in a process of its own, for the kill -9 test and bench: argv[2] is JSON
// { store: StoreConfig, engine: URL, adminSha256 }; it prints its URL on stdout once it listens.
import { tmpdir } from 'node:os';
import { Registry } from 'prom-client';
import { gatewayDefaults, startGateway } from '../../src/gateway/index.js';
import type { ReplicaView } from '../../src/routing/index.js';
import { silentLogger } from '../../src/log/index.js';
import { Store, type StoreConfig } from '../../src/store/index.js';

const arg: unknown = JSON.parse(process.argv[2] ?? '{}');
const o = arg as { store: StoreConfig; engine: string; adminSha256: string };
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
const apiKeys = [{ name: 'root', sha256: o.adminSha256, requestsPerMinute: 0, tokensPerMinute: 0, admin: true }];
const store = await Store.open(o.store, { stateDir: tmpdir(), configKeys: apiKeys, defaultGatewayId: `child-${process.pid}`, log: silentLogger });
const gw = await startGateway({
  config: { ...gatewayDefaults, port: 0, apiKeys, router: { ...gatewayDefaults.router, loadPollIntervalMs: 0 } },
  directory: { ready: (m: string) => (m === 'm' ? [view] : []), models: () => ['m'] },
  registry: new Registry(),
  store,
});
process.stdout.write(`${gw.url.href}\n`);
process.on('SIGTERM', () => void gw.close().then(() => store.close()).then(() => process.exit(0)));
