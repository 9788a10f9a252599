// `llmgw viz`: one of the runtime's machines as a diagram, drawn from the very definitions the agent
// runs (never a copy kept beside them), as SVG, Mermaid or Graphviz dot on stdout.
import { actorKinds, chartOf, machinesByKind, toDot, toMermaid, toSvg, type ActorKind, type Chart } from '../actors/index.js';
import { readOptions } from './doctor.js';

const formats = { svg: toSvg, mermaid: toMermaid, dot: toDot } as const satisfies Record<string, (c: Chart) => string>;
type Format = keyof typeof formats;

const usage = `usage: llmgw viz [--machine ${actorKinds.join('|')}] [--format ${Object.keys(formats).join('|')}]

Prints a state machine of the agent as a diagram (default: the shard, as SVG):
  llmgw viz --machine replica --format mermaid
  llmgw viz --machine shard --format dot | dot -Tpng > shard.png
`;

const isKind = (v: string): v is ActorKind => (actorKinds as readonly string[]).includes(v);
const isFormat = (v: string): v is Format => v in formats;

/** Runs `viz` with `out`/`err` for its text; returns the exit code (2 on bad usage). */
export function viz(argv: readonly string[], io: { out: (t: string) => void; err: (t: string) => void }): number {
  const opts = readOptions(argv, ['--machine', '--format']);
  if (opts.help) {
    io.out(usage);
    return 0;
  }
  const machine = opts.values['--machine'] ?? 'shard';
  const format = opts.values['--format'] ?? 'svg';
  const problem =
    opts.error ??
    (!isKind(machine) ? `--machine ${JSON.stringify(machine)} is not one of ${actorKinds.join(', ')}` : undefined) ??
    (!isFormat(format) ? `--format ${JSON.stringify(format)} is not one of ${Object.keys(formats).join(', ')}` : undefined);
  if (problem !== undefined || !isKind(machine) || !isFormat(format)) {
    io.err(`llmgw viz: ${problem ?? 'bad arguments'}\n${usage}`);
    return 2;
  }
  io.out(formats[format](chartOf(machinesByKind[machine])));
  return 0;
}

/** `llmgw viz` on this process's stdout. */
export async function main(argv: readonly string[]): Promise<number> {
  return viz(argv, { out: (t) => process.stdout.write(t), err: (t) => process.stderr.write(t) });
}
