// Real vLLM frames (shared/vectors/vllm-kv-events-frames.json, captured from vLLM's own publisher
// with pyzmq) sent byte for byte over loopback into an EngineEventStream. Seq 2 is withheld, so the
// stream must send exactly the replay request vLLM's ROUTER was captured answering, and read the
// captured replies (4 frames with a topic on main, 3 frames on v0.23.0). The mirror must verify the
// captured hashes (golden sha256_cbor, seed "0", LoRA and cache_salt included) and end with the
// block set the batches describe.
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Router, XPublisher } from 'zeromq';
import {
  EngineEventStream,
  decodeEventBatch,
  keyOfDigest,
  type KvStatus,
  type EventBatch,
  type WireBlockHash,
} from '../../src/kv/index.js';
import { freePort, waitFor } from '../support/wait.js';

interface Captured {
  versions: Record<
    string,
    {
      zmq: {
        publisher: { topic: string };
        live: { seq: number; frames_hex: string[] }[];
        replay_dealer: { request_frames_hex: string[]; start_seq: number; responses: { frames_hex: string[] }[] };
      };
    }
  >;
}

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const vectors = JSON.parse(readFileSync(join(root, '..', 'shared', 'vectors', 'vllm-kv-events-frames.json'), 'utf8')) as Captured;
const hex = (s: string): Buffer => Buffer.from(s, 'hex');
const keyOf = (h: WireBlockHash): bigint => (typeof h === 'bigint' ? h : keyOfDigest(h));

// What the engine holds after these batches, by the plain rules: refcount per (medium, group, hash),
// AllBlocksCleared empties it.
function truth(batches: EventBatch[]): bigint[] {
  const held = new Map<string, number>();
  for (const b of batches) {
    for (const e of b.events) {
      if (e.type === 'AllBlocksCleared') {
        held.clear();
        continue;
      }
      for (const h of e.blockHashes) {
        const id = `${e.medium ?? 'GPU'}/${e.groupIdx ?? 0}/${keyOf(h)}`;
        const n = (held.get(id) ?? 0) + (e.type === 'BlockStored' ? 1 : -1);
        if (n > 0) held.set(id, n);
        else held.delete(id);
      }
    }
  }
  return [...new Set([...held.keys()].map((id) => BigInt(id.split('/')[2] ?? '0')))].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}

for (const version of ['main', 'v0.23.0']) {
  void test(`captured vLLM ${version} frames over loopback: gap replayed from the captured replies, hashes verified, mirror exact`, async (t) => {
    const cap = vectors.versions[version]?.zmq;
    if (cap === undefined) assert.fail(`no ${version} capture`);
    const port = await freePort();
    const replayPort = await freePort();
    const statuses: KvStatus[] = [];
    const stream = new EngineEventStream({
      engineId: version,
      port,
      replayPort,
      topic: cap.publisher.topic,
      blockSizeTokens: 16,
      seed: '0',
      capacityBlocks: 1000,
      // Enough blocks that the LoRA + cache_salt and 32-byte-digest batches are checked too.
      verifyBlocks: 10,
      onDelta: () => undefined,
      onStatus: (s) => statuses.push(s),
    });
    t.after(() => stream.close());
    await stream.start();

    // Stands in for vLLM's replay ROUTER: checks the request against the captured one and answers
    // with the captured replies.
    const router = new Router({ linger: 0 });
    t.after(() => router.close());
    await router.bind(`tcp://127.0.0.1:${replayPort}`);
    const requests: string[][] = [];
    const serving = (async () => {
      for await (const [id, ...rest] of router) {
        requests.push(rest.map((f) => f.toString('hex')));
        if (id === undefined) continue;
        for (const r of cap.replay_dealer.responses) await router.send([id, ...r.frames_hex.map(hex)]);
      }
    })();
    t.after(() => serving);

    // XPUB is PUB on the wire but tells us when the subscription arrived, so only seq 2 is lost.
    const pub = new XPublisher({ linger: 0 });
    t.after(() => pub.close());
    pub.connect(`tcp://127.0.0.1:${port}`);
    await pub.receive();
    const withheld = cap.replay_dealer.start_seq;
    for (const m of cap.live) if (m.seq !== withheld) await pub.send(m.frames_hex.map(hex));

    const last = cap.live[cap.live.length - 1]?.seq ?? -1;
    await waitFor(() => stream.stats().ranks[0]?.lastSeq === last, { timeoutMs: 10_000, what: `seq ${last} applied` });
    await stream.whenIdle();

    assert.deepEqual(requests, [cap.replay_dealer.request_frames_hex], 'the replay request vLLM was captured answering');
    const batches = cap.live.map((m) => {
      const d = decodeEventBatch(hex(m.frames_hex[2] ?? ''));
      if (!d.ok) assert.fail(`captured seq ${m.seq} does not decode: ${d.reason}`);
      return d.batch;
    });
    assert.deepEqual([...stream.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)), truth(batches));
    assert.equal(stream.verification, 'verified');
    assert.deepEqual(
      statuses.filter((s) => s.type === 'mirror.hash-mismatch' || s.type === 'stream.malformed' || s.type === 'stream.reset'),
      [],
    );
    assert.ok(statuses.some((s) => s.type === 'mirror.reset' && s.reason === 'all-blocks-cleared'), 'the captured clear resets');
    assert.equal(stream.stats().ranks[0]?.replayedBatches, cap.live.length - withheld);
  });
}
