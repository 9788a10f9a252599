// Adapter residency against a scripted engine that records every load and unload: one load per
// replica and adapter whatever the burst, the least recently used unloaded first, never one in use,
// a failed load named and retried, and what the engine already lists taken as held.
import { strict as assert } from 'node:assert';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { Agent } from 'undici';
import type { AdapterAccess, AdapterReplica } from '../../src/upstream/index.js';
import { AdapterLoadError, AdapterResidency } from '../../src/upstream/index.js';
import { waitFor } from '../support/wait.js';

interface ScriptedEngine {
  readonly url: URL;
  /** "load x" / "unload x", in the order the engine received them. */
  readonly calls: string[];
  readonly loaded: Set<string>;
  /** Adapters whose load the engine refuses. */
  readonly refuse: Set<string>;
  /** Loads wait for this before answering. */
  gate: Promise<void>;
}

async function scriptedEngine(t: import('node:test').TestContext): Promise<ScriptedEngine> {
  const e: Omit<ScriptedEngine, 'url'> = { calls: [], loaded: new Set(), refuse: new Set(), gate: Promise.resolve() };
  const server = createServer((req, res) => {
    let text = '';
    req.setEncoding('utf8').on('data', (d: string) => (text += d));
    req.on('end', () => {
      void (async () => {
        const name = text === '' ? '' : String((JSON.parse(text) as { lora_name?: unknown }).lora_name);
        if (req.url === '/v1/models') {
          res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ data: [{ id: 'base' }, ...[...e.loaded].map((id) => ({ id, parent: 'base' }))] }));
        } else if (req.url === '/v1/load_lora_adapter') {
          e.calls.push(`load ${name}`);
          await state.gate;
          if (e.refuse.has(name)) res.writeHead(404).end(`No adapter found for /l/${name}`);
          else {
            e.loaded.add(name);
            res.writeHead(200).end('ok');
          }
        } else if (req.url === '/v1/unload_lora_adapter') {
          e.calls.push(`unload ${name}`);
          e.loaded.delete(name);
          res.writeHead(200).end('ok');
        } else res.writeHead(404).end();
      })();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const state: ScriptedEngine = Object.assign(e, { url: new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`) });
  return state;
}

function access(names: readonly string[], o: { maxLoaded?: number; atStart?: boolean } = {}): AdapterAccess {
  return {
    adapters: names.map((name) => ({
      name,
      requestFields: {},
      load: o.atStart === true ? undefined : { path: '/v1/load_lora_adapter', body: { lora_name: name, lora_path: `/l/${name}` } },
      unload: o.atStart === true ? undefined : { path: '/v1/unload_lora_adapter', body: { lora_name: name } },
    })),
    maxLoaded: o.maxLoaded,
  };
}

function residency(t: import('node:test').TestContext, maxPerReplica = 4) {
  const dispatcher = new Agent();
  const counts = { loads: 0, failed: 0, unloads: 0 };
  const r = new AdapterResidency({
    dispatcher,
    maxPerReplica,
    loadTimeoutMs: 10_000,
    observer: {
      loaded: (_a, outcome) => (outcome === 'ok' ? counts.loads++ : counts.failed++),
      unloaded: () => counts.unloads++,
    },
  });
  t.after(async () => {
    await r.close();
    await dispatcher.close();
  });
  return { r, counts };
}

const replica = (e: ScriptedEngine, a: AdapterAccess, over: Partial<AdapterReplica> = {}): AdapterReplica => ({ id: 'r0', url: e.url, apiKey: undefined, generation: 1, adapterAccess: a, ...over });

async function use(r: AdapterResidency, rep: AdapterReplica, adapter: string): Promise<void> {
  const lease = r.acquire(rep, adapter);
  try {
    await lease.ready;
  } finally {
    lease.release();
  }
}

void test('residency: a burst of 16 requests for a new adapter loads it once, and all of them wait for that load', async (t) => {
  const e = await scriptedEngine(t);
  let open = (): void => undefined;
  e.gate = new Promise((resolve) => (open = resolve));
  const { r, counts } = residency(t);
  const rep = replica(e, access(['sql']));
  assert.deepEqual([...(r.holders('sql', [rep]) ?? ['?'])], []);
  const leases = Array.from({ length: 16 }, () => r.acquire(rep, 'sql'));
  // Loading counts as holding, so a request routed meanwhile joins this replica's load.
  assert.deepEqual([...(r.holders('sql', [rep]) ?? [])], ['r0']);
  await waitFor(() => e.calls.length === 1, { what: 'the load to reach the engine' });
  open();
  await Promise.all(leases.map((l) => l.ready));
  for (const l of leases) l.release();
  assert.deepEqual(e.calls, ['load sql']);
  assert.equal(counts.loads, 1);
});

void test('residency: over the bound the least recently used adapter is unloaded, never one a request holds', async (t) => {
  const e = await scriptedEngine(t);
  const { r, counts } = residency(t, 2);
  const rep = replica(e, access(['a', 'b', 'c', 'd']));
  await use(r, rep, 'a');
  await use(r, rep, 'b');
  await use(r, rep, 'a'); // a is used again: b is now the least recently used
  await use(r, rep, 'c');
  await waitFor(() => e.calls.includes('unload b'), { what: 'b to be unloaded' });
  assert.deepEqual(e.calls, ['load a', 'load b', 'load c', 'unload b']);
  assert.deepEqual([...(r.resident().get('r0') ?? [])].sort(), ['a', 'c']);
  // While a request holds a and c, d goes over the bound rather than pull either from under it.
  const holdA = r.acquire(rep, 'a');
  const holdC = r.acquire(rep, 'c');
  await use(r, rep, 'd');
  await waitFor(() => e.calls.includes('unload d'), { what: 'd, the only adapter nobody holds, to be unloaded' });
  holdA.release();
  holdC.release();
  assert.deepEqual(e.calls.slice(4), ['load d', 'unload d']);
  assert.equal(counts.unloads, 2);
});

void test('residency: the engine\'s own bound (e.g. --max-cpu-loras) wins over the gateway\'s', async (t) => {
  const e = await scriptedEngine(t);
  const { r } = residency(t, 8);
  const rep = replica(e, access(['a', 'b'], { maxLoaded: 1 }));
  await use(r, rep, 'a');
  await use(r, rep, 'b');
  await waitFor(() => e.calls.includes('unload a'), { what: 'a to be unloaded at a bound of 1' });
});

void test('residency: an adapter loaded again right after its unload waits for the unload to finish', async (t) => {
  const e = await scriptedEngine(t);
  const { r } = residency(t, 1);
  const rep = replica(e, access(['a', 'b']));
  await use(r, rep, 'a');
  await use(r, rep, 'b');
  await use(r, rep, 'a');
  await waitFor(() => e.calls.length === 5, { what: 'five calls' });
  assert.deepEqual(e.calls, ['load a', 'load b', 'unload a', 'load a', 'unload b']);
});

void test('residency: a refused load is an AdapterLoadError naming the adapter, and the next request tries again', async (t) => {
  const e = await scriptedEngine(t);
  e.refuse.add('bad');
  const { r, counts } = residency(t);
  const rep = replica(e, access(['bad']));
  await assert.rejects(use(r, rep, 'bad'), (err) => err instanceof AdapterLoadError && err.adapter === 'bad' && /adapter "bad".*404 No adapter found/.test(err.message));
  assert.deepEqual([...(r.holders('bad', [rep]) ?? ['?'])], [], 'a failed load holds nothing');
  e.refuse.delete('bad');
  await use(r, rep, 'bad');
  assert.deepEqual(e.calls, ['load bad', 'load bad']);
  assert.deepEqual(counts, { loads: 1, failed: 1, unloads: 0 });
});

void test('residency: what the engine lists in /v1/models is held already, and is not loaded again', async (t) => {
  const e = await scriptedEngine(t);
  e.loaded.add('sql');
  const { r, counts } = residency(t);
  const rep = replica(e, access(['sql']));
  await use(r, rep, 'sql');
  assert.deepEqual(e.calls, []);
  assert.equal(counts.loads, 0);
});

void test('residency: a restarted replica (new generation) holds nothing until loaded again', async (t) => {
  const e = await scriptedEngine(t);
  const { r } = residency(t);
  await use(r, replica(e, access(['sql'])), 'sql');
  e.loaded.clear();
  const restarted = replica(e, access(['sql']), { generation: 2 });
  assert.deepEqual([...(r.holders('sql', [restarted]) ?? ['?'])], []);
  await use(r, restarted, 'sql');
  assert.deepEqual(e.calls, ['load sql', 'load sql']);
});

void test('residency: adapters registered at start are no question of residency', async (t) => {
  const e = await scriptedEngine(t);
  const { r } = residency(t);
  const rep = replica(e, access(['sql'], { atStart: true }));
  assert.equal(r.holders('sql', [rep]), undefined);
  await use(r, rep, 'sql');
  assert.deepEqual(e.calls, []);
});
