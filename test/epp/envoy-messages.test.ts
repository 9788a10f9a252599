// The ext_proc messages' rules: the body back in chunks of at most 62,000 bytes that reassemble
// byte for byte (a UTF-8 character split across two is still the same bytes), the subset hint as
// llm-d reads it, Envoy's headers, and the destination in header and metadata alike.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { bodyChunkBytes, bodyChunks, destinationKey, destinationNamespace, subsetKey, subsetNamespace } from '../../src/epp/index.js';
import { destinationMetadata, headerMap, immediateFor, subsetOf, type PbValue } from '../../src/epp/envoy-messages.js';
import { LlmgwError } from '../../src/errors/index.js';

void test("envoy messages: llm-d's names and bound", () => {
  assert.equal(bodyChunkBytes, 62_000);
  assert.equal(destinationKey, 'x-gateway-destination-endpoint');
  assert.equal(destinationNamespace, 'envoy.lb');
  assert.equal(subsetNamespace, 'envoy.lb.subset_hint');
  assert.equal(subsetKey, 'x-gateway-destination-endpoint-subset');
});

const sizes = [0, 1, 61_999, 62_000, 62_001, 124_000, 200_000];
for (const n of sizes) {
  void test(`envoy messages: a ${n}-byte body comes back in chunks of at most 62,000, reassembled exactly, end_of_stream on the last only`, () => {
    const body = Buffer.alloc(n, 0);
    for (let i = 0; i < n; i++) body[i] = (i * 31) % 251;
    const chunks = bodyChunks(body, true);
    assert.equal(chunks.length, Math.max(1, Math.ceil(n / bodyChunkBytes)));
    assert.ok(chunks.every((c) => c.body.length <= bodyChunkBytes));
    assert.ok(Buffer.concat(chunks.map((c) => c.body)).equals(body));
    assert.deepEqual(chunks.map((c) => c.end_of_stream), chunks.map((_, i) => i === chunks.length - 1));
    assert.ok(bodyChunks(body, false).every((c) => !c.end_of_stream), 'a body that is not the end of the stream ends no chunk');
  });
}

void test('envoy messages: a multi-byte UTF-8 character across the 62,000-byte boundary is split as bytes and reassembles to the same text', () => {
  // 61,999 ASCII bytes, then a 4-byte emoji whose bytes straddle the boundary, then 3-byte CJK.
  const text = `${'a'.repeat(61_999)}\u{1F600}${'漢'.repeat(30_000)}`;
  const body = Buffer.from(text);
  const chunks = bodyChunks(body, true);
  assert.equal(chunks[0]?.body.length, 62_000, 'the bound is bytes, not characters');
  assert.equal(chunks[0]?.body.subarray(-1)[0], 0xf0, "the emoji's first byte ends the first chunk");
  assert.equal(Buffer.concat(chunks.map((c) => c.body)).toString('utf8'), text);
});

void test('envoy messages: the subset hint is undefined without the namespace or key, and narrows to its strings otherwise', () => {
  const hint = (values: PbValue[]) => ({ filter_metadata: { [subsetNamespace]: { fields: { [subsetKey]: { listValue: { values } } } } } });
  assert.equal(subsetOf(undefined), undefined);
  assert.equal(subsetOf({ filter_metadata: {} }), undefined);
  assert.equal(subsetOf({ filter_metadata: { [subsetNamespace]: { fields: {} } } }), undefined);
  assert.deepEqual(subsetOf(hint([])), [], 'an empty list: a filter upstream matched nothing');
  assert.deepEqual(subsetOf(hint([{ stringValue: '10.0.0.1:8000' }, { numberValue: 3 }, { stringValue: '10.0.0.2' }])), ['10.0.0.1:8000', '10.0.0.2']);
  assert.equal(subsetOf({ filter_metadata: { [subsetNamespace]: { fields: { [subsetKey]: { stringValue: '10.0.0.1' } } } } }), undefined, 'not a list: any endpoint');
});

void test("envoy messages: Envoy's headers by lower-cased name, raw_value first, a repeated name's last value", () => {
  const h = headerMap([
    { key: 'Content-Type', raw_value: Buffer.from('application/json') },
    { key: 'x-a', value: 'plain' },
    { key: 'x-b', raw_value: Buffer.alloc(0), value: 'fallback' },
    { key: 'x-c', value: '1' },
    { key: 'X-C', value: '2' },
    { value: 'no key' },
  ]);
  assert.deepEqual(h, { 'content-type': 'application/json', 'x-a': 'plain', 'x-b': 'fallback', 'x-c': '2' });
});

void test('envoy messages: the destination rides in envoy.lb metadata under the header name', () => {
  assert.deepEqual(destinationMetadata('10.0.0.1:8000,10.0.0.2:8000'), {
    fields: { 'envoy.lb': { structValue: { fields: { 'x-gateway-destination-endpoint': { stringValue: '10.0.0.1:8000,10.0.0.2:8000' } } } } },
  });
});

void test("envoy messages: an ImmediateResponse carries the gateway's status and OpenAI-style body", () => {
  const r = immediateFor(new LlmgwError('LLMGW_NO_REPLICA', 'no ready endpoint')).immediate_response as { status: { code: number }; body: Buffer; details: string; headers: { set_headers: { header: { key: string } }[] } };
  assert.equal(r.status.code, 503);
  const body = JSON.parse(r.body.toString()) as { error: { message: string; code: string; type: string } };
  assert.equal(body.error.message, 'no ready endpoint');
  assert.equal(r.details, body.error.code);
  assert.ok(r.headers.set_headers.some((h) => h.header.key === 'content-type'));
});
