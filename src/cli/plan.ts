// `llmgw plan`: filled in by the foundation work.
export async function main(_argv: readonly string[]): Promise<number> {
  process.stdout.write('plan: no config loader yet\n');
  return 1;
}
