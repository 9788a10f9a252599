// A recording proxy in front of one engine: every request's path, headers and body as they went on
// the wire, and the answer's body, so a test checks exactly what the gateway sent an engine.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';

/** One exchange through the tap. */
export interface Tapped {
  readonly path: string;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  readonly body: unknown;
  /** The engine's answer as text (a stream's whole SSE). */
  answer: string;
}

/** Starts a tap forwarding to `target`; closed by the test's `t.after`. */
export async function wireTap(t: import('node:test').TestContext, target: URL): Promise<{ url: URL; seen: Tapped[] }> {
  const seen: Tapped[] = [];
  const server = createServer((req, res) => {
    void (async () => {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      const text = Buffer.concat(chunks).toString('utf8');
      const entry: Tapped = { path: req.url ?? '/', headers: { ...req.headers }, body: text === '' ? undefined : (JSON.parse(text) as unknown), answer: '' };
      seen.push(entry);
      const headers = Object.fromEntries(Object.entries(req.headers).filter(([k]) => k !== 'host' && k !== 'content-length' && k !== 'connection'));
      try {
        const up = await request(new URL(entry.path, target), { method: req.method as 'POST', headers, body: text === '' ? undefined : text, signal: AbortSignal.timeout(30_000) });
        res.writeHead(up.statusCode, { 'content-type': String(up.headers['content-type'] ?? 'application/json') });
        for await (const c of up.body) {
          entry.answer += (c as Buffer).toString('utf8');
          res.write(c);
        }
        res.end();
      } catch {
        // The engine is gone: the gateway sees what it would see of a dead engine, a reset.
        res.destroy();
      }
    })();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(
    () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  );
  return { url: new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`), seen };
}
