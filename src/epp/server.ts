// `llmgw epp`'s parts, started and stopped in order: the shared index and its worker pool, the
// gateway's routing parts (router, admission, receipts) over the pool's endpoints, discovery feeding
// the pool, then the three listeners (ext_proc, gRPC health, Prometheus metrics). close() stops
// them in reverse.
import { createServer, type Server as HttpServer } from 'node:http';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { HealthImplementation } from 'grpc-health-check';
import { Registry } from 'prom-client';
import { LlmgwError } from '../errors/index.js';
import { buildParts, loadTokenizers, processMetrics } from '../gateway/index.js';
import { ClusterIndex, KvMetrics, MAX_SLOTS } from '../kv/index.js';
import { silentLogger, type Logger } from '../log/index.js';
import { HashPool } from '../workers/index.js';
import { poolOptionsOf } from '../gateway/index.js';
import type { EppConfig } from './config.js';
import type { DiscoverySource } from './endpoints.js';
import { serveStream, type ProcessStream } from './ext-proc.js';
import { eppMetrics } from './metrics.js';
import { Picker } from './picker.js';
import { EppPool } from './pool.js';

/** The ext_proc service's full name: what Envoy calls, and a service the health server reports. */
export const extProcService = 'envoy.service.ext_proc.v3.ExternalProcessor';

// The vendored .proto files sit at the package root, beside dist/: two folders up from dist/src/epp.
const protoDir = fileURLToPath(new URL('../../../proto/', import.meta.url));

/** Envoy's ext_proc service definition, loaded from the vendored .proto files. */
export function extProcDefinition(): grpc.ServiceDefinition {
  const def = loadSync('envoy/service/ext_proc/v3/external_processor.proto', { includeDirs: [protoDir], keepCase: true, longs: String, enums: String, defaults: false, oneofs: true });
  const pkg = grpc.loadPackageDefinition(def) as unknown as { envoy: { service: { ext_proc: { v3: { ExternalProcessor: grpc.ServiceClientConstructor } } } } };
  return pkg.envoy.service.ext_proc.v3.ExternalProcessor.service;
}

/** A running EPP. */
export interface Epp {
  readonly extProcPort: number;
  readonly healthPort: number;
  readonly metricsPort: number;
  readonly registry: Registry;
  readonly pool: EppPool;
  /** The decision ext_proc streams ask for, for a caller deciding in-process (bench/epp.ts). */
  readonly picker: Picker;
  /** Resolves once every tokenizer the pool's models need is loaded. */
  whenWarm(): Promise<void>;
  /** Resolves once discovery's first full list is in the pool and health says SERVING. */
  whenReady(): Promise<void>;
  close(): Promise<void>;
}

function bind(server: grpc.Server, host: string, port: number, what: string): Promise<number> {
  return new Promise((resolve, reject) => {
    server.bindAsync(`${host.includes(':') ? `[${host}]` : host}:${port}`, grpc.ServerCredentials.createInsecure(), (err, bound) => {
      if (err === null) resolve(bound);
      else reject(new LlmgwError('LLMGW_EPP_LISTEN', `listen.${what}: cannot bind ${host}:${port} (${err.message}); choose a free port`, { cause: err }));
    });
  });
}

function listenHttp(server: HttpServer, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', (e) => reject(new LlmgwError('LLMGW_EPP_LISTEN', `listen.metrics_port: cannot bind ${host}:${port} (${e.message}); choose a free port`, { cause: e })));
    server.listen(port, host, () => {
      const a = server.address();
      resolve(typeof a === 'object' && a !== null ? a.port : port);
    });
  });
}

// How long close() lets streams in flight finish (their answers are still passing through) before
// cutting them: Envoy then fails those requests, as it would for an EPP that died.
const closeGraceMs = 5_000;

// Stops taking streams, lets those open finish within graceMs, then cuts the rest.
function drain(server: grpc.Server, graceMs: number): Promise<void> {
  return new Promise<void>((resolve) => {
    const timer = setTimeout(() => {
      server.forceShutdown();
      resolve();
    }, graceMs);
    server.tryShutdown(() => {
      clearTimeout(timer);
      resolve();
    });
  });
}

/** How the EPP opens its discovery source: with its log and the counter of skipped entries. */
export type OpenDiscovery = (o: { log: Logger; onSkip: (reason: string) => void }) => DiscoverySource;

