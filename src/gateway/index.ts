// gateway/: the HTTP surface. The server and its config section, bounded request reading, keys and
// quotas, the one place errors become OpenAI answers, metrics, tracing, and the debug endpoints
// (the state-machine visualizer). Routing decides in routing/, bytes go through upstream/.
export { Accounting } from './accounting.js';
export type { AccountStore, Admitted, LedgerRow, StoreDownPolicy, StoredKey, StoreHeld } from './accounting.js';
export { hashApiKey, Quotas, authenticator } from './auth.js';
export type { Caller, PriorityClass } from './auth.js';
export { gatewayDefaults, parseGatewayConfig, parseGatewaySection, poolOptionsOf } from './config.js';
export type { AdaptersConfig, ApiKeyConfig, GatewayConfig, UpstreamConfig } from './config.js';
export type { ActorSource, DebugActor, DebugTransition } from './debug.js';
export { errorReply } from './errors.js';
export { processMetrics } from './metrics.js';
export type { ErrorReply } from './errors.js';
export { concatBody, forwardedBody, keptBodies, readRequest } from './request.js';
export type { RequestParsePool } from './request.js';
export { startGateway } from './server.js';
export type { DrainResult, Gateway } from './server.js';
export type { GatewayContext, GatewayOptions } from './context.js';
// The routing parts without the HTTP server, for the EPP (the same router behind Envoy's ext_proc).
export { buildParts, loadTokenizers } from './parts.js';
export type { GatewayParts } from './parts.js';
export { checkServed } from './served-models.js';
