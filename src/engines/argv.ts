// Reading what a profile's pass-through args already say, so generated flags never fight them.

/** Whether the args already set one of these flags, as `--flag value` or `--flag=value`. */
export function hasFlag(args: readonly string[], ...names: readonly string[]): boolean {
  return args.some((a) => names.some((n) => a === n || a.startsWith(`${n}=`)));
}

/** The value the args give one of these flags (either spelling), or undefined when they do not. */
export function flagValue(args: readonly string[], ...names: readonly string[]): string | undefined {
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === undefined) continue;
    for (const n of names) {
      if (a === n) return args[i + 1];
      if (a.startsWith(`${n}=`)) return a.slice(n.length + 1);
    }
  }
  return undefined;
}

/** The data-parallel size the args ask vLLM (or the sim) for: each rank publishes KV events on its
 * own port, so placement reserves that many. */
export function dataParallelSizeOf(args: readonly string[]): number {
  const v = Number(flagValue(args, '--data-parallel-size', '-dp') ?? '1');
  return Number.isInteger(v) && v > 0 ? v : 1;
}
