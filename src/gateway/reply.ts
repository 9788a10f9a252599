// How the gateway answers without an engine: a JSON body, an error as an OpenAI (or the route's
// protocol's) error object, and the raw error written to a socket Node's parser gave up on. Every
// answer carries x-llmgw-replica and x-llmgw-route, so a client can always say where it went.
import { STATUS_CODES } from 'node:http';
import type { ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { ClientApi } from '../apis/index.js';
import type { LlmgwError } from '../errors/index.js';
import { errorReply } from './errors.js';

/** The replica and route headers' value on an answer no replica gave. */
export const none = 'none';

/** A JSON answer of the gateway's own. */
export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    'x-llmgw-replica': none,
    'x-llmgw-route': none,
    ...headers,
  });
  res.end(text);
}

/** An error answered in `api`'s shape (default: OpenAI's); returns the status sent. */
export function sendError(res: ServerResponse, e: unknown, headers: Record<string, string> = {}, api?: ClientApi): number {
  const r = errorReply(e);
  const extra: Record<string, string> = { ...r.headers, ...headers };
  // A body the client is still sending is not read: close the connection so it cannot be mistaken
  // for the next request.
  if (r.status === 413 || r.status === 408) extra.connection = 'close';
  sendJson(res, r.status, api === undefined ? r.body : api.errorBody({ status: r.status, ...r.body.error }), extra);
  return r.status;
}

/** A status line, headers and an OpenAI error body written straight to a socket Node's parser gave up on. */
export function writeRawError(socket: Duplex, e: LlmgwError): void {
  const r = errorReply(e);
  const text = JSON.stringify(r.body);
  const head = [
    `HTTP/1.1 ${r.status} ${STATUS_CODES[r.status] ?? ''}`,
    'content-type: application/json',
    `content-length: ${Buffer.byteLength(text)}`,
    'connection: close',
    `x-llmgw-replica: ${none}`,
    `x-llmgw-route: ${none}`,
  ];
  socket.end(`${head.join('\r\n')}\r\n\r\n${text}`);
}
