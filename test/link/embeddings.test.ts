// An embedding model crosses the agent link intact: a remote agent is assigned its profile's task and
// pooling, and its ready replica says it embeds, so the gateway sends it embeddings as it would an
// in-process one; a profile or replica without them decodes as before.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { decodeAgentMessage, decodeGatewayMessage, encodeAgentMessage, encodeGatewayMessage, type AgentMessage, type GatewayMessage } from '../../src/link/index.js';
import { shard } from '../engines/specs.js';

const state = {
  id: 'r0',
  model: 'embed',
  adapters: [],
  url: 'http://10.0.0.2:8100/',
  apiKey: undefined,
  generation: 1,
  kvEvents: false,
  blockSizeTokens: 16,
  hashSeed: '0',
  dataParallelSize: 1,
};

const assigned = (p: Parameters<typeof shard>[1]): GatewayMessage => ({
  type: 'assign',
  replicas: [{ replicaId: 'r0', model: 'embed', adapters: [], shards: [shard({}, p)], blockSizeTokens: 16, hashSeed: '0', dataParallelSize: 1, capacityBlocks: 1 }],
});
const profileBack = (m: GatewayMessage) => {
  const back = decodeGatewayMessage(encodeGatewayMessage(m));
  return back.type === 'assign' ? back.replicas[0]?.shards[0]?.profile : undefined;
};

void test('link: a profile\'s task and pooling survive the codec; a generating profile has neither', () => {
  const p = profileBack(assigned({ engine: 'vllm', task: 'embed', pooling: 'cls' }));
  assert.equal(p?.task, 'embed');
  assert.equal(p?.pooling, 'cls');
  const plain = profileBack(assigned({ engine: 'vllm' }));
  assert.equal(plain !== undefined && 'task' in plain, false);
  assert.equal(plain !== undefined && 'pooling' in plain, false);
});

void test('link: an unknown task is refused with its path', () => {
  assert.throws(() => profileBack(assigned({ engine: 'vllm', task: 'rerank' as 'embed' })), /profile\.task: "rerank" is not one of generate, embed/);
});

void test('link: a ready replica that embeds says so across the link; one that generates does not', () => {
  const msg: AgentMessage = { type: 'replicas', ready: [{ ...state, embeds: true }, { ...state, id: 'r1' }], actors: [] };
  const back = decodeAgentMessage(encodeAgentMessage(3, msg)).msg;
  assert.equal(back.type, 'replicas');
  if (back.type !== 'replicas') return;
  assert.equal(back.ready[0]?.embeds, true);
  assert.equal(back.ready[1]?.embeds, undefined);
});
