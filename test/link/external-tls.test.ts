// An external replica on https: with a certificate the system does not trust it is never healthy,
// and the log says why (once, not every check); with its CA given (endpoint.ca_file) it is healthy,
// and the gateway reaches it with the same trust. Nothing disables verification.
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { Registry } from 'prom-client';
import { Agent, request } from 'undici';
import { gatewayDefaults, startGateway } from '../../src/gateway/index.js';
import { ExternalReplicas, type ExternalReplica } from '../../src/link/index.js';
import { createLogger } from '../../src/log/index.js';
import { waitFor } from '../support/wait.js';

// A self-signed certificate for 127.0.0.1, its own CA.
function selfSigned(t: TestContext): { key: string; cert: string } {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-tls-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const r = spawnSync('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
    '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem'), '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1',
  ], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`openssl failed: ${r.stderr}`);
  return { key: readFileSync(join(dir, 'key.pem'), 'utf8'), cert: readFileSync(join(dir, 'cert.pem'), 'utf8') };
}

async function httpsEngine(t: TestContext, tls: { key: string; cert: string }): Promise<URL> {
  const server = createServer(tls, (req, res) => {
    req.resume();
    if (req.url === '/health') res.end('ok');
    else {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ choices: [{ index: 0, message: { role: 'assistant', content: 'over tls' } }], usage: { prompt_tokens: 1, completion_tokens: 2 } }));
    }
  });
  t.after(() => new Promise<void>((resolve) => (server.closeAllConnections(), server.close(() => resolve()))));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const a = server.address();
  if (a === null || typeof a === 'string') throw new Error('no TCP address');
  return new URL(`https://127.0.0.1:${a.port}/`);
}

const replica = (url: URL): ExternalReplica => ({
  name: 'tls-0', model: 'm', url: url.href, apiKey: '', kvEvents: '', replay: '', topic: '', hashSeed: '', blockSizeTokens: 16, capacityBlocks: 1000, caFile: '',
});

void test('external replica over https: an untrusted certificate is logged once with its reason; its CA makes it healthy and routable', async (t) => {
  const tls = selfSigned(t);
  const url = await httpsEngine(t, tls);
  const lines: Record<string, unknown>[] = [];
  const log = createLogger({ level: 'info', format: 'json', sink: (l) => lines.push(JSON.parse(l) as Record<string, unknown>) });
  const untrusted = new ExternalReplicas({ replicas: [replica(url)], writer: undefined, healthIntervalMs: 50, healthTimeoutMs: 2000, log });
  t.after(() => untrusted.close());
  await untrusted.start();
  const unhealthy = () => lines.filter((l) => l.msg === 'external.unhealthy');
  await waitFor(() => unhealthy().length > 0, { what: 'the unhealthy line' });
  assert.match(String(unhealthy()[0]?.reason), /SELF_SIGNED|CERT|certificate/i);

  const caOf = (origin: string) => (origin === url.origin ? tls.cert : undefined);
  // What serve builds from ca_file: a health check that trusts that CA for that origin alone.
  const dispatcher = new Agent({ connect: { ca: tls.cert } });
  t.after(() => dispatcher.close());
  const get = async (u: URL, o: { signal: AbortSignal; headers: Record<string, string> }) => {
    const res = await request(u, { ...o, dispatcher });
    await res.body.dump();
    return res.statusCode;
  };
  const trusted = new ExternalReplicas({ replicas: [replica(url)], writer: undefined, healthIntervalMs: 50, healthTimeoutMs: 2000, get });
  t.after(() => trusted.close());
  await trusted.start();
  await waitFor(() => trusted.status()[0]?.healthy === true, { what: 'healthy with its CA' });
  const gw = await startGateway({
    config: { ...gatewayDefaults, port: 0, router: { ...gatewayDefaults.router, loadPollIntervalMs: 0 } },
    directory: { ready: (m) => trusted.ready(m), models: () => ['m'] },
    registry: new Registry(),
    caOf,
  });
  t.after(() => gw.close());
  const res = await request(new URL('/v1/chat/completions', gw.url), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await res.body.text();
  assert.equal(res.statusCode, 200, text);
  assert.match(text, /over tls/);
  // The untrusted replica was checked every 50 ms all along, failing the same way: still one line.
  assert.equal(untrusted.status()[0]?.healthy, false);
  assert.equal(unhealthy().length, 1);
});
