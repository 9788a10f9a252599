// Cross-check against an independent publisher: Debian's python3-zmq, python3-msgpack and
// python3-cbor2 (test/kv/fixtures/vllm_publisher.py) hash blocks, encode batches and frame them
// from the spec alone. Our subscriber and mirror, which share no code with it, must end with the
// block set it says the engine holds, verify its hashes, and replay what it deliberately did not
// send (seq 0: a late join; seq 3: a gap).
import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { EngineEventStream, type KvStatus } from '../../src/kv/index.js';
import { freePort, waitFor } from '../support/wait.js';

const PYTHON = '/usr/bin/python3';
// Tests run from dist/test/kv; the fixture stays in the source tree.
const fixture = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'test', 'kv', 'fixtures', 'vllm_publisher.py');

const cases = [
  { why: 'vLLM >= 0.26: map events, replay with a topic frame', format: 'map', framing: 'topic' },
  { why: 'vLLM <= 0.23: positional events, 3-frame replay', format: 'array', framing: 'legacy' },
] as const;

for (const c of cases) {
  void test(`python publisher (${c.why}): the mirror ends with its blocks, verified, after replaying what it did not send`, async (t) => {
    const port = await freePort();
    const replayPort = await freePort();
    const statuses: KvStatus[] = [];
    const stream = new EngineEventStream({
      engineId: 'py',
      port,
      replayPort,
      topic: 'kv-events',
      blockSizeTokens: 16,
      seed: '0',
      capacityBlocks: 1000,
      onDelta: () => undefined,
      onStatus: (s) => statuses.push(s),
    });
    t.after(() => stream.close());
    await stream.start();

    const py = spawn(
      PYTHON,
      [
        fixture,
        ...['--endpoint', `tcp://127.0.0.1:${port}`, '--replay', `tcp://127.0.0.1:${replayPort}`, '--topic', 'kv-events'],
        ...['--format', c.format, '--replay-framing', c.framing, '--drop', '0', '--drop', '3', '--wait-replay-after', '1', '--deadline-s', '20'],
      ],
      { stdio: ['pipe', 'pipe', 'inherit'] },
    );
    // Closing stdin ends the script; kill is the bound if it does not.
    t.after(async () => {
      if (py.exitCode !== null || py.signalCode !== null) return;
      const exited = once(py, 'exit');
      py.stdin.end();
      const timer = setTimeout(() => py.kill('SIGKILL'), 3000);
      await exited;
      clearTimeout(timer);
    });

    const lines: Record<string, unknown>[] = [];
    const rl = createInterface({ input: py.stdout });
    rl.on('line', (l) => lines.push(JSON.parse(l) as Record<string, unknown>));
    const done = await waitFor(() => lines.find((l) => 'done' in l), { timeoutMs: 15_000, what: 'the python publisher to finish' });
    const last = done.done as number;
    const expected = (done.expected as string[]).map((s) => BigInt(s)).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));

    await waitFor(() => stream.stats().ranks[0]?.lastSeq === last, { timeoutMs: 10_000, what: `seq ${last} applied` });
    await stream.whenIdle();
    const got = [...stream.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    assert.deepEqual(got, expected);
    assert.equal(stream.verification, 'verified', 'cbor2 + hashlib hashes equal ours');
    // The script says what it was asked on stdout, which can arrive after the replies on the socket.
    const askedFor = (): unknown[] => lines.flatMap((l) => ('replay_from' in l ? [l.replay_from] : []));
    await waitFor(() => askedFor().length >= 2, { what: 'the script to report both replay requests (from 0 and from 3)' });
    const asked = askedFor();
    assert.ok(asked.includes(0), `late join replays from 0 (asked ${JSON.stringify(asked)})`);
    assert.ok(asked.includes(3), `the gap replays from 3 (asked ${JSON.stringify(asked)})`);
    assert.deepEqual(
      statuses.filter((s) => s.type === 'stream.reset' || s.type === 'mirror.reset' || s.type === 'stream.malformed'),
      [],
    );
  });
}
