// The two bodies of a disaggregated request, as vLLM's toy proxy and SGLang's balancer build them.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { bootstrapFor, nixlDecodeBody, nixlPrefillBody, returnedTransferParams, sglangBody } from '../../src/upstream/index.js';

const client = { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 300, stream: true, stream_options: { include_usage: true }, min_tokens: 5 };

void test('nixl prefill: the connector asked to keep blocks for a remote decode, one token, unstreamed, no minimum', () => {
  assert.deepEqual(nixlPrefillBody(client), {
    model: 'm',
    messages: client.messages,
    max_tokens: 1,
    stream: false,
    kv_transfer_params: { do_remote_decode: true, do_remote_prefill: false, remote_engine_id: null, remote_block_ids: null, remote_host: null, remote_port: null },
  });
  assert.equal(nixlPrefillBody({ ...client, max_completion_tokens: 300 }).max_completion_tokens, 1, 'it would win over max_tokens');
});
void test('nixl decode: the client request with the prefill answer\'s params, verbatim', () => {
  const params = { do_remote_prefill: true, remote_block_ids: [3, 4], remote_engine_id: 'e', remote_host: 'h', remote_port: 5600, tp_size: 1, extra: { kept: true } };
  assert.deepEqual(nixlDecodeBody(client, params), { ...client, kv_transfer_params: params });
});
void test('nixl: an answer without params, or params offering no remote prefill, says why', () => {
  assert.deepEqual(returnedTransferParams({ kv_transfer_params: { do_remote_prefill: true, x: 1 } }), { ok: true, params: { do_remote_prefill: true, x: 1 } });
  assert.match(String((returnedTransferParams({ choices: [] }) as { why?: string }).why), /no kv_transfer_params/);
  assert.match(String((returnedTransferParams({ kv_transfer_params: { do_remote_prefill: false } }) as { why?: string }).why), /do_remote_prefill is not true/);
});
void test('sglang: both halves carry the prefill\'s bootstrap host, port and one room', () => {
  const b = bootstrapFor('10.0.0.7', 8998, 42);
  assert.deepEqual(sglangBody(client, b), { ...client, bootstrap_host: '10.0.0.7', bootstrap_port: 8998, bootstrap_room: 42 });
  assert.ok(Number.isSafeInteger(bootstrapFor('h', 1).room), 'a room JSON carries exactly');
});