/** Starts an EPP over the endpoints `openDiscovery` reports; close() closes the discovery too. */
export async function startEpp(config: EppConfig, openDiscovery: OpenDiscovery, o: { log?: Logger; registry?: Registry } = {}): Promise<Epp> {
  const log = o.log ?? silentLogger;
  const registry = o.registry ?? new Registry();
  if (o.registry === undefined) processMetrics(registry);
  const metrics = eppMetrics(registry);
  // Opened first: a file that cannot be read stops the start before anything is built.
  const discovery = openDiscovery({ log: log.child({ subsystem: 'epp-discovery' }), onSkip: (reason) => metrics.discoverySkipped.inc({ reason }) });
  const gw = config.gateway;
  const index = new ClusterIndex({ capacityBlocks: Math.max(65_536, Math.ceil(config.pool.capacityBlocks * 1.25 * 8)) });
  const hashPool = new HashPool({ indexBuffer: index.buffer, ...poolOptionsOf(gw) });
  const late: { parts?: ReturnType<typeof buildParts> } = {};
  const kvMetrics = new KvMetrics({ registry, inFlight: (id) => late.parts?.load.get(id).inFlight ?? 0 });
  const pool = new EppPool({
    pool: config.pool,
    writer: () => late.parts?.writer,
    // Each endpoint's blocks are verified against our hashes in the same pool as prompts are hashed.
    openStream: (so) => kvMetrics.open({ ...so, hasher: hashPool }),
    log: log.child({ subsystem: 'epp-pool' }),
  });
  const tokenizer = config.pool.tokenizer === '' ? undefined : config.pool.tokenizer;
  const parts = buildParts({
    config: gw,
    directory: pool,
    registry,
    index: { index, slotCount: MAX_SLOTS },
    scorer: hashPool,
    parsePool: hashPool,
    tokenizePool: hashPool,
    tokenizerOf: () => tokenizer,
    ownerOf: (id) => pool.ownerOf(id),
    log: log.child({ subsystem: 'router' }),
    env: process.env,
  });
  late.parts = parts;
  const warm = (): void => {
    if (parts.verified !== undefined) loadTokenizers(pool, parts.ctx.router, parts.verified);
  };
  const unsubscribe = pool.onChange(warm);
  await pool.apply(discovery.current());
  discovery.onChange((eps) => void pool.apply(eps).catch((e: unknown) => log.error({ err: e }, 'epp.pool_apply_failed')));

  const picker = new Picker(parts.ctx, pool);
  const extProc = new grpc.Server();
  extProc.addService(extProcDefinition(), {
    Process: (call: grpc.ServerDuplexStream<unknown, unknown>) => {
      serveStream(call as unknown as ProcessStream, { picker, metrics, log, maxBodyBytes: gw.maxBodyBytes, defaultMode: 'FULL_DUPLEX_STREAMED' });
    },
  });
  // Alive from the start; ready (readiness, the ext_proc service and the server as a whole, as
  // llm-d's health server answers them) once discovery's first list is in the pool, and not ready
  // again from the moment close() starts, so the Service stops sending before the streams drain.
  const health = new HealthImplementation({ '': 'NOT_SERVING', liveness: 'SERVING', readiness: 'NOT_SERVING', [extProcService]: 'NOT_SERVING' });
  const setReady = (status: 'SERVING' | 'NOT_SERVING'): void => {
    for (const service of ['', 'readiness', extProcService]) health.setStatus(service, status);
  };
  let closingStarted = false;
  const ready = discovery.synced().then(async () => {
    await pool.apply(discovery.current());
    if (closingStarted) return;
    setReady('SERVING');
    log.info({ endpoints: pool.size() }, 'epp.synced');
  });
  // Owned here: a failed first apply is logged and leaves the EPP unready, which its probe reports.
  ready.catch((e: unknown) => log.error({ err: e }, 'epp.sync_failed'));
  const healthServer = new grpc.Server();
  health.addToServer(healthServer);
  const metricsServer = createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
      res.writeHead(404).end();
      return;
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
      (e: unknown) => res.writeHead(500).end(String(e)),
    );
  });
  const closeAll = async (): Promise<void> => {
    closingStarted = true;
    setReady('NOT_SERVING');
    unsubscribe();
    const closed = new Promise<void>((r) => metricsServer.close(() => r()));
    // A scraper's keep-alive connection would hold close() open until it chose to leave.
    metricsServer.closeAllConnections();
    await closed;
    healthServer.forceShutdown();
    await drain(extProc, closeGraceMs);
    await discovery.close();
    await pool.close();
    await parts.release();
    await hashPool.close();
  };
  let ports: [number, number, number];
  try {
    const l = config.listen;
    ports = [await bind(extProc, l.host, l.extProcPort, 'ext_proc_port'), await bind(healthServer, l.host, l.healthPort, 'health_port'), await listenHttp(metricsServer, l.host, l.metricsPort)];
  } catch (e) {
    await closeAll();
    throw e;
  }
  log.info({ extProcPort: ports[0], healthPort: ports[1], metricsPort: ports[2], endpoints: pool.size() }, 'epp.listening');
  let closing: Promise<void> | undefined;
  return {
    extProcPort: ports[0],
    healthPort: ports[1],
    metricsPort: ports[2],
    registry,
    pool,
    picker,
    whenWarm: async () => parts.verified?.whenLoaded(),
    whenReady: () => ready,
    close: () => (closing ??= closeAll().then(() => log.info({}, 'epp.closed'))),
  };
}
