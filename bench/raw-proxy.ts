// The least a Node.js proxy can do per request: raw TCP sockets on both sides, no HTTP library. It
// reads a request's head and Content-Length body, writes it to the next engine on a kept-alive
// socket, and copies the engine's answer back byte for byte, finding its end by Content-Length or
// by the chunk sizes. It is the runtime's own floor, beside node:http and undici's (bench/overhead's
// bare proxy): what a gateway on this runtime could reach with an HTTP layer of its own. It knows
// only what the sims and wrk send (no pipelining of bodies it has not read, no trailers, no
// Expect), so it is a bench's yardstick, never a server.
import { connect, createServer, type Socket } from 'node:net';

const crlf2 = Buffer.from('\r\n\r\n');

// Where an HTTP/1.1 answer ends in `buf` (its head already complete at `headEnd`), or -1 for not yet.
function answerEnd(buf: Buffer, headEnd: number): number {
  const head = buf.toString('latin1', 0, headEnd);
  const length = /\r\ncontent-length:\s*(\d+)/i.exec(head);
  if (length !== null) {
    const end = headEnd + 4 + Number(length[1]);
    return buf.length >= end ? end : -1;
  }
  if (!/\r\ntransfer-encoding:\s*chunked/i.test(head)) return -1;
  let at = headEnd + 4;
  for (;;) {
    const line = buf.indexOf('\r\n', at);
    if (line < 0) return -1;
    const size = parseInt(buf.toString('latin1', at, line), 16);
    if (!Number.isFinite(size)) return -1;
    const next = line + 2 + size + 2;
    if (buf.length < next) return -1;
    if (size === 0) return next;
    at = next;
  }
}

class Upstream {
  readonly #port: number;
  readonly #idle: Socket[] = [];

  constructor(port: number) {
    this.#port = port;
  }

  // One request on a kept-alive socket; `onAnswer` gets the whole answer's bytes.
  send(head: string, body: Buffer, onAnswer: (answer: Buffer | undefined) => void): void {
    const s = this.#idle.pop() ?? this.#open();
    let buf: Buffer = Buffer.alloc(0);
    const done = (answer: Buffer | undefined): void => {
      s.off('data', onData);
      s.off('close', onClose);
      if (answer !== undefined && !s.destroyed) this.#idle.push(s);
      onAnswer(answer);
    };
    const onData = (d: Buffer): void => {
      buf = buf.length === 0 ? d : Buffer.concat([buf, d]);
      const headEnd = buf.indexOf(crlf2);
      const end = headEnd < 0 ? -1 : answerEnd(buf, headEnd);
      if (end >= 0) done(buf.subarray(0, end));
    };
    const onClose = (): void => done(undefined);
    s.on('data', onData);
    s.on('close', onClose);
    s.write(head);
    s.write(body);
  }

  #open(): Socket {
    const s = connect(this.#port, '127.0.0.1');
    s.setNoDelay(true);
    // An engine closes an idle kept-alive socket on its own timeout: forget it, and let a request
    // on it fail to the client as a closed connection (wrk counts it).
    s.on('error', () => undefined);
    s.on('close', () => {
      const i = this.#idle.indexOf(s);
      if (i >= 0) this.#idle.splice(i, 1);
    });
    return s;
  }
}

/** Serves on `port`, passing requests round robin to the engines on `engines`, each with its key from `keys` (none: no key). */
export function rawProxy(port: number, engines: readonly number[], keys: readonly string[] = []): Promise<{ close(): void }> {
  const ups = engines.map((p, i) => ({ up: new Upstream(p), auth: keys[i] === undefined ? '' : `\r\nauthorization: Bearer ${keys[i]}` }));
  let turn = 0;
  const server = createServer((client) => {
    client.setNoDelay(true);
    client.on('error', () => undefined);
    let buf: Buffer = Buffer.alloc(0);
    let busy = false;
    const next = (): void => {
      if (busy) return;
      const headEnd = buf.indexOf(crlf2);
      if (headEnd < 0) return;
      const head = buf.toString('latin1', 0, headEnd);
      const length = Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0);
      const end = headEnd + 4 + length;
      if (buf.length < end) return;
      const line = head.slice(0, head.indexOf('\r\n'));
      const body = buf.subarray(headEnd + 4, end);
      buf = buf.subarray(end);
      busy = true;
      const to = ups[turn++ % ups.length];
      if (to === undefined) return;
      to.up.send(`${line}\r\nhost: 127.0.0.1${to.auth}\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n\r\n`, body, (answer) => {
        busy = false;
        if (answer === undefined) {
          client.destroy();
          return;
        }
        client.write(answer);
        next();
      });
    };
    client.on('data', (d: Buffer) => {
      buf = buf.length === 0 ? d : Buffer.concat([buf, d]);
      next();
    });
  });
  return new Promise((resolve) => server.listen(port, '127.0.0.1', () => resolve({ close: () => server.close() })));
}
