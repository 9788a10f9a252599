// The actor board's picture of other nodes: what a remote node reports sits under that node with its
// phase, since when and why; it never replaces an actor this process runs or another node reported;
// an actor its node stops reporting turns unknown rather than vanishing from a watcher's table.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { ActorBoard, allCharts, toSvg, type ActorView, type ReportedActor } from '../../src/actors/index.js';

const at = (id: string, phase: string, o: Partial<ReportedActor> = {}): ReportedActor => ({ id, parent: undefined, phase, since: undefined, reason: undefined, ...o });

void test('board: a remote node and its replica, shard and publisher, each under the one it belongs to, with since and reason as reported', () => {
  const board = new ActorBoard();
  board.report(
    'b',
    [
      at('node:b', 'up'),
      at('replica:r1', 'ready', { parent: 'node:b', since: 500 }),
      at('shard:r1-r0', 'ready', { parent: 'replica:r1', since: 400 }),
      at('publisher:r1', 'streaming', { parent: 'replica:r1' }),
      // A parent it names but neither reports nor is known here: put under the node.
      at('shard:r9-r1', 'loading', { parent: 'replica:r9', reason: 'waiting for leader' }),
    ],
    1_000,
  );
  const rows = board.actors().map((a) => [a.id, a.kind, a.machine, a.parent, a.phase, a.since, a.reason]);
  assert.deepEqual(rows, [
    ['node:b', 'node', 'node', undefined, 'up', 1_000, undefined],
    ['replica:r1', 'replica', 'replica', 'node:b', 'ready', 500, undefined],
    ['shard:r1-r0', 'shard', 'shard', 'replica:r1', 'ready', 400, undefined],
    ['shard:r9-r1', 'shard', 'shard', 'node:b', 'loading', 1_000, 'waiting for leader'],
    ['publisher:r1', 'publisher', 'publisher', 'replica:r1', 'streaming', 1_000, undefined],
  ]);
});

void test('board: a report tells listeners of changes only; an actor no longer reported turns unknown, and returns', () => {
  const board = new ActorBoard();
  const seen: ActorView[] = [];
  board.subscribe((a) => seen.push(a));
  board.report('b', [at('node:b', 'up'), at('replica:r1', 'loading')], 1_000);
  assert.equal(seen.length, 2);
  board.report('b', [at('node:b', 'up'), at('replica:r1', 'loading')], 2_000);
  assert.equal(seen.length, 2, 'the same report again changes nothing');
  assert.equal(board.get('replica:r1')?.since, 1_000, 'since is when the phase began, not the last report');
  board.report('b', [at('node:b', 'silent', { reason: 'gone quiet' })], 3_000);
  assert.deepEqual([board.get('node:b')?.phase, board.get('replica:r1')?.phase, board.get('replica:r1')?.reason], ['silent', 'unknown', 'node:b no longer reports it']);
  assert.deepEqual(board.get('replica:r1')?.transitions.map((t) => [t.from, t.to]), [
    [undefined, 'loading'],
    ['loading', 'unknown'],
  ]);
  board.report('b', [at('node:b', 'up'), at('replica:r1', 'ready')], 4_000);
  assert.deepEqual([board.get('replica:r1')?.phase, board.get('replica:r1')?.since], ['ready', 4_000]);
});

void test("board: a node's report never replaces this process's actors, nor another node's while that one reports it", () => {
  const board = new ActorBoard();
  board.record({ kind: 'snapshot', at: 1, actor: 'replica:local', machine: 'replica', status: 'active', value: { running: 'ready' }, tags: [], context: { node: 'gw' } });
  const local = board.get('replica:local');
  board.report('a', [at('node:a', 'up'), at('replica:ra', 'ready')], 10);
  board.report('b', [at('node:b', 'up'), at('replica:local', 'failed'), at('replica:ra', 'failed'), at('node:a', 'silent')], 20);
  assert.equal(board.get('replica:local'), local);
  assert.deepEqual([board.get('replica:ra')?.phase, board.get('replica:ra')?.parent, board.get('node:a')?.phase], ['ready', 'node:a', 'up']);
  // Once a's word on it is gone, the replica may move to b.
  board.report('a', [at('node:a', 'up')], 30);
  board.report('b', [at('node:b', 'up'), at('replica:ra', 'loading')], 40);
  assert.deepEqual([board.get('replica:ra')?.phase, board.get('replica:ra')?.parent], ['loading', 'node:b']);
});

void test('board: the charts are drawn on a thread of their own, the same SVGs as drawn here, while the event loop goes on turning', async () => {
  const board = new ActorBoard();
  let turns = 0;
  let turning = true;
  const turn = (): void => {
    turns++;
    if (turning) setImmediate(turn);
  };
  setImmediate(turn);
  // Drawn on this thread, the charts would be done before the first immediate could run.
  const charts = await board.charts();
  turning = false;
  assert.ok(turns > 0, 'the event loop did not turn while the charts were drawn');
  assert.deepEqual(charts, Object.fromEntries(allCharts().map((c) => [c.machine, toSvg(c)])));
  assert.equal(await board.charts(), charts, 'drawn once per process');
});
