// A request naming an adapter reaches each engine in the form that engine takes: vLLM by the adapter's
// name as the model, SGLang by the base name with lora_path, llama.cpp by the base name with the
// adapter's index and scale in `lora`. The gateway only applies the fields engines/ described.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { Registry } from 'prom-client';
import { request } from 'undici';
import { llamaCppAdapterAccess, sglangAdapterAccess, vllmAdapterAccess, type AdapterAccess, type Profile } from '../../src/engines/index.js';
import type { ReplicaDirectory, ReplicaView } from '../../src/routing/index.js';
import type { AdapterDirectory } from '../../src/upstream/index.js';
import { gatewayDefaults, startGateway } from '../../src/gateway/index.js';
import { profile } from '../engines/specs.js';
import { startFakeEngine } from '../gateway/fake-engine.js';

const adapters = [
  { name: 'sql', path: '/l/sql' },
  { name: 'poet', path: '/l/poet' },
];

const rows: readonly { engine: string; access: (p: Profile) => AdapterAccess; want: Record<string, unknown> }[] = [
  { engine: 'vllm', access: vllmAdapterAccess, want: { model: 'poet' } },
  { engine: 'sglang', access: sglangAdapterAccess, want: { model: 'm', lora_path: 'poet' } },
  { engine: 'llamacpp', access: llamaCppAdapterAccess, want: { model: 'm', lora: [{ id: 1, scale: 1 }] } },
];
for (const r of rows) {
  void test(`adapter fields: ${r.engine} gets a request for an adapter in its own form`, async (t) => {
    const e = await startFakeEngine({ id: 'r0' });
    t.after(() => e.close());
    const view: ReplicaView = {
      id: 'r0',
      node: 'local',
      model: 'm',
      adapters: adapters.map((a) => a.name),
      url: e.url,
      apiKey: undefined,
      generation: 1,
      kvEvents: false,
      blockSizeTokens: 16,
      hashSeed: '0',
      dataParallelSize: 1,
      adapterAccess: r.access(profile({ engine: r.engine, adapters })),
    };
    const directory: ReplicaDirectory & AdapterDirectory = {
      ready: () => [view],
      models: () => ['m'],
      adapters: () => adapters.map((a) => ({ name: a.name, base: 'm' })),
    };
    const gw = await startGateway({ config: { ...gatewayDefaults, port: 0, router: { ...gatewayDefaults.router, loadPollIntervalMs: 0 } }, directory, registry: new Registry() });
    t.after(() => gw.close());
    const res = await request(new URL('/v1/chat/completions', gw.url), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'poet', messages: [{ role: 'user', content: 'hi' }], temperature: 0.5 }),
      signal: AbortSignal.timeout(10_000),
    });
    assert.equal(res.statusCode, 200);
    await res.body.dump();
    const body = e.seen[0]?.body;
    assert.deepEqual({ model: body?.model, lora_path: body?.lora_path, lora: body?.lora }, { model: undefined, lora_path: undefined, lora: undefined, ...r.want });
    assert.equal(body?.temperature, 0.5, 'the rest of the body goes as the client wrote it');
  });
}
