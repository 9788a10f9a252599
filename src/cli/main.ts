#!/usr/bin/env node
// The llmgw command: picks a subcommand and hands it the rest of argv. Each subcommand lives in its
// own module, loaded only when asked for, so `llmgw plan` never loads zeromq or the tokenizer.

interface Subcommand {
  readonly summary: string;
  readonly load: () => Promise<{ main(argv: readonly string[]): Promise<number> }>;
}

const subcommands: Readonly<Record<string, Subcommand>> = {
  doctor: { summary: "check this node's GPUs (MIG modes, instances) and whether anything can run", load: () => import('./doctor.js') },
  engines: { summary: 'engines install ENGINE FROM: install and check an engine build for the agent; engines list; engines tiny-model: a small qwen3 GGUF to try llama.cpp with', load: () => import('./engines.js') },
  agent: { summary: "run this node's agent alone: start, supervise and adopt the config's engines", load: () => import('./agent.js') },
  ctl: { summary: 'operator views: ctl nodes lists devices grouped by class, or every node of a running gateway; ctl status shows every node and actor of a running gateway', load: () => import('./ctl.js') },
  keys: { summary: 'make a CURVE keypair for the agent link (gateway and each agent have one)', load: () => import('./keys.js') },
  plan: { summary: 'print every process the config would start, with its environment', load: () => import('./plan.js') },
  sim: { summary: 'run the simulated vLLM engine (OpenAI API, prefix cache, KV events) or list its fake devices', load: () => import('./sim.js') },
  bench: { summary: 'bench e2e: every routing policy against the oracle on a fleet of sim replicas', load: () => import('./bench.js') },
  viz: { summary: 'print a machine (shard, replica, publisher, node) as SVG, Mermaid or dot, from the definitions the agent runs', load: () => import('./viz.js') },
  epp: { summary: "run the router as Envoy's ext_proc endpoint picker (Gateway API Inference Extension) over a pool's endpoints", load: () => import('./epp.js') },
  serve: { summary: 'run the OpenAI gateway and this node\'s agent in one process (default: two sim replicas on 127.0.0.1:8080)', load: () => import('./serve.js') },
};

function usage(): string {
  const width = Math.max(...Object.keys(subcommands).map((n) => n.length));
  const lines = Object.entries(subcommands).map(([n, s]) => `  ${n.padEnd(width)}  ${s.summary}`);
  return `usage: llmgw <command> [options]\n\ncommands:\n${lines.join('\n')}\n`;
}

async function run(argv: readonly string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(usage());
    return 0;
  }
  if (name === undefined) {
    // A usage error: on stderr, so `llmgw > out` shows it and a script's stdout stays empty.
    process.stderr.write(usage());
    return 2;
  }
  const sub = subcommands[name];
  if (sub === undefined) {
    process.stderr.write(`llmgw: unknown command ${JSON.stringify(name)} (have ${Object.keys(subcommands).join(', ')})\n`);
    return 2;
  }
  const mod = await sub.load();
  return mod.main(rest);
}

run(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(`llmgw: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  },
);
