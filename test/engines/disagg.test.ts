// A profile's role as each engine is told it, and what the gateway learns of it.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { disaggOf, Sglang, Sim, Vllm } from '../../src/engines/index.js';
import { defaultKvEventsConfig } from '../../src/engines/index.js';
import { host, shard } from './specs.js';

const vllm = new Vllm({ bin: 'vllm', launchMode: 'mp', rayBin: '' }, defaultKvEventsConfig);
const sim = new Sim({ bin: 'llmgw', blockSize: 16 }, defaultKvEventsConfig);
const sglang = new Sglang({ python: 'python3' });
const argsOf = (e: Vllm | Sim | Sglang, p: Parameters<typeof shard>[1]): readonly string[] => e.commands(shard({}, p), host())[0]?.args ?? [];
const after = (a: readonly string[], flag: string): string | undefined => a[a.indexOf(flag) + 1];

// Every role runs kv_both, as vLLM's NixlConnector guide runs both halves: the connector acts on
// each request's kv_transfer_params, and a prefill or decode replica can still take a whole request.
for (const role of ['prefill', 'decode', 'both'] as const) {
  for (const [name, e] of [['vllm', vllm], ['sim', sim]] as const) {
    void test(`${name}: a ${role} replica runs the NixlConnector as kv_both`, () => {
      const cfg = after(argsOf(e, { engine: name, role }), '--kv-transfer-config');
      assert.deepEqual(JSON.parse(cfg ?? 'null'), { kv_connector: 'NixlConnector', kv_role: 'kv_both' });
    });
  }
}

void test('vllm: no role, no connector; a profile that writes its own --kv-transfer-config keeps it alone', () => {
  assert.equal(argsOf(vllm, {}).includes('--kv-transfer-config'), false);
  const own = argsOf(vllm, { role: 'decode', args: ['--kv-transfer-config', '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'] });
  assert.equal(own.filter((a) => a === '--kv-transfer-config').length, 1);
});

void test('sglang: a prefill replica runs its mode and bootstrap port, a decode replica its mode alone', () => {
  const p = argsOf(sglang, { engine: 'sglang', role: 'prefill', bootstrapPort: 9001 });
  assert.deepEqual([after(p, '--disaggregation-mode'), after(p, '--disaggregation-bootstrap-port')], ['prefill', '9001']);
  const d = argsOf(sglang, { engine: 'sglang', role: 'decode' });
  assert.deepEqual([after(d, '--disaggregation-mode'), d.includes('--disaggregation-bootstrap-port')], ['decode', false]);
  assert.equal(after(argsOf(sglang, { engine: 'sglang', role: 'prefill' }), '--disaggregation-bootstrap-port'), '8998', "SGLang's own default");
});

void test('disaggOf: the gateway learns the role, the protocol and where a SGLang prefill bootstraps', () => {
  assert.equal(disaggOf(shard().profile), undefined);
  assert.deepEqual(disaggOf(shard({}, { engine: 'sim', role: 'prefill' }).profile), { role: 'prefill', protocol: 'nixl', bootstrapPort: 0 });
  assert.deepEqual(disaggOf(shard({}, { engine: 'sglang', role: 'prefill', args: ['--disaggregation-bootstrap-port', '9100'] }).profile), { role: 'prefill', protocol: 'sglang', bootstrapPort: 9100 });
});
