// A ready replica's adapter access crosses the agent link intact: a gateway in front of a remote
// agent loads and names adapters exactly as one in the same process does.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { sglangAdapterAccess } from '../../src/engines/index.js';
import { decodeAgentMessage, encodeAgentMessage, type AgentMessage } from '../../src/link/index.js';
import { profile } from '../engines/specs.js';

const state = {
  id: 'r0',
  model: 'm',
  adapters: ['sql'],
  url: 'http://10.0.0.2:8100/',
  apiKey: undefined,
  generation: 3,
  kvEvents: false,
  blockSizeTokens: 16,
  hashSeed: '0',
  dataParallelSize: 1,
};

void test('link: adapter access (calls, request fields, bound) survives the codec', () => {
  const adapterAccess = sglangAdapterAccess(profile({ engine: 'sglang', runtimeLora: true, args: ['--max-loaded-loras', '3'], adapters: [{ name: 'sql', path: '/l/sql' }] }));
  const msg: AgentMessage = { type: 'replicas', ready: [{ ...state, adapterAccess }], actors: [] };
  const back = decodeAgentMessage(encodeAgentMessage(7, msg)).msg;
  assert.equal(back.type, 'replicas');
  assert.deepEqual(back.type === 'replicas' ? back.ready[0]?.adapterAccess : undefined, adapterAccess);
});

void test('link: a replica without adapter access decodes without it', () => {
  const back = decodeAgentMessage(encodeAgentMessage(1, { type: 'replicas', ready: [state], actors: [] })).msg;
  assert.equal(back.type === 'replicas' ? back.ready[0]?.adapterAccess : 'wrong type', undefined);
});

void test('link: a malformed adapter access is refused with its path, not half-applied', () => {
  const bad = { type: 'replicas', ready: [{ ...state, adapterAccess: { adapters: [{ name: 'sql', requestFields: {}, load: { path: 7, body: {} } }] } }], actors: [] };
  assert.throws(() => decodeAgentMessage(encodeAgentMessage(1, bad as unknown as AgentMessage)), /adapterAccess\.adapters\[0\]\.load\.path: not a string/);
});
