// The debug endpoints: `/debug/actors` shows every actor (nodes, replicas, shards, publishers) as a
// grid of state badges, each one's machine drawn as a statechart with the current state lit a click
// away, live over server-sent events; the same data as JSON for `llmgw ctl status`. Only an admin key reads them when the gateway has keys:
// engine state, reasons and log lines say a lot about a deployment.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { LlmgwError } from '../errors/index.js';
import type { Caller } from './auth.js';
import { debugPage } from './debug-page.js';
import { errorReply } from './errors.js';

/** One change of an actor's phase, with the event that caused it and the reason it gave. */
export interface DebugTransition {
  readonly at: number;
  readonly from: string | undefined;
  readonly to: string;
  readonly state: string;
  readonly event: string | undefined;
  readonly reason: string | undefined;
}

/** One actor as the page shows it. */
export interface DebugActor {
  readonly id: string;
  readonly kind: string;
  readonly machine: string;
  readonly parent: string | undefined;
  readonly states: readonly string[];
  readonly phase: string;
  readonly status: string;
  readonly since: number;
  readonly reason: string | undefined;
  /** The reason's long form: command line, advice. */
  readonly detail: string | undefined;
  readonly transitions: readonly DebugTransition[];
}

/** What the debug page needs of the actors: the agent's board satisfies it, cli/serve.ts wires it. */
export interface ActorSource {
  actors(): readonly DebugActor[];
  /** Each machine drawn as SVG, keyed by machine id. */
  charts(): Promise<Readonly<Record<string, string>>>;
  /** Calls `listener` with each actor that changed; returns the unsubscribe. */
  subscribe(listener: (a: DebugActor) => void): () => void;
  /** The last lines of an actor's log (shards have one). */
  tail(actor: string): readonly string[];
}

/** The debug routes of one gateway. */
export interface DebugRoutes {
  /** Answers a request under /debug/; false when the path is not one of its routes. */
  handle(req: IncomingMessage, res: ServerResponse, path: string): boolean;
  /** Ends every open event stream, so closing the server does not wait for browsers. */
  close(): void;
}

const HEARTBEAT_MS = 15_000;

// The page loads nothing from anywhere: its script and styles are inline, its data from this origin.
const pageSecurity = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:";

/**
 * A browser cannot send a bearer token when it opens a page or an EventSource, but it does send
 * HTTP Basic credentials once it has asked for them: the key is the password, the user name is ignored.
 */
function asBearer(authorization: string | undefined): string | undefined {
  const m = /^Basic\s+(\S+)\s*$/i.exec(authorization ?? '');
  if (m?.[1] === undefined) return authorization;
  const decoded = Buffer.from(m[1], 'base64').toString('utf8');
  return `Bearer ${decoded.slice(decoded.indexOf(':') + 1)}`;
}

/** The debug routes over `source`, admitting callers through `authenticate`. */
export function debugRoutes(source: ActorSource, authenticate: (authorization: string | undefined) => Caller): DebugRoutes {
  const streams = new Set<ServerResponse>();
  const admit = (req: IncomingMessage): void => {
    const caller = authenticate(asBearer(req.headers.authorization));
    if (!caller.admin) {
      throw new LlmgwError('LLMGW_FORBIDDEN', `key "${caller.name}" may not read /debug/; use a key with admin: true in gateway.api_keys`);
    }
  };
  const json = (res: ServerResponse, body: unknown): void => {
    const text = JSON.stringify(body);
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), 'cache-control': 'no-store' });
    res.end(text);
  };
  const events = (req: IncomingMessage, res: ServerResponse): void => {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive' });
    const send = (event: string, data: unknown): void => {
      res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
    };
    send('actors', { now: Date.now(), actors: source.actors() });
    const unsubscribe = source.subscribe((a) => send('actor', a));
    // A proxy in between drops a silent connection; a comment line every so often keeps it open.
    const heartbeat = setInterval(() => res.write(': heartbeat\n\n'), HEARTBEAT_MS);
    streams.add(res);
    const end = (): void => {
      clearInterval(heartbeat);
      unsubscribe();
      streams.delete(res);
    };
    res.on('close', end);
    req.on('close', end);
  };
  const refuse = (res: ServerResponse, e: unknown): void => {
    const r = errorReply(e);
    const text = JSON.stringify(r.body);
    // Basic, so a browser asks for the key instead of showing a bare 401.
    const headers = r.status === 401 ? { ...r.headers, 'www-authenticate': 'Basic realm="llmgw debug", charset="UTF-8"' } : r.headers;
    res.writeHead(r.status, { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
    res.end(text);
  };
  const routes: Readonly<Record<string, (req: IncomingMessage, res: ServerResponse, url: URL) => void>> = {
    '/debug/actors': (_req, res) => {
      source.charts().then(
        (charts) => {
          const html = debugPage(charts);
          res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'content-length': Buffer.byteLength(html), 'content-security-policy': pageSecurity, 'cache-control': 'no-store' });
          res.end(html);
        },
        (e: unknown) => refuse(res, e),
      );
    },
    '/debug/actors/state': (_req, res) => json(res, { at: Date.now(), actors: source.actors() }),
    '/debug/actors/events': events,
    '/debug/actors/tail': (_req, res, url) => {
      const actor = url.searchParams.get('actor') ?? '';
      json(res, { actor, lines: source.tail(actor) });
    },
  };
  return {
    handle(req, res, path) {
      const route = routes[path];
      if (route === undefined) return false;
      try {
        if ((req.method ?? 'GET') !== 'GET') throw new LlmgwError('LLMGW_METHOD', `${path} takes GET, not ${req.method ?? ''}`);
        admit(req);
        route(req, res, new URL(req.url ?? path, 'http://localhost'));
      } catch (e) {
        refuse(res, e);
      }
      return true;
    },
    close() {
      for (const res of streams) res.end();
      streams.clear();
    },
  };
}
