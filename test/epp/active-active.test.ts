// Two `llmgw epp` processes over the same pool, as two replicas of the EPP's Deployment behind one
// Envoy: each subscribes to every endpoint's KV events, so a conversation whose first turn went
// through one replica has its second turn sent to the pod that cached it by either, from the
// precise tier (the one that routed nothing of it knows the pod's blocks from the events alone).
import { strict as assert } from 'node:assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { waitFor } from '../support/wait.js';
import { endpointsFile, extProcClient, forward, pickFor, respond, startSimPod } from './envoy.js';
import { startEppProcess, type EppProcess } from './epp-process.js';

const model = 'm';
const system = 'You are one of two EPP replicas answering the same Envoy; be brief. '.repeat(40);
const chat = (turns: readonly { role: string; content: string }[]): string => JSON.stringify({ model, messages: [{ role: 'system', content: system }, ...turns], max_tokens: 8 });

async function scraped(e: EppProcess, name: string, labels = ''): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${e.metricsPort}/metrics`)).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith(`${name}${labels}`) && (labels !== '' || l.startsWith(`${name} `) || l.startsWith(`${name}{`)))
    .reduce((n, l) => n + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}

void test('epp active-active: both replicas send the second turn to the pod that cached the first', { timeout: 240_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-epp-aa-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const pods = [await startSimPod(t, 'pod-a', model, '127.0.0.1'), await startSimPod(t, 'pod-b', model, '127.0.0.2')];
  const file = join(dir, 'endpoints.yaml');
  writeFileSync(file, endpointsFile(pods));
  const config = `
discovery: { file: ${JSON.stringify(file)}, poll_ms: 100 }
pool:
  models: [${model}]
  kv_events: "tcp://{address}:{labels.kv_port}"
  replay: "tcp://{address}:{labels.replay_port}"
  hash_seed: "7"
  tokenizer: bytes
  health_interval_ms: 100
listen: { host: 127.0.0.1, ext_proc_port: 0, health_port: 0, metrics_port: 0 }
gateway:
  router: { prediction_ttl_ms: 0 }
`;
  const replicas = [await startEppProcess(t, config), await startEppProcess(t, config)] as const;
  const clients = replicas.map((r) => extProcClient(t, r.extProcPort));
  const [first, second] = clients;
  assert.ok(first !== undefined && second !== undefined);
  // Both replicas see both pods healthy before the conversation starts.
  for (const c of clients) {
    let n = 0;
    await waitFor(
      async () => {
        const p = await pickFor(c, chat([{ role: 'user', content: `warm-up ${n++}` }]));
        p.x.close();
        return p.destination?.split(',').length === 2;
      },
      { timeoutMs: 30_000, what: 'both pods ready on the replica' },
    );
  }

  const turn1 = [{ role: 'user', content: 'Which pod holds this conversation, whichever replica asks? '.repeat(8) }];
  const p1 = await pickFor(first, chat(turn1));
  const chosen = p1.destination?.split(',')[0] ?? '';
  const answer = await forward(chosen, '/v1/chat/completions', p1.forwarded);
  await respond(p1.x, chosen, answer);
  const text = (JSON.parse(answer.toString()) as { choices: { message: { content: string } }[] }).choices[0]?.message.content ?? '';
  const turn2 = [...turn1, { role: 'assistant', content: text }, { role: 'user', content: 'And the second turn?' }];

  for (const [i, c] of clients.entries()) {
    const r = replicas[i];
    assert.ok(r !== undefined);
    const before = await scraped(r, 'llmgw_epp_picks_total', '{tier="precise"}');
    const p2 = await waitFor(
      async () => {
        const p = await pickFor(c, chat(turn2));
        p.x.close();
        return (await scraped(r, 'llmgw_epp_picks_total', '{tier="precise"}')) > before ? p : undefined;
      },
      { timeoutMs: 20_000, intervalMs: 100, what: `a precise decision on replica ${i}` },
    );
    assert.equal(p2.destination?.split(',')[0], chosen, `replica ${i} ${i === 0 ? 'routed the first turn' : 'routed nothing of it'} and still picks the pod that cached it`);
  }
});
