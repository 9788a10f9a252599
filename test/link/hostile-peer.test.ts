// Peers that attack the link before authenticating, against a real LinkServer: raw ZMTP bytes
// (garbage, the NULL mechanism, a CURVE greeting followed by a frame announcing 4 GiB), a DEALER
// that does not hold the key for the gateway's public key, and one whose key is not listed. Each is
// refused, counted by its reason and logged, the log at most one line per reason per interval with
// a count of what it stood for; the huge frame is dropped, not held.
import { strict as assert } from 'node:assert';
import { once } from 'node:events';
import { connect } from 'node:net';
import { test, type TestContext } from 'node:test';
import { Dealer } from 'zeromq';
import { createLogger } from '../../src/log/index.js';
import { ControlPlane, LinkServer, makeKeyPair, type RefusalReason } from '../../src/link/index.js';
import { waitFor } from '../support/wait.js';

async function server(t: TestContext) {
  const lines: Record<string, unknown>[] = [];
  const log = createLogger({ level: 'info', format: 'json', sink: (l) => lines.push(JSON.parse(l) as Record<string, unknown>) });
  const keys = makeKeyPair();
  const listed = makeKeyPair();
  const plane = new ControlPlane({ nodes: [{ name: 'a', publicKey: listed.publicKey }], place: () => ({ byNode: new Map(), unplaced: [] }), writer: undefined, models: [], send: () => undefined, silentAfterMs: 3000, log });
  const link = new LinkServer({
    endpoint: 'tcp://127.0.0.1:*',
    keys,
    allowed: () => new Map([[listed.publicKey, 'a']]),
    onMessage: (peer, seq, msg) => plane.receive(peer, seq, msg),
    onRefused: (reason, fields) => plane.refuse(reason, fields),
    maxMessageBytes: 1024 * 1024,
    log,
  });
  t.after(() => link.close());
  const at = await link.start();
  const port = Number(at.split(':').at(-1));
  const refused = (reason: RefusalReason): number => plane.stats.refused.get(reason) ?? 0;
  return { port, keys, refused, lines };
}

// The 64-byte ZMTP 3.0 greeting: signature, version 3.0, mechanism name, as-server 0, filler.
function greeting(mechanism: string): Buffer {
  const b = Buffer.alloc(64);
  b[0] = 0xff;
  b[9] = 0x7f;
  b[10] = 3;
  b.write(mechanism, 12, 'latin1');
  return b;
}

// Writes `bytes` and waits for the gateway to close the connection.
async function rawPeer(port: number, bytes: Buffer): Promise<void> {
  const s = connect(port, '127.0.0.1');
  // The gateway may reset rather than close: either way the connection ends.
  const closed = once(s, 'close', { signal: AbortSignal.timeout(10_000) });
  s.on('error', () => undefined);
  s.write(bytes);
  s.resume();
  await closed.catch((e: unknown) => {
    if (!s.destroyed) throw e;
  });
}

void test('link: garbage, the NULL mechanism and a 4 GiB frame before authentication are each dropped and counted', async (t) => {
  const { port, refused } = await server(t);
  await rawPeer(port, Buffer.from('GET / HTTP/1.1\r\nhost: x\r\n\r\n'.repeat(4)));
  await waitFor(() => refused('malformed') === 1, { what: 'garbage counted as malformed' });
  await rawPeer(port, greeting('NULL'));
  await waitFor(() => refused('wrong-mechanism') === 1, { what: 'NULL counted as wrong-mechanism' });
  // A long command frame (flags 0x06) announcing 4 GiB, then bytes of it: dropped at the announcement.
  const huge = Buffer.alloc(9);
  huge[0] = 0x06;
  huge.writeBigUInt64BE(4n << 30n, 1);
  await rawPeer(port, Buffer.concat([greeting('CURVE'), huge, Buffer.alloc(64 * 1024)]));
  await waitFor(() => refused('malformed') === 2, { what: 'the huge frame counted as malformed' });
});

void test('link: a peer with the wrong server key and an unlisted key are refused by reason; the log is one line per reason with the rest counted', async (t) => {
  const { port, keys, refused, lines } = await server(t);
  const peer = (serverKey: string) => {
    const own = makeKeyPair();
    const d = new Dealer({ linger: 0, curveServerKey: serverKey, curvePublicKey: own.publicKey, curveSecretKey: own.secretKey });
    t.after(() => d.close());
    d.connect(`tcp://127.0.0.1:${port}`);
    return d;
  };
  // Five of each, as a scan or a misconfigured fleet would come.
  for (let i = 0; i < 5; i++) {
    peer(makeKeyPair().publicKey);
    peer(keys.publicKey);
  }
  await waitFor(() => refused('wrong-server-key') >= 5 && refused('unlisted-key') >= 5, { what: 'five refusals of each reason' });
  const logged = lines.filter((l) => l.msg === 'link.node.refused');
  const by = (reason: string) => logged.filter((l) => l.reason === reason);
  assert.equal(by('wrong-server-key').length, 1, 'one line within the interval');
  assert.equal(by('unlisted-key').length, 1, 'one line within the interval');
  assert.equal(typeof by('unlisted-key')[0]?.key, 'string');
});
