// A node agent in its own process, for the adoption test: started with a JSON job on argv, it
// prints "ready" once every replica is ready and is then killed by the test without any chance to
// stop its engines, as a crashed or OOM-killed agent would be.
import { NodeAgent, type ReplicaPlan } from '../../src/actors/index.js';
import { defaultEnginesConfig, defaultKvEventsConfig, Registry } from '../../src/engines/index.js';
import { agentConfig, llmgwMain, scriptedEngine } from './scripted.js';

const job = JSON.parse(process.argv[2] ?? '{}') as { dir: string; plans: ReplicaPlan[] };
const registry = new Registry(defaultEnginesConfig, defaultKvEventsConfig);
registry.add(scriptedEngine);
const agent = new NodeAgent({
  node: 'local',
  advertiseAddr: '127.0.0.1',
  config: agentConfig(job.dir),
  engines: registry,
  host: { env: process.env, cpus: 1, llmgwCommand: [process.execPath, llmgwMain] },
});
agent.onChange(() => {
  if (job.plans.every((p) => agent.ready(p.model).some((r) => r.id === p.replicaId))) process.stdout.write('ready\n');
});
agent.start(job.plans);
process.once('SIGTERM', () => {
  void agent.close().then(() => process.exit(0));
});
