// A profile's reasoning_parser, written as each engine takes it. The profile says it in vLLM's
// words (qwen3, deepseek_r1, ...), the one name an operator moving a model between engines keeps;
// each builder turns it into its engine's flag. Set in args already, it is left to args.
import { hasFlag } from './argv.js';
import type { Profile } from './types.js';
import { ProfileError } from './validate.js';

/** The parsers the sim implements (its --reasoning-parser). */
const simParsers = ['qwen3', 'deepseek_r1'];

/** Refuses a reasoning_parser the sim does not implement, naming those it does. */
export function validateSimReasoningParser(p: Profile): void {
  const parser = p.reasoningParser ?? '';
  if (parser !== '' && !simParsers.includes(parser)) {
    throw new ProfileError('reasoning_parser', `profile ${p.name}: reasoning_parser ${JSON.stringify(parser)} is not one the sim implements (have ${simParsers.join(', ')})`);
  }
}

/** The flags that make `engine` split a thinking answer into reasoning and content, for this profile. */
export function reasoningParserArgs(engine: 'vllm' | 'sglang' | 'trtllm' | 'llamacpp' | 'sim', p: Profile): string[] {
  const parser = p.reasoningParser ?? '';
  if (parser === '') return [];
  switch (engine) {
    case 'vllm':
      // Since vLLM 0.9 the parser alone turns reasoning on (--enable-reasoning was removed in 0.10).
      return hasFlag(p.args, '--reasoning-parser') ? [] : ['--reasoning-parser', parser];
    case 'sim':
      return hasFlag(p.args, '--reasoning-parser') ? [] : ['--reasoning-parser', parser];
    case 'sglang':
      // SGLang spells its parsers with dashes (deepseek-r1) where vLLM has underscores.
      return hasFlag(p.args, '--reasoning-parser') ? [] : ['--reasoning-parser', parser.replaceAll('_', '-')];
    case 'trtllm':
      return hasFlag(p.args, '--reasoning_parser') ? [] : ['--reasoning_parser', parser.replaceAll('_', '-')];
    case 'llamacpp':
      // llama-server has one switch, not a parser per model: it finds the think tags from the model's
      // chat template (hence --jinja) and answers in reasoning_content. Its split trims the newlines
      // around the think block, which docs/gateway.md#thinking-answers says what it costs a migration.
      return hasFlag(p.args, '--reasoning-format') ? [] : ['--reasoning-format', 'deepseek'];
  }
}
