// What a route of the gateway is: its method and path, what it needs before its handler runs (a key,
// an admin key, a bounded body, a place in the admission queue), and the handler. The table of them
// is routes.ts; each API surface declares its own in a routes-<surface>.ts beside it.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ClientApi } from '../apis/index.js';
import type { Caller } from './auth.js';
import type { GatewayContext } from './context.js';

/** A method a route answers; '*' is a prefix whose handler tells the methods apart itself. */
export type Method = 'GET' | 'POST' | 'PATCH' | 'DELETE' | '*';

/**
 * Who may call a route, checked before its handler runs: 'none' anyone, 'key' any valid key (or
 * anyone on a gateway without keys), 'admin' an admin key. 'handler': the handler authenticates
 * itself, as the first phase of its own work (the generate path, so a refused key is counted and
 * logged as a request; the admin API and the actors page, which word their own refusal).
 */
export type Auth = 'none' | 'key' | 'admin' | 'handler';

/**
 * The body a route reads, and its bound: 'none', 'request' (gateway.max_body_bytes, within
 * gateway.body_timeout_ms), 'admin' (64 KiB: a key's JSON is a few hundred bytes) or 'upload' (a
 * Batch API file, up to the batch service's maxFileBytes).
 */
export type BodyLimit = 'none' | 'request' | 'admin' | 'upload';

/** One request as a handler gets it. */
export interface Call {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  /** The path without its query. */
  readonly path: string;
  /** The path's `{name}` segments, decoded, by name. */
  readonly params: Readonly<Record<string, string>>;
  /** Reads the body within the route's declared bound; a route that declares none reads nothing. */
  body(): Promise<Buffer>;
}

interface RouteShape {
  readonly method: Method;
  /**
   * The exact path, where a `{name}` segment stands for any one segment (`/admin/v1/keys/{id}`), or
   * with `prefix` every path that starts with it.
   */
  readonly path: string;
  readonly prefix?: true;
  readonly body: BodyLimit;
  /** Whether the route waits its turn in the model's admission queue (the generate path, once it knows the model and the prompt's size). */
  readonly admission: boolean;
  /** The client protocol whose error shape the route answers in (default: OpenAI's). */
  readonly api?: ClientApi;
}

/** A route whose caller is checked before it runs: the handler gets who it is. */
export interface KeyedRoute extends RouteShape {
  readonly auth: 'key' | 'admin';
  run(ctx: GatewayContext, call: Call, caller: Caller): Promise<void> | void;
}

/** A route anyone may call, or one whose handler authenticates itself. */
export interface OpenRoute extends RouteShape {
  readonly auth: 'none' | 'handler';
  run(ctx: GatewayContext, call: Call): Promise<void> | void;
}

/** One entry of the route table. */
export type Route = KeyedRoute | OpenRoute;
