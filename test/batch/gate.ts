// A proxy in front of a test engine that can hold the batch's lines (requests whose prompt says
// "line <n>") while it lets everything else through: with it a test knows batch lines are waiting
// at the moment it sends an interactive request, without racing the engine.
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { request } from 'undici';

export interface Gate {
  readonly url: URL;
  /** Batch lines held now. */
  readonly held: number;
  /** Holds batch lines from now on. */
  hold(): void;
  /** Lets the held lines and every later one through. */
  release(): void;
  close(): Promise<void>;
}

async function bodyOf(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of req as AsyncIterable<Buffer>) chunks.push(c);
  return Buffer.concat(chunks);
}

/** Starts the gate on 127.0.0.1:0, forwarding to `target`. */
export async function startGate(target: URL): Promise<Gate> {
  let open: Promise<void> = Promise.resolve();
  let release = (): void => undefined;
  let held = 0;
  const sockets = new Set<Socket>();
  const server = createServer((req, res) => {
    void (async () => {
      const body = await bodyOf(req);
      if (/"line \d+"/.test(body.toString('utf8'))) {
        held++;
        await open;
        held--;
      }
      const headers = Object.fromEntries(Object.entries(req.headers).filter(([k]) => k !== 'host' && k !== 'content-length' && k !== 'connection'));
      const r = await request(new URL(req.url ?? '/', target), { method: (req.method ?? 'GET') as 'GET', headers, body: body.length > 0 ? body : undefined });
      res.writeHead(r.statusCode, Object.fromEntries(Object.entries(r.headers).filter(([k]) => k !== 'content-length' && k !== 'transfer-encoding' && k !== 'connection')));
      for await (const c of r.body) res.write(c);
      res.end();
    })().catch(() => res.destroy());
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`),
    get held() {
      return held;
    },
    hold() {
      open = new Promise<void>((r) => (release = r));
    },
    release() {
      release();
      open = Promise.resolve();
    },
    close: async () => {
      release();
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
