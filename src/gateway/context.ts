// What every route of the gateway is handed: the options it was started with and the parts
// startGateway built from them (router, accounting, admission, upstream clients, metrics). A route
// file reads these; only server.ts makes them.
import type { Tracer } from '@opentelemetry/api';
import type { Registry } from 'prom-client';
import type { Admission, PeerBoard } from '../admission/index.js';
import type { ResponseStore } from '../apis/index.js';
import type { ChatBodyParser, RequestPolicy } from '../limits/index.js';
import type { Logger } from '../log/index.js';
import type { CostModel, CountingIndex, LoadBook, LocalState, PrefixTree, ReceiptRing, ReplicaDirectory, Router, RouteTier, Scorer, Seam, TokenizeApi, TokenizePool, TokenTarget } from '../routing/index.js';
import type { MigrationMetrics, UpstreamClients } from '../upstream/index.js';
import type { Accounting, AccountStore, StoreDownPolicy } from './accounting.js';
import type { Caller } from './auth.js';
import type { GatewayConfig } from './config.js';
import type { ActorSource, DebugRoutes } from './debug.js';
import type { Drain } from './drain.js';
import type { GatewayMetrics } from './metrics.js';
import type { RequestParsePool } from './request.js';
import type { BatchApi } from './batch-api.js';
import type { RequestTracing } from './tracing.js';

/** What the admin API asks of the store (src/store's Store satisfies it). */
export interface KeyAdmin {
  listKeys(o: { revoked: boolean }): unknown[];
  getKey(idOrName: string): unknown;
  createKey(body: unknown): Promise<unknown>;
  updateKey(idOrName: string, body: unknown): Promise<unknown>;
  revokeKey(idOrName: string): Promise<unknown>;
  rotateKey(idOrName: string): Promise<unknown>;
  usage(params: URLSearchParams): Promise<{ contentType: string; body: string }>;
}

/** What starting a gateway takes; cli/serve.ts builds these from the config and the agent. */
export interface GatewayOptions {
  readonly config: GatewayConfig;
  readonly directory: ReplicaDirectory;
  readonly registry: Registry;
  /** The shared cluster index and its slot count; without it there is no precise tier. */
  readonly index?: { readonly index: CountingIndex; readonly slotCount: number } | undefined;
  /** The worker pool that hashes and scores; without it there is no precise tier. */
  readonly scorer?: Scorer | undefined;
  /** The worker pool that tokenizes with each model's own tokenizer; without it, /tokenize only. */
  readonly tokenizePool?: TokenizePool | undefined;
  /** The worker pool that parses request bodies in shared memory (16 KiB and up); without it, the event loop parses them. */
  readonly parsePool?: RequestParsePool | undefined;
  /** The tokenizer of a replica ('bytes', 'qwen3', its model directory or its .gguf), for local tokenizing. */
  readonly tokenizerOf?: ((replicaId: string) => string | undefined) | undefined;
  /** Whose /tokenize a replica serves ('llamacpp' for llama-server; absent: vLLM's). */
  readonly tokenizeApiOf?: ((replicaId: string) => TokenizeApi | undefined) | undefined;
  /** The node that runs a replica (deltas from any other node are rejected). */
  readonly ownerOf?: ((replicaId: string) => string | undefined) | undefined;
  readonly log?: Logger | undefined;
  /** How long close() lets in-flight requests finish before cutting them. */
  readonly closeGraceMs?: number | undefined;
  /** The routing tiers in order (default: defaultTiers); a bench compares policies with it. */
  readonly tiers?: readonly RouteTier[] | undefined;
  /** Operator views served as JSON under /llmgw/<name> to admin callers (`ctl nodes --gateway` reads them). */
  readonly views?: Readonly<Record<string, () => unknown>> | undefined;
  /** Where request spans go; without it, gateway.tracing decides (no endpoint: no tracing). */
  readonly tracer?: Tracer | undefined;
  /** The environment the traces' resource is read from (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES). */
  readonly env?: Readonly<Record<string, string | undefined>> | undefined;
  /** Every actor's state, for /debug/actors; without it there are no debug routes. */
  readonly actors?: ActorSource | undefined;
  /** Where stored Responses live (the keys-and-usage database); without it, this process's memory. */
  readonly responseStore?: ResponseStore | undefined;
  /** Keys, budgets and the usage ledger in a database (store:); without it, gateway.api_keys and in-memory quotas. */
  readonly store?: (AccountStore & KeyAdmin) | undefined;
  /** With several gateways on one PostgreSQL: the board admission shares its tenants' holds on. */
  readonly peerBoard?: PeerBoard | undefined;
  /** What a limited key's request does while the store is down (store.when_down). */
  readonly whenStoreDown?: StoreDownPolicy | undefined;
  /** Batch API files and batches (issue 50); without it /v1/files and /v1/batches answer 404. */
  readonly batches?: BatchApi | undefined;
  /**
   * The key sha256 of an Authorization the batch runner made for a batch's line (cli wires the
   * runner's), or undefined for any other: the line then runs as the key that created the batch.
   */
  readonly innerKeyOf?: ((authorization: string | undefined) => string | undefined) | undefined;
  /** The CA (PEM) an https replica's certificate is checked against, by origin; others use the system's. */
  readonly caOf?: ((origin: string) => string | undefined) | undefined;
}

// Receipts kept for /debug/receipts: a few minutes of a busy gateway, a few MB at most.
export const receiptsKept = 2048;

/** What a route is handed: the gateway's options and the parts built from them, one per gateway. */
export interface GatewayContext {
  readonly o: GatewayOptions;
  readonly log: Logger;
  readonly upstream: UpstreamClients;
  readonly metrics: GatewayMetrics;
  readonly router: Router;
  /** Requests in flight per replica, as this gateway sent them (a route outside the router starts its own). */
  readonly load: LoadBook;
  readonly tree: PrefixTree;
  readonly costs: CostModel;
  readonly receipts: ReceiptRing;
  readonly tracing: RequestTracing;
  readonly policy: RequestPolicy;
  /** Request bodies kept so that a chat's next turn parses only what it added, where the event loop parses it. */
  readonly bodies: ChatBodyParser;
  readonly parsePool: RequestParsePool | undefined;
  readonly authenticate: (authorization: string | undefined) => Caller;
  readonly accounting: Accounting;
  readonly admission: Admission;
  // Last generation seen per replica: a new one means it restarted and the tree forgets it.
  readonly generations: Map<string, number>;
  readonly debug: DebugRoutes | undefined;
  /** Whether the gateway drains, and its API work in flight. */
  readonly drain: Drain;
  readonly responses: ResponseStore;
  readonly migrations: MigrationMetrics;
  /** Where local tokenizing of a model stands; undefined when it is off or not yet asked for. */
  readonly tokenizerState: (model: string) => LocalState | undefined;
  /** Whether a chat's continuation renders as its original prompt plus the answer so far, where the model's template is rendered here. */
  readonly seam: (model: string, target: TokenTarget, s: { original: Uint8Array; continuation: Uint8Array; text: string }) => Promise<Seam>;
  /** A chat's prompt text as the model's template renders it here; undefined where it is not rendered here. */
  readonly render: (model: string, target: TokenTarget, body: Uint8Array) => Promise<string | undefined>;
}

